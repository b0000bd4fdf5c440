"""Fix 139 (audit 96 f1): a relabelled model's failure of the same bytes stands against the route.

`collect run` binds the model revision in its model pin and each engine launch, never in the job's spec;
the routing gate's search for other campaigns of the route's model (no verdict shopping) read a revision
only from a job's spec, so a campaign of the same bytes under another `[model] name` was never judged: its
NOT QUALIFIED — CONTROL left the route allowed. Now a campaign's revision is read as its verdict's manifest
derives it (its spec, its pins, its launches, then the manifest itself), and where the revision a
campaign of another label ran cannot be told it is judged as the route's model (fail closed).

These build the entries as `collect run` writes them: no ``model_revision`` in any job's spec."""

from __future__ import annotations

import copy
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from ledger.entries import format_time, parse_time
from tests.policy.test_fail_closed import entry, qualified_entries
from tests.test_routing_at_reference_time import route_campaign
from tests.test_routing_restore_and_faults import ROUTE_NOW, VERDICT
from tests.test_routing_verdict_shopping import _failed_checks, failed_campaign, moved

R = "1" * 40  # the revision the route's own campaign pins (and every launch of it binds)
OTHER = "2" * 40


def _as_collected(es: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """As ``collect run`` writes them: the job's approved spec binds no model revision (the pin and the
    launches do)."""
    for e in es:
        bindings = e["payload"].get("spec", {}).get("bindings") if e.get("kind") == "job" else None
        if isinstance(bindings, dict):
            bindings.pop("model_revision", None)
    return es


def _route(tmp_path: Path, other: list[dict[str, Any]], later: timedelta = timedelta(0)) -> dict[str, Any]:
    """``other`` (a campaign run earlier that morning), then the QUALIFIED neighbour campaign as collected
    (its revision only in its pin and launch) and its recorded verdict (``later``); routed the next
    morning."""
    qualified = moved(_as_collected([*qualified_entries(), copy.deepcopy(VERDICT)]), later)
    return route_campaign(tmp_path, [*other, *qualified], format_time(parse_time(ROUTE_NOW) + later))


def _relabelled(model: str = "m-7-v2", name: str = "relabel-b") -> list[dict[str, Any]]:
    """The route's model bytes (pin and launch of revision ``R``) run again as campaign ``name`` under the
    label ``model``, failing (its engine died on its first completion)."""
    return _as_collected(failed_campaign(name, subject={"model": model}))


def _set_revision(
    es: list[dict[str, Any]], kinds: tuple[str, ...], value: str | None
) -> list[dict[str, Any]]:
    """The revision the entries of ``kinds`` record set to ``value`` (None: left out)."""
    for e in es:
        if e["kind"] not in kinds:
            continue
        if e["kind"] == "model.pin":
            e["payload"]["revision"] = value
            continue
        bindings = e["payload"]["bindings"]
        bindings.pop("model_revision", None)
        if value is not None:
            bindings["model_revision"] = value
    return es


def _refused_by(r: dict[str, Any], campaign: str) -> str:
    assert r["allowed"] is False, r["reasons"]
    assert _failed_checks(r) == {"no-standing-failure"}, r["reasons"]
    [f] = r["standing_failures"]
    assert f["campaign"] == campaign, f
    [reason] = r["reasons"]
    assert reason.startswith(f"campaign {campaign} of the same backend=vllm host=gpu-box-1 model=m-7 is "), (
        reason
    )
    return str(f["reason"])


def test_the_route_alone_is_allowed(tmp_path: Path) -> None:
    r = _route(tmp_path, [])
    assert r["allowed"] is True, r["reasons"]


def test_a_relabelled_models_failure_of_the_same_bytes_refuses_the_route(tmp_path: Path) -> None:
    """The audit's case: the same revision (pin and launch), another label, no revision in the spec."""
    reason = _refused_by(_route(tmp_path, _relabelled()), "relabel-b")
    assert "runtime-stability: " in reason, reason
    assert f"labelled model m-7-v2, it ran model revision {R}, the one the route's campaign binds" in reason


def test_another_models_failure_of_other_bytes_does_not_refuse_the_route(tmp_path: Path) -> None:
    es = _set_revision(_relabelled(), ("model.pin", "engine.launch"), OTHER)
    r = _route(tmp_path, es)
    assert r["allowed"] is True, r["reasons"]
    assert r["standing_failures"] == []


def test_a_relabelled_failure_whose_revision_is_only_in_its_model_pin_refuses(tmp_path: Path) -> None:
    es = _set_revision(_relabelled(), ("engine.launch",), None)
    reason = _refused_by(_route(tmp_path, es), "relabel-b")
    assert f"it ran model revision {R}" in reason, reason


def test_a_relabelled_failure_whose_revision_is_only_in_its_launch_bindings_refuses(tmp_path: Path) -> None:
    es = [e for e in _relabelled() if e["kind"] != "model.pin"]
    reason = _refused_by(_route(tmp_path, es), "relabel-b")
    assert f"it ran model revision {R}" in reason, reason
    # the neighbour: its launch ran another revision, and it pinned none — another model
    es = _set_revision([e for e in _relabelled() if e["kind"] != "model.pin"], ("engine.launch",), OTHER)
    r = _route(tmp_path, es)
    assert r["allowed"] is True, r["reasons"]


def test_a_relabelled_failure_binding_no_revision_cannot_be_told_apart_and_refuses(tmp_path: Path) -> None:
    """It tells no revision at all (its pin records none, its launch binds none): which model it ran cannot
    be told, so it is judged as the route's (fail closed), its reason saying so."""
    es = _set_revision(_relabelled(), ("model.pin", "engine.launch"), None)
    reason = _refused_by(_route(tmp_path, es), "relabel-b")
    assert (
        "labelled model m-7-v2, which model revision it ran cannot be told (none of its entries binds one)"
        in reason
    ), reason
    # no pin at all either (a campaign stopped before it pinned its model): the same
    es = [e for e in es if e["kind"] != "model.pin"]
    reason = _refused_by(_route(tmp_path, es), "relabel-b")
    assert "cannot be told (none of its entries binds one)" in reason, reason


def test_a_relabelled_failure_binding_its_revision_under_a_misspelled_key_refuses(tmp_path: Path) -> None:
    # its launch binds the revision as model_revison, and it pinned none: the revision cannot be read
    es = [e for e in _relabelled() if e["kind"] != "model.pin"]
    entry(es, "relabel-b-launch")["payload"]["bindings"]["model_revison"] = entry(es, "relabel-b-launch")[
        "payload"
    ]["bindings"].pop("model_revision")
    reason = _refused_by(_route(tmp_path, es), "relabel-b")
    assert "cannot be told (engine.launch binds 'model_revison', not 'model_revision' (entry " in reason, (
        reason
    )
    # its job's spec binds modelRevision: the manifest cannot read it, though its pin and launch tell another
    # revision — which one the approved spec meant cannot be told
    es = _set_revision(_relabelled(), ("model.pin", "engine.launch"), OTHER)
    entry(es, "relabel-b-campaign-job")["payload"]["spec"]["bindings"]["modelRevision"] = R
    reason = _refused_by(_route(tmp_path, es), "relabel-b")
    assert "cannot be told (job binds 'modelRevision', not 'model_revision'" in reason, reason


def test_a_relabelled_failure_whose_manifest_binds_a_conflict_refuses(tmp_path: Path) -> None:
    """Its spec binds one revision and its pin pins another: the manifest names the conflict, no revision,
    and which model it ran cannot be told."""
    es = _set_revision(_relabelled(), ("model.pin", "engine.launch"), OTHER)
    entry(es, "relabel-b-campaign-job")["payload"]["spec"]["bindings"]["model_revision"] = "3" * 40
    reason = _refused_by(_route(tmp_path, es), "relabel-b")
    told = (
        "cannot be told (its manifest binds no model_revision it can read: conflict: the job's spec binds 333"
    )
    assert told in reason, reason


def test_a_relabelled_failure_with_the_same_revision_in_its_spec_still_refuses(tmp_path: Path) -> None:
    """The spec's revision, as before (a job that does bind it), alone: no pin, its launch binding none."""
    es = _set_revision([e for e in _relabelled() if e["kind"] != "model.pin"], ("engine.launch",), None)
    entry(es, "relabel-b-campaign-job")["payload"]["spec"]["bindings"]["model_revision"] = R
    reason = _refused_by(_route(tmp_path, es), "relabel-b")
    assert f"it ran model revision {R}" in reason, reason


def test_a_failure_spelling_the_model_in_another_case_stands_by_its_name(tmp_path: Path) -> None:
    """Its label is the model, case aside: matched by its name, whatever revision it ran (no note)."""
    es = _set_revision(_relabelled(model="M-7"), ("model.pin", "engine.launch"), OTHER)
    reason = _refused_by(_route(tmp_path, es), "relabel-b")
    assert "labelled model" not in reason, reason


def test_a_relabelled_failure_on_another_host_does_not_refuse(tmp_path: Path) -> None:
    """Same bytes, another label — but another host (labelled, bound, probed): not this route's."""
    es = _relabelled()
    for e in es:
        e["subject"]["host"] = "gpu-box-2"
        bindings = e["payload"].get("spec", {}).get("bindings")
        if isinstance(bindings, dict):
            bindings["hostname"] = "gpu-box-2"
        if e["kind"] == "host.probe":
            e["payload"]["hostname"] = "gpu-box-2"
    r = _route(tmp_path, es)
    assert r["allowed"] is True, r["reasons"]


def test_a_relabelled_failure_older_than_the_bound_does_not_refuse(tmp_path: Path) -> None:
    """The relabelled campaign ran the morning of 09-10; the passing one (and the route) 8 days later."""
    r = _route(tmp_path, _relabelled(), later=timedelta(days=8))
    assert r["allowed"] is True, r["reasons"]
    _refused_by(_route(tmp_path, _relabelled(), later=timedelta(days=6)), "relabel-b")


# --- fix 147 (audit 99 f4): a revision spelled otherwise than a revision is written is compared as none ---

HEX = "abcdef0123" * 4  # a commit hash with letters: one its upper case spells otherwise


def _spelled(es: list[dict[str, Any]], value: str) -> list[dict[str, Any]]:
    """``es`` with the revision ``R`` (pin, launches) spelled ``value``."""
    out: list[dict[str, Any]] = json.loads(json.dumps(es).replace(R, value))
    return out


def _route_of(tmp_path: Path, other: list[dict[str, Any]], revision: str) -> dict[str, Any]:
    """``_route``, the route's own campaign pinning (and binding) ``revision``."""
    qualified = _spelled(
        moved(_as_collected([*qualified_entries(), copy.deepcopy(VERDICT)]), timedelta(0)), revision
    )
    return route_campaign(tmp_path, [*other, *qualified], ROUTE_NOW)


@pytest.mark.parametrize(
    "spelling",
    [
        pytest.param(HEX.upper(), id="upper-case-hex"),
        pytest.param("sha1:" + HEX, id="sha1-prefix"),
        pytest.param(" " + HEX, id="white-space"),
        pytest.param(HEX[:12], id="short-hash"),
    ],
)
def test_a_relabelled_failure_binding_the_revision_spelled_otherwise_refuses(
    tmp_path: Path, spelling: str
) -> None:
    """Regression (audit 99 f4): the relabelled campaign binds the route's revision in upper-case hex (or
    as "sha1:" + hex): compared as an exact string it was another revision, and the failure of the same
    bytes left the route allowed. A revision not in the form the qualification pins one (``params.
    immutable_revision``) cannot be compared: which model it ran cannot be told, and it is judged as the
    route's model (fail closed), its reason saying why."""
    reason = _refused_by(_route_of(tmp_path, _spelled(_relabelled(), spelling), HEX), "relabel-b")
    assert "labelled model m-7-v2, which model revision it ran cannot be told (" in reason, reason
    assert f"it binds model revision {spelling!r}, not in the form a revision is written (" in reason, reason


def test_a_relabelled_failure_binding_the_revision_and_another_spelled_otherwise_refuses(
    tmp_path: Path,
) -> None:
    """Its pin pins another revision in the canonical form and its launch binds one spelled otherwise:
    the one spelled otherwise may be the route's — judged (fail closed)."""
    es = _set_revision(_spelled(_relabelled(), HEX), ("model.pin",), OTHER)
    es = _set_revision(es, ("engine.launch",), HEX.upper())
    reason = _refused_by(_route_of(tmp_path, es, HEX), "relabel-b")
    assert "cannot be told" in reason and repr(HEX.upper()) in reason, reason


@pytest.mark.parametrize(
    "revision", [HEX, "b" * 64, "blake3:" + "c" * 64], ids=["git-sha1", "git-sha256", "content-digest"]
)
def test_a_relabelled_failure_binding_the_same_revision_as_written_refuses(
    tmp_path: Path, revision: str
) -> None:
    """The case that must still refuse, by the revision itself: spelled as the route's, in the canonical
    form (a commit hash, a content digest)."""
    reason = _refused_by(_route_of(tmp_path, _spelled(_relabelled(), revision), revision), "relabel-b")
    assert f"it ran model revision {revision}, the one the route's campaign binds" in reason, reason


def test_a_relabelled_failure_of_another_revision_with_letters_does_not_refuse(tmp_path: Path) -> None:
    """The case that must still pass: another revision, in the canonical form, letters and all: another
    model, not judged."""
    r = _route_of(tmp_path, _spelled(_relabelled(), "fedcba9876" * 4), HEX)
    assert r["allowed"] is True, r["reasons"]
    assert r["standing_failures"] == [], r["standing_failures"]
