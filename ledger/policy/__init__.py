"""Policies as data: load TOML policies, filter evidence, walk the gate ladder, gate routing changes."""

from ledger.policy.evaluate import evaluate, record_verdict, replay_verdict
from ledger.policy.loader import LoadedPolicy, default_policy_dir, list_policies, load_policy
from ledger.policy.routing import check_routing_change, load_deployment

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
]
