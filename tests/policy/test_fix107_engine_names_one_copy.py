"""Fix 107: one copy of the engine-name table (``params.engine_names``: another spelling of an engine -> its
name, read by ``names.engine_aliases``).

Fix 95 put the table in the qualification policy (the verdict compares a campaign's backend with the engine
its entries ran, and a verdict is a pure function of its own policy files) while routing-change.toml kept
its own, identical copy: a team that edited one would have the verdict, the routing gate and the collector
compare engines by different names. The qualification's table is now the only copy: the routing gate reads
it there (``routing._engine_aliases``, as it reads ``gpu_benign_classes``), a routing policy stating its own
is refused when it is loaded and when a change is judged, naming where the one copy lives, and the
collector's ``[campaign] backend`` check reads it (and ``params.engines_of_any_backend``) from the
qualification policy too. A routing check's CEL reads nothing of the table: the gate hands it engines
already compared (``item.engine_key``, ``qualified_engine``)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from ledger.collectors.campaign import load_campaign
from ledger.errors import ConfigError, PolicyError
from ledger.policy.fixtures import build_fixture_ledger
from ledger.policy.loader import load_policy
from ledger.policy.routing import check_routing_change, load_checked
from ledger.service import Ledger
from tests.collectors.test_backend_is_engine import _campaign
from tests.policy.conftest import FIXTURES, POLICY_DIR
from tests.policy.test_fail_closed import qualified_entries, verdict_of
from tests.policy.test_fix95_verdict_side import _engine, _item
from tests.policy.test_routing_current import NOW, OK, SUBJECT

SHIPPED_TABLE = "engine_names = { "
ONE_COPY = (
    r"params.engine_names is the qualification's \(backend-qualification's params.engine_names, one copy\)"
)


def _policies(tmp_path: Path, qual: tuple[str, str] | None = None, routing_extra: str = "") -> Path:
    """A copy of the shipped policies; ``qual``: (old, new) replaced once in the qualification's text;
    ``routing_extra``: lines added under the routing policy's [params]."""
    d = tmp_path / "policies"
    shutil.copytree(POLICY_DIR, d, ignore=shutil.ignore_patterns("fixtures"))
    if qual is not None:
        q = d / "backend-qualification.toml"
        text = q.read_text()
        assert text.count(qual[0]) == 1, qual[0]
        q.write_text(text.replace(qual[0], qual[1]))
    if routing_extra:
        r = d / "routing-change.toml"
        r.write_text(r.read_text().replace("[params]\n", "[params]\n" + routing_extra + "\n", 1))
    return d


def _route(tmp_path: Path, policies: Path, engine: str) -> dict[str, Any]:
    """The route of seed 004 (qualified on vllm) onto a layout whose service of the model runs ``engine``,
    judged with the routing policy of ``policies``."""
    ledger, _spec, _b = build_fixture_ledger(
        FIXTURES / "routing-change/seed004-router.toml",
        tmp_path / f"home-{len(list(tmp_path.glob('home-*')))}",
        POLICY_DIR,
        init=Ledger.init,
    )
    dep = {**OK, "services": [{**OK["services"][0], "engine": engine}, OK["services"][1]]}
    try:
        return check_routing_change(
            ledger, load_policy("routing-change", policies), dict(SUBJECT), deployment=dep, now=NOW
        )
    finally:
        ledger.close()


# --- the one copy ---------------------------------------------------------------------------------------


def test_the_table_lives_in_the_qualification_only() -> None:
    assert "engine_names" not in load_policy("routing-change").params
    assert load_policy("backend-qualification").params["engine_names"]["llama.cpp"] == "llamacpp"


@pytest.mark.parametrize(
    "stated",
    [
        'engine_names = { "llama.cpp" = "llamacpp", "llama-cpp" = "llamacpp", "llama_cpp" = "llamacpp", '
        '"llama-server" = "llamacpp", "sglang-server" = "sglang" }',
        'engine_names = { "vllm-openai" = "vllm" }',
        "engine_names = {}",
        'engine_names = "llamacpp"',
    ],
    ids=["the-same-table", "another-table", "empty", "mistyped"],
)
def test_a_routing_policy_stating_its_own_engine_names_is_refused(tmp_path: Path, stated: str) -> None:
    """Whatever it holds (the same table, another one, none, a mistyped one): a second copy could disagree
    with the verdict's. Refused when the policy is loaded (``load_checked``: ``ledger policy show``, the
    API) and when a change is judged, naming the key and where its one copy lives."""
    policies = _policies(tmp_path, routing_extra=stated)
    with pytest.raises(PolicyError, match=ONE_COPY):
        load_checked("routing-change", policies)
    with pytest.raises(PolicyError, match=ONE_COPY):
        _route(tmp_path, policies, "vllm")


def test_a_renamed_table_in_the_routing_policy_is_no_copy(tmp_path: Path) -> None:
    """Neighbour: a routing param under another name is not read as the table: engines still compare by
    the qualification's (``vllm-openai`` is no vllm there, so the route is refused)."""
    policies = _policies(tmp_path, routing_extra='engine_name = { "vllm-openai" = "vllm" }')
    r = _route(tmp_path, policies, "vllm-openai")
    assert r["allowed"] is False, r["reasons"]
    assert any("not the qualified engine vllm" in x for x in r["reasons"]), r["reasons"]


def test_a_routing_check_reading_params_engine_names_is_refused_at_load(tmp_path: Path) -> None:
    """A routing check's CEL reads nothing of the table (the gate compares engines: ``item.engine_key``,
    ``qualified_engine``): the routing policy sets no such param, so the read is refused, naming it."""
    policies = _policies(tmp_path)
    r = policies / "routing-change.toml"
    text = r.read_text()
    old = 'expr = "deployment.host_key == host.key"'
    assert text.count(old) == 1
    r.write_text(text.replace(old, "expr = \"params.engine_names['llama.cpp'] == 'llamacpp'\""))
    with pytest.raises(PolicyError, match="engine_names"):
        load_checked("routing-change", policies)


# --- the collector, the verdict and the routing gate read the same table -------------------------------


def test_the_collector_the_verdict_and_the_routing_gate_follow_one_change_of_the_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The table changed once (the qualification's: ``vllm-openai`` is vllm), all three follow it; with
    the shipped table all three read ``vllm-openai`` as another engine than vllm."""
    mapped = _policies(tmp_path, (SHIPPED_TABLE, SHIPPED_TABLE + '"vllm-openai" = "vllm", '))
    campaigns = tmp_path / "campaigns"
    campaigns.mkdir()

    # the collector: [campaign] backend vllm-openai with [engine] kind vllm
    monkeypatch.delenv("LEDGER_POLICY_DIR", raising=False)
    with pytest.raises(ConfigError, match=r"campaign\.backend 'vllm-openai'"):
        load_campaign(_campaign(campaigns, "vllm", "vllm-openai"))
    monkeypatch.setenv("LEDGER_POLICY_DIR", str(mapped))
    assert load_campaign(_campaign(campaigns, "vllm", "vllm-openai")).backend == "vllm-openai"
    monkeypatch.delenv("LEDGER_POLICY_DIR")

    # the verdict: a campaign of backend vllm whose job bound and launch ran vllm-openai
    es = qualified_entries()
    _engine(es, job="vllm-openai", launch="vllm-openai")
    v = verdict_of(tmp_path, es)
    assert _item(v, "engine-contradicted") is not None, v.get("claims")
    es = qualified_entries()
    _engine(es, job="vllm-openai", launch="vllm-openai")
    v = verdict_of(tmp_path, es, policy_dir=mapped)
    assert _item(v, "engine-contradicted") is None, v.get("claims")

    # the routing gate: a service of the route's model that runs vllm-openai
    shipped = _route(tmp_path, _policies(tmp_path / "shipped"), "vllm-openai")
    assert shipped["allowed"] is False, shipped["reasons"]
    r = _route(tmp_path, mapped, "vllm-openai")
    assert r["allowed"] is True, r["reasons"]


def test_the_collector_refuses_where_the_qualifications_table_cannot_be_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fail closed: a table there that cannot be read refuses the campaign (bad-config naming the table),
    never compares the backend by its spelling alone."""
    shipped = (POLICY_DIR / "backend-qualification.toml").read_text()
    start = shipped.index(SHIPPED_TABLE)
    table = shipped[start : shipped.index("\n", start)]
    broken = _policies(tmp_path, (table, 'engine_names = { "llama.cpp" = 7 }'))
    monkeypatch.setenv("LEDGER_POLICY_DIR", str(broken))
    with pytest.raises(ConfigError, match="engine_names"):
        load_campaign(_campaign(tmp_path, "llamacpp", "llama.cpp"))


# --- engines of any backend: the qualification's param, as the verdict reads it -------------------------

ANY = 'engines_of_any_backend = ["generic"]'


@pytest.mark.parametrize(
    ("line", "loads"),
    [
        (ANY, True),
        ("engines_of_any_backend = []", False),
        ("", False),  # dropped: no engine names any backend (fail closed, as the verdict reads it)
        ("engines_of_any_backend_renamed = ['generic']", False),
    ],
    ids=["shipped", "none-listed", "dropped", "renamed"],
)
def test_a_generic_campaign_names_any_backend_only_where_the_qualification_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, line: str, loads: bool
) -> None:
    monkeypatch.setenv("LEDGER_POLICY_DIR", str(_policies(tmp_path, (ANY, line))))
    campaign = _campaign(tmp_path, "generic", "vllm")
    if loads:
        assert load_campaign(campaign).backend == "vllm"
    else:
        with pytest.raises(ConfigError, match=r"campaign\.backend 'vllm'"):
            load_campaign(campaign)


def test_a_listed_engine_kind_names_any_backend(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The collector reads the list, not the word generic: a kind the qualification lists names any
    backend (by the table's names: sglang-server is sglang)."""
    monkeypatch.setenv(
        "LEDGER_POLICY_DIR", str(_policies(tmp_path, (ANY, 'engines_of_any_backend = ["sglang-server"]')))
    )
    assert load_campaign(_campaign(tmp_path, "sglang", "vllm")).backend == "vllm"


@pytest.mark.parametrize(
    "line", ['engines_of_any_backend = "generic"', "engines_of_any_backend = [1]"], ids=["text", "number"]
)
def test_a_mistyped_engines_of_any_backend_refuses_the_campaign(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, line: str
) -> None:
    monkeypatch.setenv("LEDGER_POLICY_DIR", str(_policies(tmp_path, (ANY, line))))
    with pytest.raises(ConfigError, match="engines_of_any_backend"):
        load_campaign(_campaign(tmp_path, "generic", "vllm"))
