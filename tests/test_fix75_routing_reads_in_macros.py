"""Fix 75 (issue 12, f2): the routing policy's reads of its lists' elements inside macros, by index, and of
its maps were not name-checked when it loaded.

Only ``probes`` was registered as a list whose elements the loader name-checks, and ``ROUTING_ITEMS``'
shapes applied only to ``item`` under ``for_each``: ``!services.exists(s, 'multi_gpuu' in s && s.multi_gpuu
&& …)`` loaded, its misspelt guard always false, and the seed004 case (a multi-GPU service without
NCCL_P2P_DISABLE on a P2P-faulty host) was allowed. Now every list of the routing context (``services``,
``gpus``, ``standing_failures``, ``probes``: ``ROUTING_LISTS``) has its elements checked however they are
read — a macro with any variable name, a chain of ``filter``, an index — and every map (``request``,
``host`` with the policy's host facts, ``current``, ``deployment``, ``routing``: ``ROUTING_SHAPES``) its
names; a scalar (``verdict_age_s`` …) holds none. A misspelling is refused at load naming file, line and
name; the shipped policy still loads.
"""

from __future__ import annotations

import io
import shutil
import sys
from pathlib import Path

import pytest

from ledger.cli import main
from ledger.policy.loader import (
    ROUTING_ENTRIES,
    ROUTING_ITEMS,
    ROUTING_LISTS,
    ROUTING_NAMES,
    ROUTING_SHAPES,
    default_policy_dir,
    load_policy,
    routing_shapes,
)
from tests.test_fix69_routing_names_checked_at_load import NAME, _loads, _policies, _refused

# a check without for_each (deployment-host), whose expr is replaced
EXPR = 'expr = "deployment.host_key == host.key"'
NCCL = """for_each = "services"
expr = "!item.multi_gpu || ('NCCL_P2P_DISABLE' in item.env && item.env.NCCL_P2P_DISABLE == '1')"
fail = "service {item[name]} spans GPUs {item[gpus_text]} on {host[name]}, which records a P2P fault, \
without NCCL_P2P_DISABLE=1\""""


def _nccl(field: str) -> str:
    return (
        f"expr = \"!services.exists(s, '{field}' in s && s.{field} && "
        "!('NCCL_P2P_DISABLE' in s.env && s.env.NCCL_P2P_DISABLE == '1'))\"\n"
        'fail = "a service spans GPUs on {host[name]}, which records a P2P fault, without NCCL_P2P_DISABLE=1"'
    )


def _policy_test(d: Path) -> tuple[int, str]:
    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
    old = sys.stdout
    sys.stdout = out
    try:
        code = main(["policy", "test", "--policy-dir", str(d), NAME])
    finally:
        sys.stdout = old
        out.flush()
    return code, out.buffer.getvalue().decode()  # type: ignore[attr-defined]


def test_misspelt_guard_in_a_macro_over_services_was_never_judged(tmp_path: Path) -> None:
    """The reproducer: the misspelt guard is refused at load, naming the element read and its line."""
    msg = _refused(tmp_path, NCCL, _nccl("multi_gpuu"), "'multi_gpuu' in services[…]")
    assert "did you mean 'multi_gpu'" in msg


def test_the_same_check_spelt_right_still_refuses_the_seed004_case(tmp_path: Path) -> None:
    """Written as a macro over services with the right name, the check loads and still judges: seed004's
    multi-GPU service without NCCL_P2P_DISABLE on a P2P-faulty host is refused by it."""
    d, _ = _policies(tmp_path, NCCL, _nccl("multi_gpu"))
    shutil.copytree(default_policy_dir() / "fixtures", d / "fixtures")
    _code, out = _policy_test(d)
    # the case is refused by the macro's check (its fail text names no service, so the fixture's expected
    # reason, which names one, is not matched: the only difference), every other fixture passes
    assert "4/5 fixtures pass" in out, out
    assert "reasons ['a service spans GPUs on gpu-box-1, which records a P2P fault" in out, out


# (list, a read of one of its elements with {f} for the field, the right field, a misspelling)
ELEMENT_READS = [
    ("services", "services.exists(s, s.{f} == request.model_key)", "model_key", "modle_key"),
    ("services", "services.all(svc, !has(svc.{f}) || svc.{f} != '')", "model_key", "modle_key"),
    ("services", "services.exists_one(x, 'x' in x.{f})", "env", "evn"),
    ("services", "services.filter(a, a.gpus.size() > 1).exists(b, b.{f})", "multi_gpu", "multi_gpus"),
    ("services", "services.map(m, m.{f}).exists(k, k == request.model_key)", "model_key", "model_ky"),
    ("services", "services[0].{f} == request.model_key", "model_key", "modle_key"),
    ("services", "'{f}' in services[size(services) - 1]", "model_key", "modle_key"),
    ("gpus", "gpus.all(g, g.{f})", "within_max", "within_mx"),
    ("gpus", "has(gpus[0].{f})", "within_max", "within_mx"),
    ("gpus", "services[size(gpus[0].{f})].name == 'x'", "services", "servics"),
    ("standing_failures", "!standing_failures.exists(f, f.{f} == 'x')", "campaign", "campagn"),
    ("standing_failures", "standing_failures.all(zz, 'x' in zz.{f})", "reason", "reasn"),
    ("standing_failures", "size(standing_failures) == 0 || standing_failures[0].{f} != ''", "entry", "entyr"),
    ("probes", "probes.exists(q, q.{f} == true)", "serves_model", "serves_modle"),
    ("probes", "probes[0].{f} == true", "newest", "newst"),
]


@pytest.mark.parametrize(("lst", "form", "right", "wrong"), ELEMENT_READS)
def test_element_reads_of_every_routing_list_are_checked(
    tmp_path: Path, lst: str, form: str, right: str, wrong: str
) -> None:
    msg = _refused(tmp_path / "wrong", EXPR, f'expr = "{form.format(f=wrong)}"', repr(wrong))
    assert f"{lst}[…]" in msg, msg
    _loads(tmp_path / "right", EXPR, f'expr = "{form.format(f=right)}"')


def test_an_element_read_guarded_with_in_or_has_is_still_checked(tmp_path: Path) -> None:
    """A guard does not make a name there: ``'x' in s`` / ``has(s.x)`` of a name no element holds is
    always false, and refused as the read it guards."""
    for form in ("services.exists(s, 'modle_key' in s)", "services.exists(s, has(s.modle_key))"):
        _refused(tmp_path / str(len(form)), EXPR, f'expr = "{form}"', "'modle_key'")


# (a read of a map or a scalar of the context with {f}, the right name, a misspelling)
MAP_READS = [
    ("request", "request.{f} != null", "model_key", "modle_key"),
    ("request", "'{f}' in request", "model_key", "modle_key"),
    ("host", "host.{f} != null", "gpu_indexes", "gpu_indexs"),
    ("host", "has(host.{f})", "gpu_faults_unplaced", "gpu_faults_unplacd"),
    ("host", "host.{f}", "p2p_fault", "p2p_falt"),  # a host fact the policy's [routing.host_fact] names
    ("current", "current != null && current.{f} == 'QUALIFIED'", "verdict", "verdct"),
    ("current", "current != null && current['{f}'] == 'gpu'", "device", "devcie"),
    ("deployment", "deployment.{f} == host.key", "host_key", "hots_key"),
    ("routing", "routing.{f} == '7d'", "verdict_max_age", "verdict_max_ag"),
]


@pytest.mark.parametrize(("root", "form", "right", "wrong"), MAP_READS)
def test_map_reads_of_the_routing_context_are_checked(
    tmp_path: Path, root: str, form: str, right: str, wrong: str
) -> None:
    msg = _refused(tmp_path / "wrong", EXPR, f'expr = "{form.format(f=wrong)}"', repr(wrong))
    assert f"did you mean {right!r}" in msg, msg
    assert f"{root}.{wrong}`" in msg or f"{wrong!r} in {root}`" in msg, msg
    _loads(tmp_path / "right", EXPR, f'expr = "{form.format(f=right)}"')


def test_a_field_of_a_scalar_of_the_routing_context_is_refused(tmp_path: Path) -> None:
    for scalar in ("verdict_age_s", "qualified_engine", "identities_text"):
        _refused(tmp_path / scalar, EXPR, f'expr = "{scalar}.value == 1"', f"`{scalar}.value`")
    _loads(tmp_path / "whole", EXPR, 'expr = "verdict_age_s <= max_verdict_age_s"')


def test_map_and_element_placeholders_of_a_fail_text_are_checked(tmp_path: Path) -> None:
    old = "the deployment is for host {deployment[host]}, not {host[name]}"
    _refused(tmp_path / "h", old, "for host {deployment[host]}, not {host[nmae]}", "'nmae'")
    _refused(tmp_path / "s", old, "for host {deployment[hots]}, not {host[name]}", "'hots'")
    _refused(tmp_path / "l", old, "for host {services[0][nmae]}", "'nmae'")
    _loads(tmp_path / "ok", old, "for host {services[0][name]}, not {host[name]} ({current[reason]})")


def test_a_macro_variable_named_as_a_list_is_that_variable(tmp_path: Path) -> None:
    """A name a macro binds is its variable there, not the context's list of that name."""
    _loads(tmp_path / "v", EXPR, 'expr = "[1, 2].exists(services, services > 1)"')
    _loads(tmp_path / "w", EXPR, 'expr = "gpus.all(services, services.within_max)"')
    _refused(tmp_path / "x", EXPR, 'expr = "gpus.all(services, services.model_key != null)"', "'model_key'")


def test_every_routing_name_is_checked_as_an_entry_a_list_a_map_or_a_scalar() -> None:
    """One vocabulary: each name of the routing context is described once (the gate checks at check time
    that it built exactly these)."""
    assert {*ROUTING_ENTRIES, *ROUTING_LISTS, *ROUTING_SHAPES, "params", "item"} == ROUTING_NAMES
    assert not set(ROUTING_ENTRIES) & set(ROUTING_SHAPES) and not set(ROUTING_LISTS) & set(ROUTING_SHAPES)
    assert set(ROUTING_LISTS) == {*ROUTING_ITEMS, "probes"}
    shipped = load_policy(NAME)
    assert routing_shapes(shipped.host_facts)["host"] == ROUTING_SHAPES["host"] | {"p2p_fault"}
