"""The registered rejection rules: every built-in rule code a verdict's ``rejected`` list can carry.

docs/POLICY.md ("Evidence filtering") documents them in one table, in this order (a test checks that the
table and ``Rule`` agree). A policy's ``[[rules]]`` add data-driven rule names of their own.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from ledger.trust import Fault, TrustProblem

__all__ = ["CREDIT_ONLY", "CREDIT_ONLY_BY_CLAIM", "RULES", "TRUST_RULES", "Rule", "trust_rejection"]


class Rule(StrEnum):
    """Built-in rejection rules, in the order the filter applies them (the first that matches is reported)."""

    BAD_SIGNATURE = "bad-signature"
    UNKNOWN_SIGNER = "unknown-signer"
    REVOKED = "revoked"
    OUTSIDE_VALIDITY = "outside-validity"
    WRONG_ROLE = "wrong-role"
    SCHEMA_INVALID = "schema-invalid"
    SUPERSEDED = "superseded"
    SELF_SUPERSEDED = "self-superseded"
    OTHER_HOST = "other-host"
    REJECTED_BY_ACCEPTANCE = "rejected-by-acceptance"
    JOB_OF_OTHER_CAMPAIGN = "job-of-other-campaign"
    AFTER_JOB_TERMINAL = "after-job-terminal"
    KILLED_RUN = "killed-run"
    ARTIFACT_MISSING = "artifact-missing"
    ARTIFACT_CORRUPT = "artifact-corrupt"
    ARTIFACT_NOT_STORED = "artifact-not-stored"
    BINDINGS_MISMATCH = "bindings-mismatch"
    # after a policy's own [[rules]] (which say first why a run or probe is not credited: not run, cut by a
    # stop, of another spec or model, before any launch, after its launch's end, beyond the attempt budget)
    HARNESS_OTHER_ENDPOINT = "harness-other-endpoint"
    PROBE_OTHER_ENDPOINT = "probe-other-endpoint"
    REVIEW_FAIL = "review-fail"
    REVIEW_MISSING = "review-missing"
    ACCEPTANCE_MISSING = "acceptance-missing"
    STALE = "stale"
    BEFORE_GPU_RESET = "before-gpu-reset"


# The rules that only take credit away: an entry they exclude that shows a failure (the acceptance policy's
# ``[acceptance.against]``) stays evidence against the engine — reported with ``counts_against``, and judged
# by every gate, which it can fail and never pass. Every other rule says the entry is not evidence of the
# subject at all: not trusted (signature, signer, key, role, schema), withdrawn by a supersession with its
# reason, another host's fact, or output after its job ended (the engine it came from was gone).
CREDIT_ONLY: frozenset[Rule] = frozenset(
    {
        Rule.SELF_SUPERSEDED,
        Rule.REJECTED_BY_ACCEPTANCE,
        Rule.JOB_OF_OTHER_CAMPAIGN,
        Rule.KILLED_RUN,
        Rule.ARTIFACT_MISSING,
        Rule.ARTIFACT_CORRUPT,
        Rule.ARTIFACT_NOT_STORED,
        Rule.BINDINGS_MISMATCH,
        Rule.HARNESS_OTHER_ENDPOINT,
        Rule.PROBE_OTHER_ENDPOINT,
        Rule.REVIEW_FAIL,
        Rule.REVIEW_MISSING,
        Rule.ACCEPTANCE_MISSING,
        Rule.STALE,
        Rule.BEFORE_GPU_RESET,
    }
)
# Rules that withdraw an entry where the log and the entry's own time both put it out (logged after what ends
# it, claiming a time after it too) and only withhold its credit where one of them alone does (logged after
# the job's terminal entry claiming a time inside the job; or logged before it, after the job's claimed
# ``ended_at``): the caller passes ``credit_only`` per entry (docs/POLICY.md marks them both ways)
CREDIT_ONLY_BY_CLAIM: frozenset[Rule] = frozenset({Rule.AFTER_JOB_TERMINAL})

_DESCRIPTIONS: dict[Rule, str] = {
    Rule.BAD_SIGNATURE: "signature does not verify",
    Rule.UNKNOWN_SIGNER: "signed by a key this ledger does not know",
    Rule.REVOKED: "signed by a key after its revocation took effect",
    Rule.OUTSIDE_VALIDITY: "signed outside the key's validity window",
    Rule.WRONG_ROLE: "signer lacks the role the policy requires",
    Rule.SCHEMA_INVALID: "the stored payload does not validate against its kind's strict model",
    Rule.ARTIFACT_MISSING: "an artifact is not in the store",
    Rule.ARTIFACT_CORRUPT: "an artifact does not match its digest",
    Rule.ARTIFACT_NOT_STORED: "an artifact the policy reads back (engine logs) is stored by reference only",
    Rule.SUPERSEDED: "superseded by a later supersession",
    Rule.SELF_SUPERSEDED: "superseded by the key that signed it: not credited, but a failure it shows stands",
    Rule.OTHER_HOST: "a host probe or model pin of a host the campaign did not run on, or of none",
    Rule.REJECTED_BY_ACCEPTANCE: (
        "rejected by an acceptance entry (evidence, a review, a supersession or an acceptance)"
    ),
    Rule.JOB_OF_OTHER_CAMPAIGN: "refs as its job a job of another campaign than the one it names",
    Rule.AFTER_JOB_TERMINAL: "produced after its job's terminal time",
    Rule.KILLED_RUN: "from a cancelled or killed run: not credited as passing",
    Rule.BINDINGS_MISMATCH: "bindings differ from the campaign's pinned manifest",
    Rule.HARNESS_OTHER_ENDPOINT: (
        "a semantic or benchmark result that measured another endpoint than the one the launch of its "
        "attempt served at, or records none"
    ),
    Rule.PROBE_OTHER_ENDPOINT: (
        "a health probe that asked another server than the one the launch of its attempt served at, "
        "or records none"
    ),
    Rule.REVIEW_FAIL: "a review FAILed it and no later PASS on a repaired commit lifts that",
    Rule.REVIEW_MISSING: "needs a review PASS it does not have",
    Rule.ACCEPTANCE_MISSING: "needs an acceptance it does not have",
    Rule.STALE: "older than the policy's freshness bound",
    Rule.BEFORE_GPU_RESET: "older than the host's last GPU reset; the policy needs post-reset state",
}

# rule code → what it means (the shape ``ledger.policy.acceptance.RULES`` always had)
RULES: dict[str, str] = {str(rule): _DESCRIPTIONS[rule] for rule in Rule}

# The trust path's answer (``ledger.trust``) as a rejection rule
TRUST_RULES: dict[Fault, Rule] = {
    Fault.UNKNOWN_SIGNER: Rule.UNKNOWN_SIGNER,
    Fault.REVOKED: Rule.REVOKED,
    Fault.NOT_YET_VALID: Rule.OUTSIDE_VALIDITY,
    Fault.EXPIRED: Rule.OUTSIDE_VALIDITY,
    Fault.WRONG_ROLE: Rule.WRONG_ROLE,
}


def _fmt(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def trust_rejection(problem: TrustProblem, logged_at: str) -> tuple[Rule, str]:
    """The rule and detail a verdict reports for an entry (logged at ``logged_at``) the trust path refuses."""
    rule = TRUST_RULES[problem.fault]
    rec = problem.record
    if rec is None:
        return rule, f"key {problem.key_id} is not enrolled in this ledger"
    if problem.fault is Fault.REVOKED and rec.revoked_at is not None:
        why = f": {rec.revoke_reason}" if rec.revoke_reason else ""
        return rule, (
            f"key {rec.name} was revoked effective {_fmt(rec.revoked_at)}{why}; "
            f"this entry was logged at {logged_at}"
        )
    if problem.fault is Fault.NOT_YET_VALID and rec.valid_from is not None:
        return rule, f"key {rec.name} is valid from {_fmt(rec.valid_from)}; logged {logged_at}"
    if problem.fault is Fault.EXPIRED and rec.valid_until is not None:
        return rule, f"key {rec.name} expired at {_fmt(rec.valid_until)}; logged {logged_at}"
    return rule, (
        f"signer {rec.name} holds {sorted(rec.roles)}; {problem.kind} needs one of {sorted(problem.allowed)}"
    )
