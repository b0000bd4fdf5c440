"""Policy commands: ``verdict`` (``replay``), ``check routing-change``, ``policy test|list|show``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from ledger.cli._common import (
    HomeOption,
    JsonOption,
    Outcome,
    SubjectOption,
    err,
    get_ledger,
    out,
    parse_subject,
    print_items,
    print_json,
    print_table,
)
from ledger.cli.witness import TrustPolicyOption, checkpoint_problems, load_policy_option

__all__ = ["register"]

PolicyOption = Annotated[
    str | None,
    typer.Option("--policy", help="Policy name (in the policy folder) or path to a policy TOML file."),
]
PolicyDirOption = Annotated[
    Path | None,
    typer.Option(
        "--policy-dir",
        envvar="LEDGER_POLICY_DIR",
        help="Folder of policy files (default: the shipped policies/).",
    ),
]

verdict_app = typer.Typer(
    help="Derive a verdict from the accepted evidence of a subject.",
    invoke_without_command=True,
    no_args_is_help=False,
)
check_app = typer.Typer(
    help="Gates for production changes: exit 0 allow, 1 deny, 2 error.", no_args_is_help=True
)
policy_app = typer.Typer(help="Policy files: list, show, run their fixture tests.", no_args_is_help=True)


def _subject(items: list[str] | None) -> dict[str, str]:
    from ledger.errors import InputError

    subject = parse_subject(items)
    if not subject:
        raise InputError("name the subject: --subject campaign=NAME (repeatable FIELD=VALUE)")
    return subject


def _read_ledger(home: Path | None) -> Any:
    """What a verdict or a routing check reads without writing: on a SQLite home the stdlib-``sqlite3``
    policy ledger (``ledger.reads.SqlitePolicyLedger``: no SQLAlchemy, no service, a fast start), else
    the service. ``--record`` and ``--trust-policy`` take the service (they write, or read cosignatures)."""
    from ledger.cli._common import home_path
    from ledger.home import Home
    from ledger.reads import SqlitePolicyLedger

    path = home_path(home)
    fast = SqlitePolicyLedger.open(Home(path))
    return fast if fast is not None else get_ledger(path)


def _load_policy(name: str, policy_dir: Path | None) -> Any:
    from ledger.policy.routing import load_checked

    return load_checked(name, policy_dir)


def _render_verdict(result: dict[str, Any]) -> None:
    from rich.text import Text

    colour = {"qualified": "green", "inconclusive": "yellow"}.get(result["status"], "red")
    subj = " ".join(f"{k}={v}" for k, v in sorted(result["subject"].items()))
    out.print(Text(result["verdict"], style=f"bold {colour}"), Text(subj), soft_wrap=True)
    pol = result["policy"]
    out.print(
        f"policy {pol['name']} {pol['digest'][:23]}…  checkpoint size {result['checkpoint']['size']} "
        f"root {result['checkpoint']['root'][:16]}…  reference time {result['reference_time']}",
        soft_wrap=True,
    )
    styles = {"passed": "green", "failed": "red", "missing": "yellow"}
    print_table(
        ("gate", "status", "evidence", "reason"),
        [
            (
                g["name"],
                Text(g["status"], style=styles.get(g["status"], "dim")),
                len(g["evidence"]),
                g["reason"],
            )
            for g in result["gates"]
        ],
        title="gates",
    )
    if result["used"]:
        out.print(
            f"used ({len(result['used'])}): "
            + " ".join(i[:12] for i in result["used"][:40])
            + (" …" if len(result["used"]) > 40 else ""),
            soft_wrap=True,
        )
    if result["rejected"]:
        print_table(
            ("entry", "kind", "rule", "detail"),
            [(r["entry"][:12], r["kind"], r["rule"], r["detail"]) for r in result["rejected"]],
            title="rejected evidence",
        )
    if result.get("unjudged"):
        print_table(
            ("entry", "kind", "gate", "why the verdict is not QUALIFIED"),
            [(u["entry"][:12], u.get("kind", ""), u["gate"], u["detail"]) for u in result["unjudged"]],
            title="what no gate judges",
        )
    problems = [c for c in result.get("claims") or [] if c.get("status") != "holds"]
    if problems:
        print_table(
            ("field", "asked", "status", "why the campaign is not shown to be what was asked"),
            [(c["field"], c["asked"] or "—", c["status"], c["detail"]) for c in problems],
            title="the question's fields checked against the campaign's own entries",
        )
    if result.get("failing_beyond_ladder"):
        print_table(
            ("gate", "verdict if judged", "fails on its evidence all the same"),
            [(b["gate"], b["verdict_if_failed"], b["reason"]) for b in result["failing_beyond_ladder"]],
            title="failures past where the ladder stopped (not authorized, still on record)",
        )
    if result["not_credited"]:
        out.print(
            "not credited (gate not authorized): "
            + ", ".join(f"{x['entry'][:12]} ({x['gate']})" for x in result["not_credited"]),
            soft_wrap=True,
        )


@verdict_app.callback()
def verdict(
    ctx: typer.Context,
    subject: SubjectOption = None,
    policy: PolicyOption = None,
    policy_dir: PolicyDirOption = None,
    at: Annotated[
        int | None,
        typer.Option(
            "--at",
            metavar="SIZE",
            help="Evaluate the log as it stood at this size: its first SIZE entries (seq 0..SIZE-1).",
        ),
    ] = None,
    now: Annotated[
        str | None,
        typer.Option(
            help="Judge as of this time (RFC 3339, or e.g. '1 hour ago'; default: with --record the clock, "
            "else the log time of the last entry): the log as it stood then, without the entries it took "
            "after that time."
        ),
    ] = None,
    record: Annotated[
        bool,
        typer.Option(
            "--record",
            help="Append the verdict as a signed `verdict` entry, judged now (or at a --now no earlier than "
            "the log's last entry and no later than the clock).",
        ),
    ] = False,
    key: Annotated[
        str | None, typer.Option(help="Key that signs a recorded verdict (default: the admin key).")
    ] = None,
    trust_policy: TrustPolicyOption = None,
    home: HomeOption = None,
    json_out: JsonOption = False,
) -> None:
    """Gates, evidence used, and evidence rejected with its rule, for one subject."""
    if ctx.invoked_subcommand is not None:
        return
    from ledger.canonical import canonical_bytes
    from ledger.entries import parse_when
    from ledger.policy.record_time import record_clock, size_as_of
    from ledger.policy.verdict import evaluate, judge_again_at, record_verdict

    subj = _subject(subject)
    # the policy loads before the ledger opens: a bad policy is reported before a missing home
    pol = _load_policy(policy or "backend-qualification", policy_dir)
    trust = load_policy_option(trust_policy)
    # a recorded verdict is judged at the time it is signed (or --now), never at the last entry's log time:
    # evidence stale now must not be signed QUALIFIED. The clock is read once (after --now, which may read
    # it: "now", "1 hour ago", and after the log's head, which a recorded verdict is held to): the time it
    # is judged at without --now, and the clock ``record_verdict``'s one check holds --now to
    stated = parse_when(now) if now else None
    # a log that no longer extends the checkpoint its home holds is refused, as the routing gate refuses
    # it (exit 2): a verdict judged (or signed) on a truncated or rewritten log would vouch for it
    from ledger.reads import check_extends_held

    if record or trust is not None:
        ledger = get_ledger(home)
        head = ledger.size()  # ``read``: each entry it counts was logged before the clock is read
    clock = record_clock() if record else None
    when = stated or clock
    if record or trust is not None:
        check_extends_held(ledger)
        if now and not record:  # a recorded verdict at a past --now is refused (record_verdict), not cut
            at = size_as_of(ledger, at, when)
        result = evaluate(ledger, subj, pol, at_size=at, reference_time=when)
    else:
        reader = _read_ledger(home)
        check_extends_held(reader)
        if now:
            at = size_as_of(reader, at, when)
        result = evaluate(reader, subj, pol, at_size=at, reference_time=when)
    if trust is not None:  # the checkpoint the verdict was judged at must carry the policy's quorum
        problems = checkpoint_problems(ledger, int(result["checkpoint"]["size"]), trust)
        if problems:
            from ledger.errors import CosignatureQuorumError

            raise CosignatureQuorumError(
                f"the verdict's checkpoint (size {result['checkpoint']['size']}) is refused by "
                f"{trust.source}: " + "; ".join(problems)
            )
    entry = None
    if record:
        # a stated time before the clock records QUALIFIED only where it holds at the clock too: the one
        # check (``record_time.refuse_unrecordable_judgement``), the log's head as it was judged and the
        # clock first; judged again as ``Ledger.record_verdict`` judges it (``judge_again_at``, one copy)
        signer = key or ledger.cfg.admin_key  # as ``Ledger.record_verdict``
        judge_now = judge_again_at(ledger, result, pol)
        entry = record_verdict(ledger, result, key=signer, clock=clock, read=head, judge_at=judge_now)
    if json_out:
        sys.stdout.buffer.write(canonical_bytes(result) + b"\n")
        sys.stdout.flush()
    else:
        _render_verdict(result)
    if entry is not None:
        err.print(f"recorded verdict entry {entry.entry_id} (seq {entry.seq})")


@verdict_app.command("replay")
def verdict_replay(
    entry_id: str,
    policy: PolicyOption = None,
    policy_dir: PolicyDirOption = None,
    home: HomeOption = None,
    json_out: JsonOption = False,
) -> Outcome:
    """Recompute a recorded verdict at its checkpoint with the current policy bytes; exit 1 if it differs."""
    from rich.text import Text

    report = get_ledger(home).replay_verdict(entry_id, policy_dir=policy_dir, policy_path=policy)
    if json_out:
        print_json({k: v for k, v in report.items() if k != "result"})
    elif report["same"]:
        out.print(
            Text.assemble(
                ("same", "green"),
                f": {report['recorded']['verdict']} at checkpoint size "
                f"{report['recorded']['checkpoint']['size']}, byte-identical result",
            ),
            soft_wrap=True,
        )
    else:
        out.print(
            Text.assemble(
                ("differs", "red"),
                f": recorded {report['recorded']['verdict']}, now {report['current']['verdict']}",
            ),
            soft_wrap=True,
        )
        for d in report["differences"]:
            out.print(f"  - {d}", soft_wrap=True)
    return Outcome.OK if report["same"] else Outcome.NO


@check_app.command("routing-change")
def check_routing_change_cmd(
    subject: SubjectOption = None,
    action: Annotated[
        str,
        typer.Option(
            help="route (needs a current QUALIFIED verdict) or restore "
            "(needs fresh health, identity and READY probes)."
        ),
    ] = "route",
    deployment: Annotated[
        Path | None,
        typer.Option(
            help="Deployment after the change (TOML or JSON): services with gpus and gpu_memory_utilization."
        ),
    ] = None,
    policy: PolicyOption = None,
    policy_dir: PolicyDirOption = None,
    now: Annotated[
        str | None, typer.Option(help="Judge as of this time (RFC 3339, or e.g. '1 hour ago'; default: now).")
    ] = None,
    record: Annotated[
        bool,
        typer.Option(
            "--record",
            help="Append the decision as a signed routing.change entry (judged now, or at a --now no earlier "
            "than the log's last entry and no later than the clock).",
        ),
    ] = False,
    key: Annotated[str | None, typer.Option(help="Key that signs --record (operator/admin).")] = None,
    trust_policy: TrustPolicyOption = None,
    home: HomeOption = None,
    json_out: JsonOption = False,
) -> Outcome:
    """Allow (exit 0) or refuse (exit 1, with reasons) a production routing change.

    Exit 2, nothing judged, when the log no longer extends the checkpoint the home holds or a row it reads
    is not what its Merkle leaf commits (edited behind the log's back). With --trust-policy the checkpoint
    it is judged at must carry the policy's witness quorum."""
    from ledger.entries import parse_when
    from ledger.policy.record_time import record_clock
    from ledger.policy.routing import (
        check_routing_change,
        decision_again_at,
        load_deployment,
        record_routing_change,
    )

    subj = _subject(subject)
    pol = _load_policy(policy or "routing-change", policy_dir)
    dep = load_deployment(deployment) if deployment else None
    trust = load_policy_option(trust_policy)
    when = parse_when(now) if now else None
    if record or trust is not None:
        led = get_ledger(home)
        # the log's head as the decision is judged: a --now before it judges the log cut at that time
        # (``record_time.size_as_of``), and is still a past what-if, for reading (refused with --record)
        head = led.size()
        # with --record the clock is read once (after --now, which may read it, and after the head, so each
        # entry the head counts was logged before it): the time it is judged at without --now, and the
        # clock the one check holds --now to
        clock = record_clock() if record else None
        result = led.check_routing(subj, pol, action=action, deployment=dep, now=when or clock)
    else:
        result = check_routing_change(_read_ledger(home), pol, subj, action=action, deployment=dep, now=when)
    if trust is not None:
        problems = checkpoint_problems(led, int(result["checkpoint"]["size"]), trust)
        result["trust_policy"] = {"source": trust.source, "ok": not problems, "problems": problems}
        if problems:
            result["allowed"] = False
            result["reasons"].append(
                f"the checkpoint (size {result['checkpoint']['size']}) is not cosigned as {trust.source} "
                "asks: " + "; ".join(problems)
            )
    if record:
        # one check (``record_time.refuse_unrecordable_judgement``): the log's head as it was asked (a past
        # --now cuts it, and is still a past what-if) and the clock first, then a stated time before the
        # clock records allowed only where it holds at the clock too (``decision_again_at``: the decision
        # on the deployment it judged, as ``Ledger.record_routing_change`` judges it again)
        signer = key or led.cfg.admin_key  # as ``Ledger.record_routing_change``
        judge_now = decision_again_at(led, result, pol)
        entry = record_routing_change(led, result, key=signer, clock=clock, read=head, judge_at=judge_now)
        result["recorded"] = entry.entry_id
    if json_out:
        print_json(result)
    else:
        from rich.text import Text

        word, style = ("allowed", "green") if result["allowed"] else ("refused", "red")
        shown = " ".join(f"{k}={v}" for k, v in sorted(subj.items()))
        out.print(Text.assemble((word, style), f": {action} {shown}"), soft_wrap=True)
        for r in result["reasons"] if not result["allowed"] else []:
            out.print(f"  - {r}", soft_wrap=True)
    return Outcome.OK if result["allowed"] else Outcome.NO


@policy_app.command("list")
def policy_list(policy_dir: PolicyDirOption = None, json_out: JsonOption = False) -> None:
    """Policies in the policy folder with their kind and digest."""
    from ledger.policy.fixtures import discover_fixtures
    from ledger.policy.loader import list_policies
    from ledger.policy.routing import load_checked

    rows: list[dict[str, Any]] = []
    for p in list_policies(policy_dir):
        pol = load_checked(str(p))
        rows.append(
            {
                "name": pol.name,
                "kind": pol.kind,
                "digest": pol.digest,
                "path": str(p),
                "fixtures": len(discover_fixtures(p.parent, pol.name)),
            }
        )
    if json_out:
        print_items(rows)
        return
    print_table(
        ("name", "kind", "fixtures", "digest"),
        [(r["name"], r["kind"], r["fixtures"], r["digest"]) for r in rows],
    )


@policy_app.command("show")
def policy_show(name: str, policy_dir: PolicyDirOption = None, json_out: JsonOption = False) -> None:
    """A policy's validated content (JSON) or its file text."""
    from ledger.policy.routing import load_checked

    pol = load_checked(name, policy_dir)
    if json_out:
        print_json(
            {
                "name": pol.name,
                "kind": pol.kind,
                "digest": pol.digest,
                "path": str(pol.path),
                "spec": pol.spec.model_dump(mode="json"),
                "params": pol.params,
            }
        )
    else:
        out.print(f"# {pol.path}  {pol.digest}", soft_wrap=True)
        sys.stdout.write(pol.data.decode("utf-8"))


@policy_app.command("test")
def policy_test(
    names: Annotated[list[str] | None, typer.Argument(help="Policies to test (default: all).")] = None,
    policy_dir: PolicyDirOption = None,
    json_out: JsonOption = False,
) -> Outcome:
    """Run every policy's fixture tests (a ledger built from data, the verdicts it must reach)."""
    from rich.text import Text

    from ledger.service import Ledger

    results = Ledger.policy_test(names, policy_dir)
    if json_out:
        print_items([r.to_json() for r in results])
    else:
        print_table(
            ("fixture", "result", "detail"),
            [
                (
                    f"{r.policy}/{r.name}",
                    Text("pass", style="green") if r.passed else Text("FAIL", style="red"),
                    "\n".join(r.failures) if r.failures else r.description,
                )
                for r in results
            ],
        )
        out.print(f"{sum(r.passed for r in results)}/{len(results)} fixtures pass")
    return Outcome.OK if results and all(r.passed for r in results) else Outcome.NO


def register(app: typer.Typer) -> None:
    """Add ``verdict``, ``check`` and ``policy`` to the ledger CLI."""
    app.add_typer(verdict_app, name="verdict")
    app.add_typer(check_app, name="check")
    app.add_typer(policy_app, name="policy")
