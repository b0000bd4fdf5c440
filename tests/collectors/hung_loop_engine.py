"""A stand-in engine whose inference loop hangs behind a live HTTP front (a campaign's engine command).

The stub (tests/engines/stub_openai.py, every one of its options) with ``--hang-loop-after N``: completion
requests after the first N get HTTP 200 and then never a token, until the client leaves — as llama.cpp's
server with a wedged slot, or vLLM's API server over a hung engine core — while ``/health`` and
``/v1/models`` still answer. Run by path: ``python hung_loop_engine.py --port P --hang-loop-after N …``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any


class _HungLoop:
    """ASGI wrapper: completion requests after the first ``after`` get HTTP 200 and then nothing until the
    client leaves (the inference loop hangs); every other path is the wrapped app's (the front answers)."""

    def __init__(self, app: Any, after: int) -> None:
        self.app, self.after, self.count = app, after, 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] == "POST" and scope["path"].endswith("completions"):
            self.count += 1
            if self.count > self.after:
                headers = [(b"content-type", b"text/event-stream")]
                await send({"type": "http.response.start", "status": 200, "headers": headers})
                while (await receive())["type"] != "http.disconnect":
                    pass
                return
        await self.app(scope, receive, send)


def _main(argv: list[str]) -> int:
    """The stub (tests/engines/stub_openai.py) with ``--hang-loop-after N``: its inference loop hangs."""
    from tests.engines import stub_openai

    i = argv.index("--hang-loop-after")
    after = int(argv[i + 1])
    serve_app = stub_openai.uvicorn.run

    def run_hung(app: Any, **kw: Any) -> None:
        serve_app(_HungLoop(app, after), **kw)

    stub_openai.uvicorn.run = run_hung  # type: ignore[assignment]
    return stub_openai.main(argv[:i] + argv[i + 2 :])


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository: tests.engines
    raise SystemExit(_main(sys.argv[1:]))
