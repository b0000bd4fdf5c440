"""Fix 69 (issue 11, item 2): the routing policy's reads through ``verdict``, ``probes``, ``item`` and
``[routing.host_fact]`` were not name-checked when it loaded.

Gate and entry reads are checked at load (``e.payload`` / ``e.derived`` names, template placeholders); the
routing gate's were not: ``verdict.payload.verdikt``, ``probes.exists(p, p.payload.chek …)``,
``item.within_maks`` or a host fact's ``e.payload.event`` loaded, and read as missing at check time (a
check over a missing name fails or passes by accident, never as written). Now each reading path is checked
against what the routing context holds (the loader's ``ROUTING_ENTRIES`` / ``ROUTING_PROBE_*`` /
``ROUTING_ITEMS`` / ``ROUTING_HOST_FACT_KINDS``, which ``check_routing_change`` builds and checks it built):
a name that is not there is refused at load, naming file, line and the name; ``for_each`` must name a list
the context holds.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from ledger.errors import PolicyError
from ledger.policy.loader import (
    ROUTING_ENTRIES,
    ROUTING_HOST_FACT_KINDS,
    ROUTING_ITEMS,
    ROUTING_PROBE_FIELDS,
    ROUTING_PROBE_KINDS,
    default_policy_dir,
    load_policy,
)
from ledger.policy.model import ENTRY_VIEW_FIELDS

NAME = "routing-change"
VERDICT_QUALIFIED = "expr = \"verdict.payload.verdict == 'QUALIFIED'\""
GPU_WITHIN = 'expr = "item.within_max == true"'


def _policies(tmp_path: Path, old: str, new: str) -> tuple[Path, int]:
    """A copy of the shipped policies whose routing policy has ``old`` replaced by ``new`` (once), and the
    line the replacement starts on."""
    d = tmp_path / "policies"
    d.mkdir(parents=True, exist_ok=True)
    for f in default_policy_dir().glob("*.toml"):
        shutil.copy(f, d / f.name)
    p = d / f"{NAME}.toml"
    text = p.read_text(encoding="utf-8")
    assert text.count(old) >= 1, old
    at, lines = text[: text.index(old)].count("\n"), text.split("\n")
    p.write_text(text.replace(old, new, 1), encoding="utf-8")
    # the line of the key whose value holds it (a multi-line string's key line)
    key = next(k for k in range(at, -1, -1) if re.match(r"[A-Za-z_][\w-]*\s*=", lines[k]))
    return d, key + 1


def _refused(tmp_path: Path, old: str, new: str, name: str) -> str:
    d, line = _policies(tmp_path, old, new)
    with pytest.raises(PolicyError) as e:
        load_policy(NAME, d)
    msg = str(e.value)
    assert f"{NAME}.toml:{line}:" in msg, msg
    assert name in msg, msg
    return msg


def _loads(tmp_path: Path, old: str, new: str) -> None:
    d, _ = _policies(tmp_path, old, new)
    assert load_policy(NAME, d).name == NAME


# (reading path, shipped text, the name it reads, a misspelling, a name nothing there holds)
PATHS = [
    pytest.param(
        VERDICT_QUALIFIED,
        "verdict.payload.verdict",
        "verdict.payload.verdikt",
        "verdict.payload.grade",
        id="verdict-cel",
    ),
    pytest.param(
        "is {verdict[payload][verdict]} (entry",
        "{verdict[payload][verdict]}",
        "{verdict[payload][verdikt]}",
        "{verdict[payload][grade]}",
        id="verdict-template",
    ),
    pytest.param(
        "verdict (entry {verdict[id]}) was recorded",
        "{verdict[id]}",
        "{verdict[iid]}",
        "{verdict[number]}",
        id="verdict-view-field-template",
    ),
    pytest.param(
        "p.payload.check == 'health' && p.derived.ok",
        "p.payload.check",
        "p.payload.chek",
        "p.payload.route",
        id="probes-macro-payload",
    ),
    pytest.param(
        "p.derived.ok && p.payload.http_status == 200 &&",
        "p.derived.ok",
        "p.derived.okk",
        "p.derived.route",
        id="probes-macro-derived",
    ),
    pytest.param(
        "p.payload.check == 'models' && p.serves_model == true",
        "p.serves_model",
        "p.serves_modle",
        "p.route",
        id="probes-macro-further-name",
    ),
    pytest.param(
        "item.payload.check != 'health' || !item.newest",
        "!item.newest",
        "!item.newset",
        "!item.route",
        id="item-of-probes",
    ),
    pytest.param(
        "(entry {item[id]:.16}, collected {item[collected_at]})",
        "{item[collected_at]}",
        "{item[colected_at]}",
        "{item[route]}",
        id="item-of-probes-template",
    ),
    pytest.param(
        GPU_WITHIN,
        "item.within_max",
        "item.within_maks",
        "item.route",
        id="item-of-gpus",
    ),
    pytest.param("(item.faults) == 0", "item.faults", "item.fault", "item.route", id="item-of-gpus-size"),
    pytest.param(
        "!item.multi_gpu ||", "item.multi_gpu", "item.multi_gpus", "item.route", id="item-of-services"
    ),
    pytest.param(
        "('NCCL_P2P_DISABLE' in item.env &&", "item.env", "item.envs", "item.route", id="item-of-services-in"
    ),
    pytest.param(
        "campaign {item[campaign]} of",
        "{item[campaign]}",
        "{item[campaing]}",
        "{item[route]}",
        id="item-of-standing-failures-template",
    ),
    pytest.param(
        "e.payload.events.exists(v,",
        "e.payload.events",
        "e.payload.event",
        "e.payload.route",
        id="host-fact-kernel-log",
    ),
    pytest.param(
        "'p2p_fault' in e.payload.details",
        "e.payload.details",
        "e.payload.detail",
        "e.payload.route",
        id="host-fact-host-probe",
    ),
    pytest.param(
        "e.payload.text.matches('(?i)p2p')",
        "e.payload.text",
        "e.payload.txt",
        "e.payload.route",
        id="host-fact-note",
    ),
]


@pytest.mark.parametrize(("line", "right", "misspelled", "missing"), PATHS)
def test_routing_read_misspelled_was_read_as_missing_at_check_time(
    tmp_path: Path, line: str, right: str, misspelled: str, missing: str
) -> None:
    bad = misspelled.strip("{}!").split("[")[-1].split(".")[-1].rstrip("]")
    msg = _refused(tmp_path / "m", line, line.replace(right, misspelled, 1), bad)
    assert "did you mean" in msg  # the near name it holds
    gone = missing.strip("{}!").split("[")[-1].split(".")[-1].rstrip("]")
    _refused(tmp_path / "n", line, line.replace(right, missing, 1), gone)
    _loads(tmp_path / "r", line, line)  # the name as shipped


def test_an_item_reads_the_names_of_the_list_its_check_takes(tmp_path: Path) -> None:
    """What ``item`` holds depends on ``for_each``: a GPU's name in a services check, a service's in a GPU
    check, a probe's in a standing-failures check are each refused."""
    _refused(tmp_path / "a", "!item.multi_gpu ||", "!item.within_max ||", "'within_max'")
    _refused(tmp_path / "b", GPU_WITHIN, 'expr = "item.multi_gpu == true"', "'multi_gpu'")
    _refused(tmp_path / "c", "campaign {item[campaign]} of", "campaign {item[payload]} of", "'payload'")
    # a probe check's item is an entry: its payload names are checked as a health.probe's
    _refused(
        tmp_path / "d",
        "item.payload.check != 'health' || !item.newest",
        "item.payload.campaign != 'health' || !item.newest",
        "'campaign'",
    )


def test_routing_reads_through_index_has_and_in_are_checked(tmp_path: Path) -> None:
    """The same name read another way: a string index, ``has(…)``, ``'x' in …``."""
    line = VERDICT_QUALIFIED
    for form in (
        "verdict.payload['verdikt']",
        "has(verdict.payload.verdikt)",
        "'verdikt' in verdict.payload",
    ):
        _refused(tmp_path / form.replace("'", "").replace(" ", "_"), line, f'expr = "{form}"', "'verdikt'")
    _loads(
        tmp_path / "has", line, "expr = \"has(verdict.payload.verdict) && verdict.payload['verdict'] == 'Q'\""
    )
    _refused(tmp_path / "in", "!item.multi_gpu ||", "!('multi_gpus' in item) ||", "'multi_gpus'")


def test_for_each_naming_no_list_of_the_routing_context_is_refused_at_load(tmp_path: Path) -> None:
    old = 'for_each = "standing_failures"'
    for wrong in ("standing_failure", "Services", "verdict", "request"):
        _refused(tmp_path / wrong, old, f'for_each = "{wrong}"', repr(wrong))
    # the shipped policy takes an item of every list the context holds, and loads
    shipped = load_policy(NAME)
    assert {c.spec.for_each for c in shipped.routing_checks} - {None} == {*ROUTING_ITEMS, "probes"}


def test_a_macro_over_probes_reads_probe_entries_a_macro_over_services_is_not_one(tmp_path: Path) -> None:
    old = "services.exists(s, s.model_key == request.model_key)"
    # a probe read through filter is still a probe
    _refused(
        tmp_path / "f",
        "probes.exists(p, p.payload.check == 'health' && p.derived.ok",
        "probes.filter(q, q.newest).exists(p, p.payload.chek == 'health' && p.derived.ok",
        "'chek'",
    )
    _loads(tmp_path / "s", old, old)


def test_the_routing_shapes_are_what_the_gate_builds() -> None:
    """The loader's one copy names what ``check_routing_change`` builds (it refuses to judge otherwise);
    the kinds are kinds the ledger knows."""
    from ledger.entries import KIND_MODELS

    kinds = {k for k, _ in KIND_MODELS}
    assert set(ROUTING_HOST_FACT_KINDS) <= kinds and set(ROUTING_PROBE_KINDS) <= kinds
    assert all(set(v) <= kinds for v in ROUTING_ENTRIES.values())
    assert not ROUTING_PROBE_FIELDS & set(ENTRY_VIEW_FIELDS)
    assert set(ROUTING_ITEMS) == {"services", "gpus", "standing_failures"}
