"""How one API process is configured: the ledger it serves, limits, and whether reads are public."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass

__all__ = ["ENV_VAR", "ApiSettings"]

ENV_VAR = "LEDGER_API_SETTINGS"


@dataclass(frozen=True)
class ApiSettings:
    home: str
    database_url: str | None = None
    store: str | None = None
    public_reads: bool = False
    max_body_bytes: int = 16 * 1024 * 1024  # JSON requests (one envelope or a batch)
    max_artifact_bytes: int = 64 * 1024 * 1024 * 1024  # one artifact upload
    max_page: int = 1000
    log_format: str = "text"  # request logs: text (key=value) or json (one object per line)

    def to_env(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_env(cls) -> ApiSettings:
        """Settings handed to uvicorn worker processes through the environment."""
        text = os.environ.get(ENV_VAR)
        if not text:
            raise RuntimeError(f"{ENV_VAR} is not set; start the server with `ledger serve`")
        return cls(**json.loads(text))
