"""The least FastAPI app: one async route that reads the body and answers ``201 {}`` (no dependencies, no
middleware, no database). bench_ingest's ``fastapi-floor`` phase POSTs the real one-entry bodies to it:
what the framework `ledger serve` is built on costs per request, beside the bare ASGI app
(``_bare_asgi.py``) and `ledger serve` itself."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

app = FastAPI()


@app.post("/v1/entries", status_code=201)
async def entries(request: Request) -> JSONResponse:
    await request.body()
    return JSONResponse({}, status_code=201)


@app.get("/")
async def root() -> JSONResponse:
    return JSONResponse({})
