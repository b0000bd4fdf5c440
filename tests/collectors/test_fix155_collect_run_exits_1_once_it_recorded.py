"""Fix 155 (audit 102 f5, issue 11): ``collect run`` exits 2 only when nothing was recorded.

README: exit 2 means "usage, input, trust, integrity or system error … and nothing was recorded". Yet an
error the collector met once its job had started (a store that filled up, a corpus edited mid-run) ended the
job — recorded, terminal entry and all — and then exited 2. The rule kept: an error before the job's first
entry exits 2 (nothing recorded); once the job is recorded the run exits 1 (its answer is "no"), the
summary and the policy's verdict on what was recorded printed, and the error printed as its one line
(``error[code]: …``; under ``--json`` as the result's ``error``).

The exit-code change is in ``ledger/cli/collect.py`` ``run_cmd``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ledger.cli import main
from ledger.service import Ledger

from .conftest import entries_of
from .test_harness_gates import corpus, policy_with, stub_campaign  # noqa: F401 (fixture)


def _corpus_edited_mid_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """The semantic corpus read again at its gate no longer matches its pin: a ``CorpusDigestError`` once
    the job has started (``test_an_error_of_the_collector_mid_run_ends_the_job_failed_not_running``)."""
    from ledger.collectors import campaign as campaign_mod
    from ledger.errors import CorpusDigestError

    real = campaign_mod.read_pinned_jsonl
    checked: list[Path] = []

    def changed_after_preflight(p: Path, digest: str) -> Any:
        checked.append(p)
        if len(checked) > 2:
            raise CorpusDigestError(f"{p}: corpus digest is blake3:00…, the campaign pins {digest}")
        return real(p, digest)

    monkeypatch.setattr(campaign_mod, "read_pinned_jsonl", changed_after_preflight)
    monkeypatch.setattr("ledger.collectors.semantic.read_pinned_jsonl", changed_after_preflight)


def _collect_run(tmp_path: Path, home: Path, campaign: Path, *more: str) -> int:
    policy_with(tmp_path, _digest(campaign))
    return main(
        [
            "collect",
            "run",
            str(campaign),
            "--home",
            str(home),
            "--policy",
            str(tmp_path / "policies" / "backend-qualification.toml"),
            *more,
        ]
    )


def _digest(campaign: Path) -> str:
    for line in campaign.read_text().splitlines():
        if line.startswith('digest = "') and "bfef1eb8" not in line:
            return line.split('"')[1]
    raise AssertionError("no semantic digest in the campaign")


def _recorded(home: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    lg = Ledger.open(home)
    try:
        return entries_of(lg, "job"), entries_of(lg, "gate.result")
    finally:
        lg.close()


def test_collect_run_exits_1_with_the_error_printed_after_it_recorded_the_job(
    tmp_path: Path,
    tiny_model_dir: Path,
    home: Path,
    corpus: tuple[Path, str],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _corpus_edited_mid_run(monkeypatch)
    code = _collect_run(tmp_path, home, stub_campaign(tmp_path, tiny_model_dir, corpus))
    out, err = capsys.readouterr()
    jobs, _ = _recorded(home)
    assert [j["payload"]["state"] for j in jobs] == ["running", "failed"]
    assert "error[corpus-digest-mismatch]: " in err
    assert "policy verdict: INCONCLUSIVE" in out
    assert code == 1


def test_collect_run_json_names_the_error_beside_what_it_recorded(
    tmp_path: Path,
    tiny_model_dir: Path,
    home: Path,
    corpus: tuple[Path, str],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _corpus_edited_mid_run(monkeypatch)
    code = _collect_run(tmp_path, home, stub_campaign(tmp_path, tiny_model_dir, corpus), "--json")
    out, _ = capsys.readouterr()
    result = json.loads(out)
    assert result["state"] == "failed" and result["final_entry"]
    assert result["error"]["code"] == "corpus-digest-mismatch"
    assert code == 1


def test_collect_run_exits_2_when_nothing_was_recorded(
    tmp_path: Path,
    tiny_model_dir: Path,
    home: Path,
    corpus: tuple[Path, str],  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The neighbour that keeps exit 2: an input error met before the job started records nothing."""
    campaign = stub_campaign(tmp_path, tiny_model_dir, corpus)
    digest = _digest(campaign)
    policy_with(tmp_path, digest)
    wrong = digest[:-1] + ("0" if digest[-1] != "0" else "1")
    campaign.write_text(campaign.read_text().replace(f'digest = "{digest}"', f'digest = "{wrong}"'))
    code = main(
        [
            "collect",
            "run",
            str(campaign),
            "--home",
            str(home),
            "--policy",
            str(tmp_path / "policies" / "backend-qualification.toml"),
        ]
    )
    _, err = capsys.readouterr()
    assert code == 2 and "error[corpus-digest-mismatch]: " in err
    assert _recorded(home) == ([], [])
