"""Policy fixture tests: a small ledger described as data, built with real keys and signatures, and the
verdicts or routing decisions the policy must reach on it. ``ledger policy test`` and pytest both run these.
"""

from __future__ import annotations

import io
import os
import tempfile
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, Protocol

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from ledger.entries import ArtifactRef, parse_time
from ledger.errors import InputError, LedgerError, PolicyError, more_problems
from ledger.policy.loader import default_policy_dir, load_policy
from ledger.policy.model import check_verdict_word, locate
from ledger.policy.routing import check_routing_change
from ledger.policy.verdict import evaluate, judge_again_at, record_verdict
from ledger.signing import SigningKey

if TYPE_CHECKING:
    from ledger.logged import LoggedEntry

    # the ledger as a fixture sees it (ledger.service.Ledger is one); the policy never imports the service
    from ledger.policy.port import FixtureLedger as Ledger

__all__ = ["FixtureResult", "InitHome", "build_fixture_ledger", "discover_fixtures", "run_fixture"]


class InitHome(Protocol):
    """Makes a fresh ledger home (``Ledger.init``): the service passes it in, so this module never
    imports it. ``genesis_at``: the log time of its first entry (a fixture's ``start``)."""

    def __call__(self, path: Path, *, genesis_at: datetime | None = None) -> Ledger: ...


@dataclass
class FixtureResult:
    path: Path
    policy: str
    name: str
    description: str
    failures: list[str] = field(default_factory=list)
    checks: int = 0

    @property
    def passed(self) -> bool:
        return not self.failures and self.checks > 0

    def to_json(self) -> dict[str, Any]:
        return {
            "fixture": f"{self.policy}/{self.name}",
            "passed": self.passed,
            "checks": self.checks,
            "failures": self.failures,
            "description": self.description,
        }


def discover_fixtures(policy_dir: Path | None = None, policy: str | None = None) -> list[Path]:
    """Every ``fixtures/<policy>/<scenario>.toml`` under the policy folder (optionally one policy's)."""
    root = (policy_dir or default_policy_dir()) / "fixtures"
    pattern = f"{policy}/*.toml" if policy else "*/*.toml"
    return sorted(p for p in root.glob(pattern) if not p.parent.name.startswith("_"))


def _read(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise PolicyError(f"{path}: TOML syntax error: {e}") from e
    except OSError as e:
        raise PolicyError(f"cannot read fixture {path}: {e.strerror}") from e


# --- the fixture file's schema: an unknown key is an error, never an expectation that checks nothing ---


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# a verdict word a fixture expects: one of the policy engine's (``VERDICT_WORDS``); a misspelled one matched
# no verdict, so `not_verdict = "QUALIFED"` held of every verdict
VerdictWord = Annotated[str, AfterValidator(check_verdict_word)]
# a gate's status in a verdict (``verdict.judge_gate``)
GateStatus = Literal["passed", "failed", "missing", "not_authorized"]


class _RecordVerdict(_Strict):
    subject: dict[str, Any]
    key: str = "admin"
    policy: str = "backend-qualification"


class _Artifact(_Strict):
    name: str
    text: str
    stored: bool = True
    damage: Literal["missing", "corrupt"] | None = None


class _Entry(_Strict):
    name: str | None = None
    kind: str | None = None
    key: str | None = None
    at: str | None = None
    logged_at: str | None = None
    subject: dict[str, Any] = Field(default_factory=dict)
    payload: dict[str, Any] = Field(default_factory=dict)
    refs: dict[str, str | list[str]] = Field(default_factory=dict)
    artifacts: list[_Artifact] = Field(default_factory=list)
    record_verdict: _RecordVerdict | None = None


class _Rejected(_Strict):
    entry: str
    rule: str | None = None
    detail: str | None = None


class _VerdictExpect(_Strict):
    verdict: VerdictWord | None = None
    not_verdict: VerdictWord | None = None
    gates: dict[str, GateStatus] = Field(default_factory=dict)
    reasons: dict[str, str] = Field(default_factory=dict)
    rejected: list[_Rejected] = Field(default_factory=list)
    accepted: list[str] = Field(default_factory=list)
    used: list[str] = Field(default_factory=list)
    not_used: list[str] = Field(default_factory=list)
    not_credited: list[str] = Field(default_factory=list)


class _Verdict(_Strict):
    label: str | None = None
    policy: str | None = None
    after: str | None = None
    subject: dict[str, Any] | None = None
    expect: _VerdictExpect


class _RoutingExpect(_Strict):
    allowed: bool | None = None
    reasons: list[str] = Field(default_factory=list)


class _Check(_Strict):
    label: str | None = None
    policy: str = "routing-change"
    subject: dict[str, Any]
    action: str = "route"
    deployment: dict[str, Any] | None = None
    now: str
    expect: _RoutingExpect


class _Defaults(_Strict):
    subject: dict[str, Any] = Field(default_factory=dict)


class FixtureFile(_Strict):
    """A fixture file (``include`` resolved: its ``entries`` first)."""

    description: str = ""
    start: str | None = None
    include: list[str] = Field(default_factory=list)
    keys: dict[str, list[str]] = Field(default_factory=dict)
    defaults: _Defaults = Field(default_factory=_Defaults)
    entries: list[_Entry] = Field(default_factory=list)
    verdicts: list[_Verdict] = Field(default_factory=list)
    checks: list[_Check] = Field(default_factory=list)


def _validate(path: Path, spec: dict[str, Any], text: str, included: int) -> None:
    """Refuse a fixture whose keys or values the runner does not know: a misspelled expectation
    (``expect.verdcit``, ``rejectd``) or verdict word would otherwise be ignored and the fixture pass."""
    try:
        FixtureFile.model_validate(spec)
    except ValidationError as e:
        err = e.errors()[0]
        loc = list(err["loc"])
        if loc[:1] == ["entries"] and len(loc) > 1 and isinstance(loc[1], int):
            if loc[1] < included:  # an included file's entry: named by its path, not this file's line
                raise PolicyError(
                    f"{path}: entries of its include: {'.'.join(map(str, loc[2:]))}: {err['msg']}"
                ) from e
            loc[1] -= included
        line = locate(text, tuple(loc))
        where = f"{path}:{line}" if line else str(path)
        msg = (
            "unknown field"
            if err["type"] == "extra_forbidden"
            else str(err["msg"]).removeprefix("Value error, ")
        )
        more = more_problems(e.errors(), unknown="unknown field")
        raise PolicyError(f"{where}: {'.'.join(map(str, loc)) or '(root)'}: {msg}{more}") from e


def _load_spec(path: Path) -> dict[str, Any]:
    spec = _read(path)
    entries: list[dict[str, Any]] = []
    for inc in spec.get("include", []) if isinstance(spec.get("include"), list) else []:
        entries.extend(_read((path.parent / inc).resolve()).get("entries", []))
    spec["entries"] = entries + spec.get("entries", [])
    _validate(path, spec, path.read_text(encoding="utf-8"), len(entries))
    return spec


def _start(spec: Mapping[str, Any]) -> str:
    """When a fixture's history starts: its log's genesis and key enrolments are logged then."""
    return str(spec.get("start", "2026-01-01T00:00:00Z"))


def _logged_time(item: Mapping[str, Any]) -> datetime:
    """When a fixture entry is logged (its ``logged_at``, else its ``at``). A fixture may list its
    history in any order; it is logged in time order (ties in the order listed), as a log whose clock
    never runs back would have logged it."""
    when = item.get("logged_at") or item.get("at")
    if not isinstance(when, str):
        raise InputError(f"fixture entry {item.get('name') or item.get('kind')!r} has no time (at)")
    return parse_time(when)


class _Builder:
    """Appends a fixture's entries one by one with their stated log times."""

    def __init__(self, ledger: Ledger, spec: Mapping[str, Any], policy_dir: Path | None) -> None:
        self.ledger = ledger
        self.spec = spec
        self.policy_dir = policy_dir
        self.names: dict[str, LoggedEntry] = {}
        self.keys: dict[str, SigningKey] = {}
        self.admin = ledger.signing_key(ledger.admin_key_name)

    def _append(
        self,
        kind: str,
        subject: dict[str, str],
        payload: dict[str, Any],
        key: SigningKey,
        *,
        at: str,
        logged_at: str | None = None,
        refs: list[tuple[str, str]] | None = None,
        artifacts: list[ArtifactRef] | None = None,
    ) -> LoggedEntry:
        st = self.ledger.make_statement(
            kind,
            subject,
            payload,
            artifacts=artifacts or [],
            refs=refs or [],
            collected_at=at,
            host=subject.get("host", "fixture-host"),
        )
        env = self.ledger.sign(st, key)
        return self.ledger.append([env], logged_at=parse_time(logged_at or at))[0]

    def enrol_keys(self) -> None:
        start = _start(self.spec)
        for name, roles in sorted(self.spec.get("keys", {}).items()):
            key = SigningKey.generate(name)
            self.ledger.keep_key(key)
            self.keys[name] = key
            self._append(
                "key.enrol",
                {"key": name},
                {"name": name, "public_key": key.public.b64, "key_id": key.key_id, "roles": list(roles)},
                self.admin,
                at=start,
            )

    def _key(self, name: str | None) -> SigningKey:
        if name is None or name == "admin":
            return self.admin
        if name not in self.keys:
            raise InputError(f"fixture entry names unknown key {name!r}")
        return self.keys[name]

    def add_all(self, items: Sequence[Mapping[str, Any]]) -> None:
        """Append the fixture's entries in time order (``_logged_time``)."""
        for item in sorted(items, key=_logged_time):
            self.add(item)

    def add(self, item: Mapping[str, Any]) -> None:
        name = item.get("name")
        if "record_verdict" in item:
            rv = item["record_verdict"]
            policy = load_policy(rv.get("policy", "backend-qualification"), self.policy_dir)
            result = evaluate(self.ledger, dict(rv["subject"]), policy)
            # a QUALIFIED judged before the time it is recorded at is judged again then (as every record
            # call judges it: ``record_time.refuse_unrecordable_judgement``)
            entry = record_verdict(
                self.ledger,
                result,
                key=rv.get("key", "admin"),
                at=parse_time(str(item["at"])),
                judge_at=judge_again_at(self.ledger, result, policy),
            )
            if name:
                self.names[name] = entry
            return
        kind = str(item["kind"])
        at = str(item["at"])
        payload = dict(item.get("payload", {}))
        if kind in ("key.revoke", "key.grant"):
            target = self.keys[payload.pop("key")]
            payload["key_id"] = target.key_id
            entry = self._append(
                kind, {"key": target.name}, payload, self.admin, at=at, logged_at=item.get("logged_at")
            )
        elif kind == "key.rotate":  # payload names the keys: old_key, new_key (both of the fixture's keys)
            old, new = self.keys[payload.pop("old_key")], self.keys[payload.pop("new_key")]
            payload.update(old_key_id=old.key_id, new_key_id=new.key_id)
            entry = self._append(
                kind, {"key": old.name}, payload, self.admin, at=at, logged_at=item.get("logged_at")
            )
        else:
            # a subject field set to None (a test's spec; TOML has no null) is left out
            merged = {**self.spec.get("defaults", {}).get("subject", {}), **item.get("subject", {})}
            subject = {k: v for k, v in merged.items() if v is not None}
            refs: list[tuple[str, str]] = []
            for rel, targets in item.get("refs", {}).items():
                for t in [targets] if isinstance(targets, str) else targets:
                    if t not in self.names:
                        raise InputError(f"fixture entry {name or kind} refers to unknown entry {t!r}")
                    refs.append((rel, self.names[t].entry_id))
            arts = []
            damage: list[tuple[str, str]] = []
            for a in item.get("artifacts", []):
                stored = self.ledger.put_artifact(io.BytesIO(str(a["text"]).encode()))
                arts.append(
                    ArtifactRef(
                        name=a["name"],
                        digest=str(stored.digest),
                        size=stored.size,
                        media_type="text/plain",
                        stored=a.get("stored", True),  # false: recorded by reference only
                    )
                )
                if a.get("damage"):
                    damage.append((str(stored.digest), str(a["damage"])))
            entry = self._append(
                kind,
                subject,
                payload,
                self._key(item.get("key")),
                at=at,
                logged_at=item.get("logged_at"),
                refs=refs,
                artifacts=arts,
            )
            for digest, how in damage:
                self._damage(digest, how)
        if name:
            if name in self.names:
                raise InputError(f"fixture entry name {name!r} is used twice")
            self.names[name] = entry

    def _damage(self, digest: str, how: str) -> None:
        from ledger.hashing import parse_digest

        store = self.ledger.store
        if not hasattr(store, "path_of"):
            raise InputError("artifact damage needs a filesystem store")
        path = Path(store.path_of(parse_digest(digest)))
        if how == "missing":
            path.unlink()
        elif how == "corrupt":
            data = path.read_bytes()
            os.chmod(path, 0o644)
            path.write_bytes(bytes([data[0] ^ 0x01]) + data[1:])
        else:
            raise InputError(f"artifact damage must be 'missing' or 'corrupt', not {how!r}")


def build_fixture_ledger(
    path: Path, home: Path, policy_dir: Path | None = None, *, init: InitHome
) -> tuple[Ledger, dict[str, Any], _Builder]:
    spec = _load_spec(path)
    # the log's clock never runs back (``logged-at-before-head``): the fixture's log starts at its start
    ledger = init(home, genesis_at=parse_time(_start(spec)))
    builder = _Builder(ledger, spec, policy_dir)
    builder.enrol_keys()
    builder.add_all(spec["entries"])
    return ledger, spec, builder


def _names(builder: _Builder) -> dict[str, str]:
    return {e.entry_id: n for n, e in builder.names.items()}


def _check_verdict(
    expect: Mapping[str, Any], result: Mapping[str, Any], builder: _Builder, label: str
) -> list[str]:
    fails: list[str] = []
    ids = _names(builder)

    def nm(i: str) -> str:
        return ids.get(i, i[:12])

    if "verdict" in expect and result["verdict"] != expect["verdict"]:
        ladder = ", ".join(f"{g['name']}={g['status']}" for g in result["gates"])
        fails.append(f"{label}: verdict {result['verdict']!r}, expected {expect['verdict']!r} ({ladder})")
    if "not_verdict" in expect and result["verdict"] == expect["not_verdict"]:
        fails.append(f"{label}: verdict must not be {expect['not_verdict']!r}")
    gates = {g["name"]: g for g in result["gates"]}
    for gname, status in expect.get("gates", {}).items():
        got = gates.get(gname, {}).get("status")
        if got != status:
            fails.append(
                f"{label}: gate {gname} is {got}, expected {status} ({gates.get(gname, {}).get('reason')})"
            )
    for gname, text in expect.get("reasons", {}).items():
        reason = gates.get(gname, {}).get("reason", "")
        if text not in reason:
            fails.append(f"{label}: gate {gname} reason {reason!r} lacks {text!r}")
    rejected = {nm(r["entry"]): r for r in result["rejected"]}
    for want in expect.get("rejected", []):
        got = rejected.get(want["entry"])
        if got is None:
            fails.append(f"{label}: {want['entry']} was not rejected (expected rule {want.get('rule')})")
            continue
        if "rule" in want and got["rule"] != want["rule"]:
            fails.append(
                f"{label}: {want['entry']} rejected by {got['rule']}, expected {want['rule']} "
                f"({got['detail']})"
            )
        if "detail" in want and want["detail"] not in got["detail"]:
            fails.append(
                f"{label}: {want['entry']} rejection detail {got['detail']!r} lacks {want['detail']!r}"
            )
    for n in expect.get("accepted", []):
        if n in rejected:
            fails.append(f"{label}: {n} was rejected ({rejected[n]['rule']}: {rejected[n]['detail']})")
    used = {nm(i) for i in result["used"]}
    for n in expect.get("used", []):
        if n not in used:
            fails.append(f"{label}: {n} is not among the evidence used")
    for n in expect.get("not_used", []):
        if n in used:
            fails.append(f"{label}: {n} was used but must not be")
    not_credited = {nm(x["entry"]) for x in result["not_credited"]}
    for n in expect.get("not_credited", []):
        if n not in not_credited:
            fails.append(f"{label}: {n} is not reported as not credited")
    return fails


def _check_routing(expect: Mapping[str, Any], result: Mapping[str, Any], label: str) -> list[str]:
    fails: list[str] = []
    if "allowed" in expect and result["allowed"] != expect["allowed"]:
        fails.append(
            f"{label}: allowed={result['allowed']}, expected {expect['allowed']} "
            f"(reasons: {result['reasons']})"
        )
    text = " | ".join(result["reasons"])
    for want in expect.get("reasons", []):
        if want not in text:
            fails.append(f"{label}: reasons {result['reasons']} lack {want!r}")
    return fails


def run_fixture(
    path: Path, policy_dir: Path | None = None, workdir: Path | None = None, *, init: InitHome
) -> FixtureResult:
    """Build the fixture's ledger in a fresh home and compare every expectation; never raises for a
    failed expectation (it is reported), but policy and fixture errors propagate."""
    spec = _load_spec(path)
    result = FixtureResult(
        path=path, policy=path.parent.name, name=path.stem, description=str(spec.get("description", ""))
    )
    with _home(workdir) as home:
        ledger, spec, builder = build_fixture_ledger(path, home, policy_dir, init=init)
        try:
            for i, v in enumerate(spec.get("verdicts", [])):
                label = v.get("label", f"verdict[{i}]")
                policy = load_policy(
                    v.get("policy") or _verdict_policy(result.policy, policy_dir), policy_dir
                )
                size = builder.names[v["after"]].seq + 1 if "after" in v else None
                subject = dict(v.get("subject") or spec.get("defaults", {}).get("subject", {}))
                out = evaluate(ledger, subject, policy, at_size=size)
                result.failures.extend(_check_verdict(v.get("expect", {}), out, builder, label))
                result.checks += 1
            for i, c in enumerate(spec.get("checks", [])):
                label = c.get("label", f"check[{i}]")
                policy = load_policy(c.get("policy", "routing-change"), policy_dir)
                out = check_routing_change(
                    ledger,
                    policy,
                    dict(c["subject"]),
                    action=c.get("action", "route"),
                    deployment=c.get("deployment"),
                    now=parse_time(c["now"]),
                )
                result.failures.extend(_check_routing(c.get("expect", {}), out, label))
                result.checks += 1
        except LedgerError as e:
            result.failures.append(f"error: {e.one_line()}")
        finally:
            ledger.close()
    if result.checks == 0 and not result.failures:
        result.failures.append("the fixture checks nothing: add [[verdicts]] or [[checks]]")
    return result


def _verdict_policy(folder: str, policy_dir: Path | None) -> str:
    """Verdicts in a qualification policy's fixtures use it; elsewhere the shipped backend qualification."""
    try:
        return folder if load_policy(folder, policy_dir).kind == "qualification" else "backend-qualification"
    except PolicyError:
        return "backend-qualification"


class _home:
    def __init__(self, workdir: Path | None) -> None:
        self.workdir = workdir
        self.tmp: tempfile.TemporaryDirectory[str] | None = None

    def __enter__(self) -> Path:
        self.tmp = tempfile.TemporaryDirectory(dir=self.workdir, prefix="policy-fixture-")
        return Path(self.tmp.name) / "home"

    def __exit__(self, *exc: object) -> None:
        if self.tmp is not None:
            self.tmp.cleanup()
