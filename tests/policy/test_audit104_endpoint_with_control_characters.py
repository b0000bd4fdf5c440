"""Audit 104 f2 (fail-open): an endpoint with a control character inside it read as the launch's.

``endpoint_key`` split the URL with ``urlsplit``, which deletes tab, CR and LF anywhere inside it:
``http://127.0.0.1:80\\n00`` read as ``http://127.0.0.1:8000``, the launch's ``details.base_url``, and a
harness result recording it was credited (QUALIFIED). A control character or a space anywhere in an
endpoint makes it no endpoint (None): the result is not credited (harness-other-endpoint)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ledger.policy.names import endpoint_key
from tests.policy import test_fail_closed as fc
from tests.policy.test_fix153_harness_endpoint import SERVED, _entries, _not_credited

INSIDE = [
    "http://127.0.0.1:80\n00",
    "http://127.0.\t0.1:8000",
    "http://127.0.0.1:8000\r",
    "\nhttp://127.0.0.1:8000",
    "http://127.0.0.1:80 00",
    "http://127.0.0.1:8000\x00",
    "http://127.0.0.1:8000\x7f",
    "http://127.0.0.1:8000\u00a0",
    "http://127.0.0.1:8000\u2028",
    " http://127.0.0.1:8000",
]


@pytest.mark.parametrize("url", INSIDE)
def test_an_endpoint_with_a_control_character_or_space_is_no_endpoint(url: str) -> None:
    assert endpoint_key(url) is None


@pytest.mark.parametrize("url", ["http://127.0.0.1:80\n00", "http://127.0.\t0.1:8000"])
@pytest.mark.parametrize("gate", ["semantic", "benchmark"])
def test_a_harness_result_recording_such_an_endpoint_is_not_credited(
    tmp_path: Path, gate: str, url: str
) -> None:
    v = fc.verdict_of(tmp_path, _entries(gate, url))
    _not_credited(v, gate)
    assert v["verdict"] == "INCONCLUSIVE"


def test_neighbour_the_launchs_own_endpoint_is_still_its_own() -> None:
    assert endpoint_key(SERVED) == "http://127.0.0.1:8000"
    assert endpoint_key("HTTP://127.0.0.1:8000/") == "http://127.0.0.1:8000"
