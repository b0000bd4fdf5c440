"""Policies as data: load TOML policies, filter evidence, walk the gate ladder, gate routing changes.

The names below are imported on first use, so that the command line (which imports ``ledger.policy.cli``)
does not pay for the database layer the verdict code needs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ledger.policy.loader import LoadedPolicy, default_policy_dir, list_policies, load_policy
    from ledger.policy.routing import check_routing_change, load_deployment, validate_deployment
    from ledger.policy.verdict import evaluate, record_verdict, replay_verdict

_WHERE = {
    "LoadedPolicy": "loader",
    "default_policy_dir": "loader",
    "list_policies": "loader",
    "load_policy": "loader",
    "check_routing_change": "routing",
    "load_deployment": "routing",
    "validate_deployment": "routing",
    "evaluate": "verdict",
    "record_verdict": "verdict",
    "replay_verdict": "verdict",
}

__all__ = [
    "LoadedPolicy",
    "check_routing_change",
    "default_policy_dir",
    "evaluate",
    "list_policies",
    "load_deployment",
    "load_policy",
    "record_verdict",
    "replay_verdict",
    "validate_deployment",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
