"""Audit of `ledger check routing-change`: the engine a route must reach is the one that ran, never a label.

Before, where a campaign's job spec bound no ``engine`` the routing gate took the route's ``backend`` label
for the engine qualified: a campaign labelled ``backend=sglang`` whose every launch ran vllm was routed onto
an sglang service (and refused a vllm one); and a campaign labelled ``backend=vLLM`` was refused a plain vllm
service ("engine vllm, not the qualified engine vLLM"), while the verdict-shopping check of the same module
read vLLM as vllm. Now the engine is the one the re-derived verdict's approved spec binds, else the one engine
every launch it credits recorded (none, or several: the route cannot be judged, and is refused); and every
engine comparison goes through one normaliser (``routing.engine_key``: case and surrounding whitespace aside,
then the qualification's ``params.engine_names``, its one copy)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from ledger.entries import parse_time
from ledger.errors import PolicyError, SchemaError
from ledger.policy.fixtures import _Builder
from ledger.policy.loader import load_policy
from ledger.policy.routing import check_routing_change, engine_key
from ledger.service import Ledger
from tests.policy.conftest import POLICY_DIR
from tests.policy.test_fail_closed import KEYS, entry, qualified_entries
from tests.policy.test_fail_closed import SUBJECT as CAMPAIGN

NOW = parse_time("2026-09-10T12:00:00Z")
UNBOUND = "the approved spec binds no engine"


def _route(
    tmp_path: Path,
    entries: list[dict[str, Any]],
    services: list[dict[str, Any]],
    *,
    backend: str = "vllm",
    policy_dir: Path | None = None,
) -> dict[str, Any]:
    """The campaign of ``entries`` (labelled ``backend``) with its verdict recorded at 11:00, and a route of
    its model to the layout ``services``, judged at 12:00."""
    labels = {**CAMPAIGN, "backend": backend}
    es = [
        *entries,
        {
            "name": "verdict",
            "at": "2026-09-10T11:00:00Z",
            "record_verdict": {"subject": {"campaign": labels["campaign"]}, "key": "reviewer"},
        },
    ]
    home = tmp_path / f"home-{len(list(tmp_path.glob('home-*')))}"
    ledger = Ledger.init(home, genesis_at=parse_time("2026-09-10T09:00:00Z"))
    try:
        spec = {"start": "2026-09-10T09:00:00Z", "keys": KEYS, "defaults": {"subject": labels}, "entries": es}
        b = _Builder(ledger, spec, POLICY_DIR)
        b.enrol_keys()
        b.add_all(es)
        subject = {k: labels[k] for k in ("backend", "model", "host")}
        policy = load_policy("routing-change", policy_dir)
        deployment = {"host": "gpu-box-1", "services": services}
        return check_routing_change(ledger, policy, subject, deployment=deployment, now=NOW)
    finally:
        ledger.close()


def _svc(engine: str | None = None, model: str = "m-7", name: str = "svc", gpu: int = 0) -> dict[str, Any]:
    s: dict[str, Any] = {
        "engine": "vllm",
        "name": name,
        "model": model,
        "gpus": [gpu],
        "gpu_memory_utilization": 0.4,
    }
    if engine is not None:
        s["engine"] = engine
    return s


def _unbound() -> list[dict[str, Any]]:
    """The qualified campaign, entered by hand: its job's spec binds no engine (its launch ran vllm)."""
    es = qualified_entries()
    del entry(es, "campaign-job")["payload"]["spec"]["bindings"]["engine"]
    assert entry(es, "launch")["payload"]["engine"] == "vllm"
    return es


def _second_launch(es: list[dict[str, Any]], engine: str) -> None:
    """A second launch of the campaign (attempt 2), ready, of ``engine`` (binding it, as collectors do)."""
    first = entry(es, "launch")
    second = copy.deepcopy(first)
    second["name"] = "launch-2"
    second["at"] = "2026-09-10T10:03:00Z"
    second["payload"].update(engine=engine, attempt=2, started_at="2026-09-10T10:02:30Z")
    second["payload"]["bindings"]["engine"] = engine
    first["payload"]["ended_at"] = "2026-09-10T10:02:20Z"
    es.insert(es.index(entry(es, "sequential")) + 1, second)


def _reasons(r: dict[str, Any], check: str) -> str:
    return next((c.get("reason", "") for c in r["checks"] if c["name"] == check), "")


def _status(r: dict[str, Any], check: str) -> str:
    return next(c["status"] for c in r["checks"] if c["name"] == check)


# --- the engine that ran, not the backend label ---------------------------------------------------------


def test_a_campaign_labelled_sglang_whose_launches_ran_vllm_is_not_routed_onto_sglang(tmp_path: Path) -> None:
    """Regression (F3b): the spec binds no engine, every launch ran vllm, the campaign is labelled
    backend=sglang: the route to an sglang service was allowed and the route to a vllm one refused."""
    es = _unbound()
    onto_sglang = _route(tmp_path, es, [_svc("sglang")], backend="sglang")
    assert onto_sglang["allowed"] is False, onto_sglang["reasons"]
    why = _reasons(onto_sglang, "deployment-engine")
    assert "with engine sglang, not the qualified engine vllm" in why, onto_sglang["reasons"]
    assert "the engine every launch the verdict credits ran" in why
    # fix 95: nor onto vllm — a campaign labelled sglang whose launches ran vllm is no QUALIFIED campaign
    # at all (the verdict compares the backend with the engine its launches ran: engine-contradicted)
    onto_vllm = _route(tmp_path, es, [_svc()], backend="sglang")  # a service without `engine` runs vllm
    assert onto_vllm["allowed"] is False, onto_vllm["reasons"]
    assert "is INCONCLUSIVE" in " ".join(onto_vllm["reasons"]), onto_vllm["reasons"]
    onto_vllm = _route(tmp_path, es, [_svc()], backend="vllm")  # labelled as it ran: allowed
    assert onto_vllm["allowed"] is True, onto_vllm["reasons"]
    assert onto_vllm["verdict"]["current"]["engine"] is None
    assert onto_vllm["verdict"]["current"]["launch_engines"] == ["vllm"]


@pytest.mark.parametrize("service_engine", [None, "vllm", "vLLM", "VLLM", " vllm "])
def test_a_campaign_labelled_vllm_in_another_case_reaches_a_vllm_service(
    tmp_path: Path, service_engine: str | None
) -> None:
    """Regression (F3a): backend=vLLM, the spec binds no engine, the launch ran "vllm": the route to a plain
    vllm service was refused ("engine vllm, not the qualified engine vLLM")."""
    r = _route(tmp_path, _unbound(), [_svc(service_engine)], backend="vLLM")
    assert r["allowed"] is True, r["reasons"]


@pytest.mark.parametrize("service_engine", ["vLLM", "VLLM", "vllm "])
def test_a_bound_engine_and_a_service_engine_compare_as_engine_names(
    tmp_path: Path, service_engine: str
) -> None:
    """The neighbour: the spec binds "vllm"; a service naming vLLM in another case runs that engine."""
    r = _route(tmp_path, qualified_entries(), [_svc(service_engine)], backend="vLLM")
    assert r["allowed"] is True, r["reasons"]
    assert "the engine the campaign's approved spec binds" not in " ".join(r["reasons"])


def test_a_bound_engine_still_refuses_another_engine_whatever_the_label(tmp_path: Path) -> None:
    r = _route(tmp_path, qualified_entries(), [_svc("sglang")], backend="sglang")
    assert r["allowed"] is False
    why = _reasons(r, "deployment-engine")
    assert (
        "with engine sglang, not the qualified engine vllm (the engine the campaign's approved spec binds)"
        in why
    )


def test_a_service_of_another_model_is_not_asked_its_engine(tmp_path: Path) -> None:
    r = _route(tmp_path, _unbound(), [_svc(), _svc("sglang", model="other", name="o", gpu=1)], backend="vllm")
    assert r["allowed"] is True, r["reasons"]


# --- several engines, or none recorded: the route cannot be judged, and is refused ------------------------


def test_credited_launches_of_different_engines_leave_the_engine_untold_and_refuse(tmp_path: Path) -> None:
    """A second launch of a generic server (any backend: it contradicts none, fix 95) beside the vllm one:
    which engine the route must reach cannot be told — refused."""
    es = _unbound()
    _second_launch(es, "generic")
    for engine in ("vllm", "generic"):
        r = _route(tmp_path, es, [_svc(engine)], backend="vllm")
        assert r["verdict"]["current"]["verdict"] == "QUALIFIED", r["verdict"]["current"]
        assert r["allowed"] is False, (engine, r["reasons"])
        assert _status(r, "deployment-engine") == "not_applicable"
        why = _reasons(r, "qualified-engine-known")
        assert UNBOUND in why and "ran different engines (generic, vllm)" in why, r["reasons"]


def test_credited_launches_of_two_named_engines_are_no_qualified_campaign(tmp_path: Path) -> None:
    """Fix 95: launches of vllm and sglang — one contradicts the backend whichever it names: the verdict
    is INCONCLUSIVE (engine-contradicted), so no route stands on it."""
    es = _unbound()
    _second_launch(es, "sglang")
    for engine in ("vllm", "sglang"):
        r = _route(tmp_path, es, [_svc(engine)], backend=engine)
        assert r["verdict"]["current"]["verdict"] == "INCONCLUSIVE", r["verdict"]["current"]
        assert r["allowed"] is False, (engine, r["reasons"])


@pytest.mark.parametrize("spelled", ["vLLM", " VLLM"])
def test_credited_launches_naming_one_engine_in_two_spellings_agree(tmp_path: Path, spelled: str) -> None:
    es = _unbound()
    _second_launch(es, spelled)
    r = _route(tmp_path, es, [_svc()], backend="vllm")
    assert r["allowed"] is True, r["reasons"]


def test_credited_launches_of_two_spellings_the_policy_maps_to_one_engine_agree(tmp_path: Path) -> None:
    es = _unbound()
    for e in (entry(es, "launch"),):
        e["payload"]["engine"] = e["payload"]["bindings"]["engine"] = "llamacpp"
    _second_launch(es, "llama.cpp")
    r = _route(tmp_path, es, [_svc("Llama.CPP")], backend="llamacpp")
    assert r["verdict"]["current"]["verdict"] == "QUALIFIED", r["verdict"]["current"]
    assert r["allowed"] is True, r["reasons"]
    assert _route(tmp_path, es, [_svc()], backend="llamacpp")["allowed"] is False  # a vllm service


@pytest.mark.parametrize("recorded", ["", "   "])
def test_a_credited_launch_recording_no_engine_leaves_the_engine_untold(
    tmp_path: Path, recorded: str
) -> None:
    es = _unbound()
    launch = entry(es, "launch")["payload"]
    launch["engine"] = recorded
    del launch["bindings"]["engine"]
    r = _route(tmp_path, es, [_svc()], backend="vllm")
    # fix 95: an engine that is no name cannot bear the backend out: the verdict is not QUALIFIED, and the
    # route is refused on it before its engine is asked
    assert r["verdict"]["current"]["verdict"] == "INCONCLUSIVE", r["verdict"]["current"]
    assert r["allowed"] is False, r["reasons"]
    assert "is INCONCLUSIVE" in " ".join(r["reasons"]), r["reasons"]


def test_a_launch_without_its_engine_field_is_refused_at_ingest(tmp_path: Path) -> None:
    es = _unbound()
    del entry(es, "launch")["payload"]["engine"]
    with pytest.raises(SchemaError, match="engine"):
        _route(tmp_path, es, [_svc()])


@pytest.mark.parametrize("value", [7, None, ["vllm"]])
def test_a_launch_with_a_mistyped_engine_is_refused_at_ingest(tmp_path: Path, value: Any) -> None:
    es = _unbound()
    entry(es, "launch")["payload"]["engine"] = value
    with pytest.raises(SchemaError, match="engine"):
        _route(tmp_path, es, [_svc()])


@pytest.mark.parametrize("key", ["Engine", "engine "])
def test_a_spec_naming_engine_misspelled_binds_no_engine_a_route_can_reach(tmp_path: Path, key: str) -> None:
    """A renamed binding is no binding the launches are read instead of: what the spec meant is kept
    (misspelled_binding), and no service runs that engine."""
    es = qualified_entries()
    bindings = entry(es, "campaign-job")["payload"]["spec"]["bindings"]
    bindings[key] = bindings.pop("engine")
    r = _route(tmp_path, es, [_svc()], backend="vllm")
    assert r["allowed"] is False, r["reasons"]


# --- one normaliser ----------------------------------------------------------------------------------------


def test_engine_key_is_the_one_normaliser() -> None:
    aliases = {"llama.cpp": "llamacpp"}
    assert engine_key("vLLM") == engine_key(" vllm ") == "vllm"
    assert engine_key("Llama.CPP", aliases) == engine_key("llamacpp", aliases) == "llamacpp"
    assert engine_key("sglang", aliases) == "sglang"
    for nothing in ("", "  ", None, 7, ["vllm"]):
        assert engine_key(nothing, aliases) is None


@pytest.mark.parametrize(
    "table",
    [
        pytest.param('engine_names = "llamacpp"', id="not-a-table"),
        pytest.param('engine_names = { "llama.cpp" = 7 }', id="mistyped-value"),
        pytest.param(
            'engine_names = { "llama.cpp" = "llamacpp", "Llama.cpp" = "vllm" }', id="one-spelling-two"
        ),
    ],
)
def test_a_policy_whose_engine_names_cannot_be_read_is_refused(tmp_path: Path, table: str) -> None:
    """The table is the qualification's (its one copy, fix 107): one there that cannot be read refuses the
    route (PolicyError naming engine_names), never compares engines by their spelling alone."""
    shipped = load_policy("backend-qualification").data.decode()
    start = shipped.index("engine_names = {")
    end = shipped.index("\n", start)
    (tmp_path / "backend-qualification.toml").write_text(shipped[:start] + table + shipped[end:])
    for name in ("routing-change", "evidence-acceptance"):
        (tmp_path / f"{name}.toml").write_bytes(load_policy(name).data)
    with pytest.raises(PolicyError, match="engine_names"):
        _route(tmp_path / "run", qualified_entries(), [_svc()], policy_dir=tmp_path)
