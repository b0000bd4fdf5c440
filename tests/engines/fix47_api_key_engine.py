#!/usr/bin/env python3
"""A stand-in for llama-cpp-python's server started with ``--api_key`` (standard library only).

    python fix47_api_key_engine.py --port N [--status 401|403]

Like llama-cpp-python 0.3.36: no ``/health`` (404), and every ``/v1/...`` request without the key is
answered ``--status`` with the body ``{"detail": "Invalid API key"}``, uvicorn logging each one as
``INFO:     127.0.0.1:50000 - "GET /v1/models HTTP/1.1" 401 Unauthorized``. It never becomes ready to a
client that does not send the key: a collector that polls on waits for its lease to run out.
"""

from __future__ import annotations

import argparse
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

REASONS = {401: "Unauthorized", 403: "Forbidden", 404: "Not Found"}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--status", type=int, default=401)
    args = ap.parse_args()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            status = args.status if self.path.startswith("/v1/") else 404
            body = json.dumps({"detail": "Invalid API key" if status != 404 else "Not Found"}).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            print(
                f'INFO:     127.0.0.1:50000 - "GET {self.path} HTTP/1.1" {status} {REASONS.get(status, "")}',
                flush=True,
            )

        def log_message(self, *_a: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    print("INFO:     Started server process [4242]", file=sys.stderr, flush=True)
    print(
        f"INFO:     Uvicorn running on http://127.0.0.1:{args.port} (Press CTRL+C to quit)",
        file=sys.stderr,
        flush=True,
    )
    server.serve_forever()


if __name__ == "__main__":
    main()
