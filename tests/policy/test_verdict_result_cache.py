"""The remembered verdict (``ledger.policy.result_cache``) is the computed one, byte for byte, and is never
served once anything it was computed from changed: an append (supersession, revocation), an edited row, a
cache file that fails its MAC."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from ledger.canonical import canonical_bytes
from ledger.entries import format_time, parse_time
from ledger.policy import evaluate, load_policy, result_cache, snapshot
from ledger.policy.routing import check_routing_change
from ledger.policy.snapshot import clear_caches
from tests.policy.test_routing_current import OK, SUBJECT, supersede_benchmark
from tests.policy.test_verdict_caches import _tamper

LEDGER_BIN = str(Path(sys.executable).with_name("ledger"))
NOW = parse_time("2026-09-11T09:00:00Z")


def _fresh_verdict(home: Path, campaign: str) -> bytes:
    out = subprocess.run(
        [LEDGER_BIN, "--home", str(home), "verdict", "--subject", f"campaign={campaign}", "--json"],
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def _cache_files(home: Path) -> list[Path]:
    return sorted((home / "cache" / "verdicts").glob("*.json"))


def _edit_payload(b: Any, name: str, field: str, value: Any) -> tuple[Any, str]:
    """Rewrite one payload field of the named entry's stored envelope behind the log's back (raw SQL, the
    thorough forger of ``_tamper``: the signature no longer covers it); returns the entry as it was logged
    and its entry id now."""
    target = b.ledger.get(b.names[name])
    env = json.loads(target.envelope)
    statement = json.loads(base64.b64decode(env["payload"]))
    statement["payload"][field] = value
    env["payload"] = base64.b64encode(canonical_bytes(statement)).decode()
    return target, _tamper(b.home, target.seq, env)


def test_a_fresh_process_serves_the_computed_verdict_byte_for_byte(build) -> None:
    b = build("backend-qualification/seed004-sleeping.toml")
    first = _fresh_verdict(b.home, "router-ocr")  # computed, and remembered in the home
    assert len(_cache_files(b.home)) == 1
    second = _fresh_verdict(b.home, "router-ocr")  # served from the home
    clear_caches()  # this process computes it from scratch
    computed = canonical_bytes(
        evaluate(b.ledger, {"campaign": "router-ocr"}, load_policy("backend-qualification"))
    )
    assert first == second == computed + b"\n"


def test_a_row_edited_after_its_verdict_was_remembered_is_rejected_by_the_next_fresh_process(build) -> None:
    b = build("backend-qualification/seed004-sleeping.toml")
    before = json.loads(_fresh_verdict(b.home, "router-ocr"))
    # same log size, same checkpoint: only the row's bytes differ
    target, edited = _edit_payload(b, "health-while-sleeping", "sleeping", False)
    assert target.entry_id in before["used"]

    after = json.loads(_fresh_verdict(b.home, "router-ocr"))
    rejected = {r["entry"]: r for r in after["rejected"]}
    assert rejected[edited]["rule"] == "bad-signature"
    assert edited not in after["used"]
    # the same size; the root is the rewritten leaf's (the forger's tree: `ledger verify` against a held
    # checkpoint names it)
    assert after["checkpoint"]["size"] == before["checkpoint"]["size"]


def test_a_row_whose_envelope_alone_was_edited_is_refused_by_warm_and_fresh_processes(build) -> None:
    """Regression: an envelope edited in place (its entry id, record and leaf kept) was judged — rejected
    for its signature, so a failure it showed (a sleeping engine's /health) was dropped and the verdict
    computed without it. The leaf commits the entry id and the id is the envelope's BLAKE3: the log is
    refused (exit 2, integrity), whatever the caches remember."""
    from ledger.errors import IntegrityError

    b = build("backend-qualification/seed004-sleeping.toml")
    policy = load_policy("backend-qualification")
    assert json.loads(_fresh_verdict(b.home, "router-ocr"))["verdict"] != "QUALIFIED"
    evaluate(b.ledger, {"campaign": "router-ocr"}, policy)  # warm
    target = b.ledger.get(b.names["health-while-sleeping"])
    env = json.loads(target.envelope)
    statement = json.loads(base64.b64decode(env["payload"]))
    statement["payload"]["sleeping"] = False
    env["payload"] = base64.b64encode(canonical_bytes(statement)).decode()
    _tamper(b.home, target.seq, env, thorough=False)
    with pytest.raises(IntegrityError, match="envelope hashes to"):
        evaluate(b.ledger, {"campaign": "router-ocr"}, policy)
    out = subprocess.run(
        [LEDGER_BIN, "--home", str(b.home), "verdict", "--subject", "campaign=router-ocr", "--json"],
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 2 and b'"integrity"' in out.stderr, out.stderr


def test_a_supersession_after_a_remembered_check_refuses_at_once(build) -> None:
    b = build("routing-change/seed004-router.toml")
    policy = load_policy("routing-change")
    assert check_routing_change(b.ledger, policy, dict(SUBJECT), deployment=OK, now=NOW)["allowed"] is True
    assert check_routing_change(b.ledger, policy, dict(SUBJECT), deployment=OK, now=NOW)["allowed"] is True
    supersede_benchmark(b)
    r = check_routing_change(b.ledger, policy, dict(SUBJECT), deployment=OK, now=NOW)
    assert r["allowed"] is False
    assert r["verdict"]["current"]["verdict"] == "INCONCLUSIVE"


def test_a_revocation_after_a_remembered_verdict_changes_it_in_a_fresh_process(build) -> None:
    b = build("routing-change/seed004-router.toml")
    from ledger.signing import SigningKey

    before = json.loads(_fresh_verdict(b.home, "router-embed"))
    assert before["verdict"] == "QUALIFIED"
    key = SigningKey.load("collector", b.ledger.home.key_path("collector"))
    st = b.ledger.make_statement(
        "key.revoke",
        {"key": "collector"},
        {"key_id": key.key_id, "effective_at": "2026-09-10T09:30:00Z", "reason": "leaked"},
        collected_at="2026-09-10T12:00:00Z",
    )
    b.ledger.append([b.ledger.sign(st, b.ledger.cfg.admin_key)], logged_at=parse_time("2026-09-10T12:00:00Z"))
    after = json.loads(_fresh_verdict(b.home, "router-embed"))
    assert after["verdict"] != "QUALIFIED"
    assert after["checkpoint"]["size"] == before["checkpoint"]["size"] + 1


def _forge(path: Path, change: Any) -> None:
    mac, _, body = path.read_bytes().partition(b"\n")
    doc = json.loads(body)
    change(doc)
    path.write_bytes(mac + b"\n" + canonical_bytes(doc))


def test_a_cache_file_that_fails_its_mac_is_ignored(build, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(snapshot, "RESULT_SALT", [b""])  # read the home as a fresh process does
    b = build("backend-qualification/seed004-sleeping.toml")
    real = _fresh_verdict(b.home, "router-ocr")
    assert json.loads(real)["verdict"] != "QUALIFIED"
    (path,) = _cache_files(b.home)

    def lift(doc: dict[str, Any]) -> None:
        doc["result"]["verdict"] = "QUALIFIED"

    _forge(path, lift)  # the body says QUALIFIED; its MAC is the old one
    assert _fresh_verdict(b.home, "router-ocr") == real
    # and in a process that has the result only in the home (nothing in memory)
    with result_cache._LOCK:
        result_cache._MEMORY.clear()
    _forge(path, lift)
    got = evaluate(b.ledger, {"campaign": "router-ocr"}, load_policy("backend-qualification"))
    assert canonical_bytes(got) + b"\n" == real


def test_a_store_answer_that_changed_is_asked_again(build, tmp_path: Path) -> None:
    """A remembered result lists the artifact checks it relied on; one that now answers differently
    makes the result computed again (here: the store's answer is recorded as different)."""
    b = build("backend-qualification/seed004-sleeping.toml")
    real = _fresh_verdict(b.home, "router-ocr")
    (path,) = _cache_files(b.home)

    def claim(doc: dict[str, Any]) -> None:
        doc["result"]["verdict"] = "QUALIFIED"
        doc["artifacts"] = [["blake3:" + "0" * 64, 1, "exists", None]]  # "present": the store says missing

    mac, _, _ = path.read_bytes().partition(b"\n")
    _forge(path, claim)
    # re-sign the forged body with the home's secret: only the store check stands between it and a hit
    import hashlib
    import hmac

    secret = (path.parent / ".secret").read_bytes()
    body = path.read_bytes().partition(b"\n")[2]
    key = bytes.fromhex(path.stem)
    path.write_bytes(hmac.new(secret, key + body, hashlib.sha256).hexdigest().encode() + b"\n" + body)
    assert mac  # the original had one
    assert _fresh_verdict(b.home, "router-ocr") == real


# --- signatures verified before, remembered in the home (``result_cache.save_signatures``) ---


def _signatures_file(home: Path) -> Path:
    return home / "cache" / "verdicts" / result_cache.SIGNATURES_FILE


def _append_elsewhere(b: Any) -> None:
    """Another campaign's note, logged at the head's log time: the log's size changes, its reference time
    (and so every staleness rule) does not."""
    with b.ledger.repo.read() as conn:
        at = parse_time(b.ledger.repo.logged_at(conn, b.ledger.size() - 1))
    st = b.ledger.make_statement(
        "note", {"campaign": "elsewhere"}, {"text": "another host's"}, collected_at=at
    )
    b.ledger.append([b.ledger.sign(st, "collector")], logged_at=at)


def _as_a_fresh_process(monkeypatch: Any) -> list[int]:
    """This process forgets what it parsed, verified and remembered (the home's files stay); returns a
    counter of the Ed25519 verifications it then makes."""
    from ledger.signing import PublicKey

    monkeypatch.setattr(snapshot, "RESULT_SALT", [b""])  # read the home as a fresh process does
    snapshot._VERIFIED.clear()
    snapshot._PARSED.clear()
    with result_cache._LOCK:
        result_cache._MEMORY.clear()
        result_cache._STAMPED.clear()
        result_cache._LOADED.clear()
        result_cache._LOADED_PARSED.clear()
    calls = [0]
    real = PublicKey.verify

    def counted(self: PublicKey, signature: bytes, message: bytes) -> None:
        calls[0] += 1
        real(self, signature, message)

    monkeypatch.setattr(PublicKey, "verify", counted)
    return calls


def test_after_an_append_elsewhere_a_fresh_process_verifies_no_signature_again(build, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """An append to another campaign changes the log's size, so no verdict is remembered; the signatures of
    the campaign's entries, verified before over the same bytes with the same keys, are not verified again,
    and the verdict is the one computed from scratch."""
    monkeypatch.setattr(snapshot, "RESULT_SALT", [b""])
    b = build("backend-qualification/seed004-sleeping.toml")
    before = json.loads(_fresh_verdict(b.home, "router-ocr"))  # verifies, and records the signatures
    body = _signatures_file(b.home).read_bytes()[32:]
    assert len(body) % 64 == 0 and len(body) // 64 >= len(before["used"]) > 0
    _append_elsewhere(b)
    for f in _cache_files(b.home):  # as if the campaign had changed: the verdict is judged again
        f.unlink()

    calls = _as_a_fresh_process(monkeypatch)
    policy = load_policy("backend-qualification")
    got = evaluate(b.ledger, {"campaign": "router-ocr"}, policy)
    assert calls[0] == 0
    assert got["checkpoint"]["size"] == before["checkpoint"]["size"] + 1
    assert (got["verdict"], got["used"]) == (before["verdict"], before["used"])

    for f in [_signatures_file(b.home), *_cache_files(b.home)]:  # nothing remembered: all verified again
        f.unlink()
    calls = _as_a_fresh_process(monkeypatch)
    again = evaluate(b.ledger, {"campaign": "router-ocr"}, policy)
    assert calls[0] >= 1  # the entries the verdict depends on
    assert canonical_bytes(again) == canonical_bytes(got)


def test_a_signatures_file_that_fails_its_mac_vouches_for_nothing(build, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(snapshot, "RESULT_SALT", [b""])
    b = build("backend-qualification/seed004-sleeping.toml")
    before = json.loads(_fresh_verdict(b.home, "router-ocr"))
    _append_elsewhere(b)
    path = _signatures_file(b.home)
    data = bytearray(path.read_bytes())
    data[40] ^= 1  # one bit of the first recorded digest: the MAC no longer matches
    path.write_bytes(bytes(data))
    calls = _as_a_fresh_process(monkeypatch)
    for f in _cache_files(b.home):
        f.unlink()
    got = evaluate(b.ledger, {"campaign": "router-ocr"}, load_policy("backend-qualification"))
    assert calls[0] >= 1 and before["used"]
    for f in [path, *_cache_files(b.home)]:
        f.unlink()
    _as_a_fresh_process(monkeypatch)
    scratch = evaluate(b.ledger, {"campaign": "router-ocr"}, load_policy("backend-qualification"))
    assert canonical_bytes(got) == canonical_bytes(scratch)
    path.write_bytes(bytes(data[:-10]))  # cut short: ignored too
    for f in _cache_files(b.home):
        f.unlink()
    calls = _as_a_fresh_process(monkeypatch)
    evaluate(b.ledger, {"campaign": "router-ocr"}, load_policy("backend-qualification"))
    assert calls[0] >= 1


def test_a_recorded_signature_does_not_vouch_for_a_row_edited_behind_the_log(build, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The memo is keyed by the stored bytes' digest: a row edited after its signature was recorded is
    verified again, and rejected."""
    monkeypatch.setattr(snapshot, "RESULT_SALT", [b""])
    b = build("backend-qualification/seed004-sleeping.toml")
    _fresh_verdict(b.home, "router-ocr")
    _target, edited = _edit_payload(b, "health-while-sleeping", "sleeping", False)
    _append_elsewhere(b)
    calls = _as_a_fresh_process(monkeypatch)
    got = evaluate(b.ledger, {"campaign": "router-ocr"}, load_policy("backend-qualification"))
    assert calls[0] >= 1
    rejected = {r["entry"]: r["rule"] for r in got["rejected"]}
    assert rejected[edited] == "bad-signature"


# --- the reference time: a remembered verdict holds over a window of log times ---------------------------

QUALIFIED_CAMPAIGN = {"campaign": "vllm-embed"}


def _append_later(b: Any, delta: timedelta, kind: str = "note", subject: dict[str, str] | None = None,
                  payload: dict[str, Any] | None = None) -> str:  # fmt: skip
    """An entry logged ``delta`` after the head's log time (another campaign's note unless told): the
    log's clock, and so the next verdict's reference time, moves on by ``delta``."""
    with b.ledger.repo.read() as conn:
        at = parse_time(b.ledger.repo.logged_at(conn, b.ledger.size() - 1)) + delta
    st = b.ledger.make_statement(
        kind, subject or {"campaign": "elsewhere"}, payload or {"text": f"later by {delta}"}, collected_at=at
    )
    b.ledger.append([b.ledger.sign(st, "collector")], logged_at=at)
    return format_time(at)


def _judged(monkeypatch: Any) -> list[int]:
    """A counter of the campaign evaluations (``verdict._compute``) this process makes from here on."""
    from ledger.policy import verdict

    calls = [0]
    real = verdict._compute

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(verdict, "_compute", counted)
    return calls


def _as_a_fresh_verdict(b: Any, monkeypatch: Any) -> tuple[int, dict[str, Any]]:
    """The campaign's verdict as a fresh process finds it, and how many evaluations that made."""
    _as_a_fresh_process(monkeypatch)
    judged = _judged(monkeypatch)
    got = evaluate(b.ledger, QUALIFIED_CAMPAIGN, load_policy("backend-qualification"))
    return judged[0], got


def _qualified(build: Any, monkeypatch: Any) -> tuple[Any, dict[str, Any]]:
    """The QUALIFIED fixture campaign, its verdict computed (and remembered in the home) once."""
    monkeypatch.setattr(snapshot, "RESULT_SALT", [b""])  # read the home as a fresh process does
    b = build("backend-qualification/qualified.toml")
    first = evaluate(b.ledger, QUALIFIED_CAMPAIGN, load_policy("backend-qualification"))
    assert first["verdict"] == "QUALIFIED"
    return b, first


def _from_scratch(b: Any, monkeypatch: Any) -> dict[str, Any]:
    for f in _cache_files(b.home):
        f.unlink()
    _as_a_fresh_process(monkeypatch)
    return evaluate(b.ledger, QUALIFIED_CAMPAIGN, load_policy("backend-qualification"))


def test_an_append_elsewhere_later_serves_the_remembered_verdict_at_the_new_time(
    build: Any, monkeypatch: Any
) -> None:
    """Another campaign's entry an hour later moves the reference time by an hour, crossing no
    freshness bound: a fresh process serves the remembered verdict, its reference time the new one, and
    it is byte for byte what a computation from scratch gives."""
    b, before = _qualified(build, monkeypatch)
    later = _append_later(b, timedelta(hours=1))
    judged, got = _as_a_fresh_verdict(b, monkeypatch)
    assert judged == 0
    assert got["reference_time"] == later != before["reference_time"]
    assert got["checkpoint"]["size"] == before["checkpoint"]["size"] + 1
    assert canonical_bytes(got) == canonical_bytes(_from_scratch(b, monkeypatch))


def test_an_append_past_a_freshness_bound_judges_the_campaign_again(build: Any, monkeypatch: Any) -> None:
    """Eight days on, the host probe (fresh for 7 days) is stale: the window ends there, so the next
    verdict is judged again — and then, since a stale reason names the reference time, it holds at that
    time alone: an hour later it is judged again."""
    b, _ = _qualified(build, monkeypatch)
    later = _append_later(b, timedelta(days=8))
    judged, got = _as_a_fresh_verdict(b, monkeypatch)
    assert judged == 1
    stale = [r for r in got["rejected"] if r["rule"] == "stale"]
    assert stale and all(later in r["detail"] for r in stale)
    assert got["verdict"] != "QUALIFIED"
    assert canonical_bytes(got) == canonical_bytes(_from_scratch(b, monkeypatch))

    even_later = _append_later(b, timedelta(hours=1))
    judged, again = _as_a_fresh_verdict(b, monkeypatch)
    assert judged == 1
    assert all(even_later in r["detail"] for r in again["rejected"] if r["rule"] == "stale")
    assert canonical_bytes(again) == canonical_bytes(_from_scratch(b, monkeypatch))


def test_a_gpu_reset_claimed_after_its_kernel_log_was_logged_counts_from_the_log_time(
    build: Any, monkeypatch: Any
) -> None:
    """Regression (audit 18, f3): a kernel log logged at the head that claims a GPU reset two hours later (its
    collector's clock ahead) did not count until the log's clock passed the claim: the campaign stayed
    QUALIFIED on probes that may predate the reset, and flipped later with nothing appended. The reset
    happened by the time the log took the kernel log: it counts from then, and the remembered verdict
    agrees with one judged from scratch at every later time."""
    b, _ = _qualified(build, monkeypatch)
    with b.ledger.repo.read() as conn:
        head = parse_time(b.ledger.repo.logged_at(conn, b.ledger.size() - 1))
    reset_at = format_time(head + timedelta(hours=2))
    host = {**QUALIFIED_CAMPAIGN, "host": "gpu-box-1"}
    _append_later(b, timedelta(0), "kernel.log", host, {"source": "journalctl", "last_reset_at": reset_at})
    before = evaluate(b.ledger, QUALIFIED_CAMPAIGN, load_policy("backend-qualification"))
    assert [r for r in before["rejected"] if r["rule"] == "before-gpu-reset"]
    assert before["verdict"] != "QUALIFIED"
    for later in (timedelta(hours=1), timedelta(hours=2)):
        _append_later(b, later)
        _, got = _as_a_fresh_verdict(b, monkeypatch)
        assert [r for r in got["rejected"] if r["rule"] == "before-gpu-reset"]
        assert canonical_bytes(got) == canonical_bytes(_from_scratch(b, monkeypatch))


def test_a_remembered_verdict_whose_window_was_widened_is_ignored(build: Any, monkeypatch: Any) -> None:
    """The window is under the file's MAC: a file edited to hold for ever is not served."""
    b, _ = _qualified(build, monkeypatch)
    (path,) = _cache_files(b.home)

    def widen(doc: dict[str, Any]) -> None:
        doc["window"][1] = "9999-12-31T23:59:59.999999+00:00"

    _forge(path, widen)
    _append_later(b, timedelta(days=8))
    judged, got = _as_a_fresh_verdict(b, monkeypatch)
    assert judged == 1 and got["verdict"] != "QUALIFIED"


# --- parsed envelopes remembered in the home (``result_cache.save_parsed`` / ``load_parsed``) -------------


def _parsed_files(home: Path) -> list[Path]:
    return sorted((home / "cache" / "verdicts").glob("parsed-*.bin"))


def _answers_judged(monkeypatch: Any) -> list[int]:
    """A counter of the structured answers this process judges from here on."""
    calls = [0]
    real = snapshot.structured_answer_problem

    def counted(payload: Any) -> Any:
        calls[0] += 1
        return real(payload)

    monkeypatch.setattr(snapshot, "structured_answer_problem", counted)
    return calls


def _parses(monkeypatch: Any) -> list[int]:
    """A counter of the envelopes this process parses from their stored bytes from here on."""
    calls = [0]
    real = snapshot._parse_envelope

    def counted(envelope: bytes, seq: int) -> Any:
        calls[0] += 1
        return real(envelope, seq)

    monkeypatch.setattr(snapshot, "_parse_envelope", counted)
    return calls


def test_a_campaign_judged_again_after_its_own_append_parses_only_the_new_entry(
    build: Any, monkeypatch: Any
) -> None:
    """A note of the campaign itself changes what the verdict reads, so it is judged again; the envelopes
    parsed before come from the home's file (by the SHA-256 of their bytes), only the new one is parsed,
    and the result is what a computation from scratch gives."""
    b, first = _qualified(build, monkeypatch)
    assert len(_parsed_files(b.home)) == 1
    _append_later(b, timedelta(minutes=5), subject=dict(QUALIFIED_CAMPAIGN))
    _as_a_fresh_process(monkeypatch)
    parses, judged = _parses(monkeypatch), _judged(monkeypatch)
    got = evaluate(b.ledger, QUALIFIED_CAMPAIGN, load_policy("backend-qualification"))
    assert judged[0] == 1 and parses[0] == 1
    assert got["counts"]["considered"] == first["counts"]["considered"] + 1
    scratch_parses = _parses(monkeypatch)
    for f in _parsed_files(b.home):
        f.unlink()
    scratch = _from_scratch(b, monkeypatch)
    assert scratch_parses[0] == got["counts"]["considered"]
    assert canonical_bytes(got) == canonical_bytes(scratch)


def test_a_parsed_envelopes_file_that_fails_its_mac_vouches_for_nothing(build: Any, monkeypatch: Any) -> None:
    b, first = _qualified(build, monkeypatch)
    (path,) = _parsed_files(b.home)
    data = bytearray(path.read_bytes())
    data[-40] ^= 1  # one bit of the recorded statements: the MAC no longer matches
    path.write_bytes(bytes(data))
    for f in _cache_files(b.home):
        f.unlink()
    _as_a_fresh_process(monkeypatch)
    parses = _parses(monkeypatch)
    got = evaluate(b.ledger, QUALIFIED_CAMPAIGN, load_policy("backend-qualification"))
    assert parses[0] == first["counts"]["considered"]  # every envelope parsed from its bytes again
    assert canonical_bytes(got) == canonical_bytes(_from_scratch(b, monkeypatch))
    path.write_bytes(path.read_bytes()[:20])  # cut short: ignored too
    for f in _cache_files(b.home):
        f.unlink()
    _as_a_fresh_process(monkeypatch)
    parses = _parses(monkeypatch)
    evaluate(b.ledger, QUALIFIED_CAMPAIGN, load_policy("backend-qualification"))
    assert parses[0] == first["counts"]["considered"]


def test_a_parsed_envelope_does_not_stand_for_a_row_edited_behind_the_log(
    build: Any, monkeypatch: Any
) -> None:
    """The file is keyed by the stored bytes' digest: an envelope edited after it was recorded is parsed
    from its new bytes (and rejected for its signature), never read from the file."""
    b, first = _qualified(build, monkeypatch)
    target, edited = _edit_payload(b, "launch", "ready", False)
    assert target.entry_id in first["used"]
    _as_a_fresh_process(monkeypatch)
    parses = _parses(monkeypatch)
    got = evaluate(b.ledger, QUALIFIED_CAMPAIGN, load_policy("backend-qualification"))
    assert parses[0] == 1
    rejected = {r["entry"]: r["rule"] for r in got["rejected"]}
    assert rejected[edited] == "bad-signature"
    assert got["verdict"] != "QUALIFIED"


def test_a_structured_answer_judged_once_is_remembered_with_its_parsed_envelope(
    build: Any, monkeypatch: Any
) -> None:
    """Regression (start-up time): re-judging the structured-output answer imported jsonschema in every
    fresh process that judged the campaign again — more than the rest of the evaluation. The answer is a
    pure function of the stored bytes, so it is kept in the home's parsed-envelope file: after an append
    of the campaign's own, a fresh process judges no answer again, and the result equals one from scratch."""
    b, first = _qualified(build, monkeypatch)
    _append_later(b, timedelta(minutes=5), subject=dict(QUALIFIED_CAMPAIGN))
    _as_a_fresh_process(monkeypatch)
    calls = _answers_judged(monkeypatch)
    got = evaluate(b.ledger, QUALIFIED_CAMPAIGN, load_policy("backend-qualification"))
    assert got["verdict"] == first["verdict"] == "QUALIFIED"
    assert calls[0] == 0
    for f in _parsed_files(b.home):
        f.unlink()
    scratch = _from_scratch(b, monkeypatch)
    assert calls[0] == 1  # from scratch, the one structured probe is judged again
    assert canonical_bytes(got) == canonical_bytes(scratch)


def test_a_few_new_entries_leave_the_parsed_envelopes_file_as_it_is(build: Any, monkeypatch: Any) -> None:
    """Regression (a fresh verdict after each append to a 10,000-entry campaign rewrote its 10 MB file,
    ≈ 45 ms of 0.7 s): a process that parsed fewer than ``SAVE_PARSED_AFTER`` envelopes and judged no
    structured answer leaves the file alone; the next process parses those few again, and the result is
    still the one from scratch. Past the bound, the file is written again and holds them."""
    from ledger.policy import verdict

    b, _first = _qualified(build, monkeypatch)
    (path,) = _parsed_files(b.home)
    recorded = path.read_bytes()
    for minutes in (5, 6):
        _append_later(b, timedelta(minutes=minutes), subject=dict(QUALIFIED_CAMPAIGN))
        _as_a_fresh_process(monkeypatch)
        parses = _parses(monkeypatch)
        got = evaluate(b.ledger, QUALIFIED_CAMPAIGN, load_policy("backend-qualification"))
        assert parses[0] == minutes - 4  # the notes appended since the file was written
        assert path.read_bytes() == recorded
    scratch_parses = _parses(monkeypatch)
    assert canonical_bytes(got) == canonical_bytes(_from_scratch(b, monkeypatch))
    assert scratch_parses[0] == 2  # the file still stands for every entry but the two notes

    monkeypatch.setattr(verdict, "SAVE_PARSED_AFTER", 3)
    _append_later(b, timedelta(minutes=7), subject=dict(QUALIFIED_CAMPAIGN))
    _as_a_fresh_process(monkeypatch)
    parses = _parses(monkeypatch)
    evaluate(b.ledger, QUALIFIED_CAMPAIGN, load_policy("backend-qualification"))
    assert parses[0] == 3 and path.read_bytes() != recorded
    _append_later(b, timedelta(minutes=8))  # elsewhere: the campaign's verdict is not remembered
    for f in _cache_files(b.home):
        f.unlink()
    _as_a_fresh_process(monkeypatch)
    parses = _parses(monkeypatch)
    evaluate(b.ledger, QUALIFIED_CAMPAIGN, load_policy("backend-qualification"))
    assert parses[0] == 0


def test_a_structured_answer_judged_here_is_saved_however_few_were_parsed(
    build: Any, monkeypatch: Any
) -> None:
    """A new structured probe is one envelope parsed, but judging its answer may import jsonschema: the
    file is written again so that the next process judges no answer (the rule that keeps the file as it
    is never costs that regression back)."""
    b, first = _qualified(build, monkeypatch)
    (path,) = _parsed_files(b.home)
    recorded = path.read_bytes()
    probe = next(e for e in first["used"] if b.ledger.get(e).statement.payload.get("check") == "structured")
    statement = b.ledger.get(probe).statement
    _append_later(b, timedelta(minutes=5), "health.probe", dict(statement.subject), dict(statement.payload))
    _as_a_fresh_process(monkeypatch)
    evaluate(b.ledger, QUALIFIED_CAMPAIGN, load_policy("backend-qualification"))
    assert path.read_bytes() != recorded
    _append_later(b, timedelta(minutes=6))
    for f in _cache_files(b.home):
        f.unlink()
    _as_a_fresh_process(monkeypatch)
    calls = _answers_judged(monkeypatch)
    parses = _parses(monkeypatch)
    evaluate(b.ledger, QUALIFIED_CAMPAIGN, load_policy("backend-qualification"))
    assert calls[0] == 0 and parses[0] == 0


@pytest.mark.parametrize("secret", [b"", b"\x00" * 31, b"\x00" * 33])
def test_a_damaged_secret_vouches_for_nothing(build: Any, monkeypatch: Any, secret: bytes) -> None:
    """The home's MAC key must be 32 bytes: an empty one (another process still writing it) or one of
    another length makes every cache file worthless — nothing remembered is served, every envelope is
    parsed and every signature the verdict uses verified again — never a MAC under a short key."""
    b, first = _qualified(build, monkeypatch)
    folder = b.home / "cache" / "verdicts"
    for f in _cache_files(b.home):  # a result file whose MAC line is empty, as a damaged key would give
        f.write_bytes(b"\n" + f.read_bytes().partition(b"\n")[2])
    (folder / ".secret").write_bytes(secret)
    calls = _as_a_fresh_process(monkeypatch)
    parses, judged = _parses(monkeypatch), _judged(monkeypatch)
    got = evaluate(b.ledger, QUALIFIED_CAMPAIGN, load_policy("backend-qualification"))
    assert judged[0] == 1 and parses[0] == first["counts"]["considered"] and calls[0] >= len(first["used"])
    assert canonical_bytes(got) == canonical_bytes(first)


def test_an_edit_to_the_signature_table_or_gpu_fault_catalogue_is_another_verdict() -> None:
    """Regression: a kept verdict was keyed by the ledger package's source only, so an edit of
    collectors/signatures.toml or collectors/gpu_faults.toml (a class changed, an OOM-kill row added) was
    answered from a result computed before it."""
    from ledger.gpu_faults import DEFAULT_CATALOGUE
    from ledger.policy.result_cache import code_files
    from ledger.signatures import DEFAULT_SIGNATURES

    files = [f.resolve() for f in code_files()]
    assert DEFAULT_SIGNATURES.resolve() in files
    assert DEFAULT_CATALOGUE.resolve() in files
    assert all(f.is_file() for f in files)
