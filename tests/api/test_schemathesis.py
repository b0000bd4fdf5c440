"""Property-based requests generated from the published OpenAPI document: the server never answers 5xx."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.api.conftest import Deployment, Server


@pytest.mark.slow
def test_no_server_errors_for_generated_requests(
    server: Server, deployment: Deployment, tmp_path: Path
) -> None:
    st = shutil.which("schemathesis", path=str(Path(sys.executable).parent))
    assert st is not None, "schemathesis is not installed in the environment (pip install schemathesis)"
    args = [
        st,
        "run",
        f"{server.url}/openapi.json",
        "--checks",
        "not_a_server_error",
        "--max-examples",
        "8",
        "--header",
        f"Authorization: Bearer {deployment.tokens['writer']}",
        "--seed",
        "20260909",
        "--request-timeout",
        "30",
        "--report-dir",
        str(tmp_path),
    ]
    out = subprocess.run(args, check=False, capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-2000:]
