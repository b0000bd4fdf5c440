"""The witness's HTTP app (C2SP tlog-witness): ``POST /add-checkpoint`` over ``ledger.witness_store``.

Served by ``ledger witness serve DIR`` (uvicorn); the witness directory comes in ``LEDGER_WITNESS_DIR``.
"""

from __future__ import annotations

import os
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import PlainTextResponse, Response

from ledger import __version__
from ledger.witness_store import WitnessHome

__all__ = ["ENV_DIR", "MAX_BODY_BYTES", "create_witness_app", "create_witness_app_from_env"]

ENV_DIR = "LEDGER_WITNESS_DIR"
MAX_BODY_BYTES = 64 * 1024  # an old line, 63 proof lines and a checkpoint with its signatures fit easily


def create_witness_app(home: WitnessHome) -> FastAPI:
    app = FastAPI(title="evidence-ledger witness", version=__version__, docs_url=None, redoc_url=None)

    @app.post("/add-checkpoint", summary="C2SP tlog-witness: cosign a checkpoint consistent with the last")
    async def add_checkpoint(request: Request) -> Response:
        body = b""
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_BODY_BYTES:
                return PlainTextResponse(f"request body over {MAX_BODY_BYTES} bytes\n", status_code=413)
        reply = await run_in_threadpool(home.add_checkpoint, body)
        # the media type exactly as the store names it (text/x.tlog.size takes no charset parameter)
        return Response(reply.body, status_code=reply.status, headers={"Content-Type": reply.media_type})

    @app.get("/", summary="The witness's name and verifier key")
    def about() -> dict[str, object]:
        return {"name": home.name, "vkey": home.vkey, "logs": home.logs()}

    return app


def create_witness_app_from_env() -> FastAPI:
    path = os.environ.get(ENV_DIR)
    if not path:
        raise RuntimeError(f"{ENV_DIR} is not set; start the witness with `ledger witness serve DIR`")
    return create_witness_app(WitnessHome(Path(path)))
