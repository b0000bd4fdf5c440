"""CLI conventions (issue 13): version, completion, one --json shape, one-line errors, verbatim and piped
output, relative times, subject-field warnings, option validation, spooled entries and key enrolment."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from ledger.entries import parse_when
from ledger.errors import InputError
from ledger.service import Ledger
from tests.api.conftest import LEDGER_BIN, free_port, start_server


def _note(cli: Any, text: str, campaign: str = "c1") -> dict[str, Any]:
    r = cli(
        "record",
        "note",
        "--key",
        "admin",
        "-s",
        f"campaign={campaign}",
        "--data",
        json.dumps({"text": text}),
        "--json",
    )
    assert r.code == 0, r.err
    return dict(r.json())


def test_version_and_completion(cli: Any) -> None:
    r = cli("--version")
    assert r.code == 0 and r.out.startswith("ledger (evidence-ledger) ")
    shown = subprocess.run(
        [LEDGER_BIN, "completion", "bash"],
        capture_output=True,
        text=True,
        check=False,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(Path.home())},
    )
    assert shown.returncode == 0 and "_LEDGER_COMPLETE" in shown.stdout, shown.stderr
    completed = subprocess.run(
        [LEDGER_BIN],
        capture_output=True,
        text=True,
        check=False,
        env={
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "_LEDGER_COMPLETE": "complete_bash",
            "COMP_WORDS": "ledger ke",
            "COMP_CWORD": "1",
        },
    )
    assert completed.stdout.split() == ["keys"], completed.stderr


def _list_commands() -> set[tuple[str, ...]]:
    """Every CLI command whose code prints a list (``print_items`` / the log's page)."""
    import inspect

    import typer

    from ledger.cli import app

    found: set[tuple[str, ...]] = set()

    def walk(cmd: Any, path: tuple[str, ...]) -> None:
        if hasattr(cmd, "commands"):
            for name, sub in cmd.commands.items():
                walk(sub, (*path, name))
        elif cmd.callback is not None:
            src = inspect.getsource(inspect.unwrap(cmd.callback))
            if any(x in src for x in ("print_items(", "page_json(", "list_json(")):
                found.add(path)

    walk(typer.main.get_command(app), ())
    return found


def test_every_list_read_has_one_json_shape(cli: Any, tmp_path: Path) -> None:
    from ledger.listing import LIST_FIELDS

    assert cli("init").code == 0
    e = _note(cli, "first")
    assert cli("tokens", "new", "readers", "--role", "reader").code == 0
    assert cli("tokens", "new", "gone", "--role", "reader").code == 0
    f = tmp_path / "a.txt"
    f.write_text("x")
    cases: dict[tuple[str, ...], tuple[str, ...]] = {
        ("log",): (),
        ("keys", "list"): (),
        ("put",): (str(f),),
        ("tokens", "list"): (),
        ("tokens", "revoke"): ("gone",),
        ("policy", "list"): (),
        ("policy", "test"): ("routing-change",),
        ("kinds",): (),
        # an engine that is not there: the failed probes are recorded and listed
        ("collect", "probe"): ("http://127.0.0.1:9", "--campaign", "c1"),
    }
    # a list command added without a case here fails: every one is run below
    assert _list_commands() == set(cases)
    for command, args in cases.items():
        r = cli(*command, *args, "--json")
        assert r.code in (0, 1), (command, r.err)
        doc = r.json()
        assert tuple(doc) == LIST_FIELDS, command
        assert isinstance(doc["items"], list) and doc["items"], command
    page = cli("log", "--limit", "1", "--json").json()
    assert page["next"] == 0  # the keyset cursor: pass it as --after
    assert cli("log", "--after", str(page["next"]), "--json").json()["items"][0]["id"] == e["id"]
    # single-object reads stay objects; proof inclusion accepts --json
    proof = cli("proof", "inclusion", e["id"], "--json")
    assert proof.code == 0 and isinstance(proof.json(), dict) and "checkpoint" in json.dumps(proof.json())
    assert cli("show", e["id"], "--json").json()["id"] == e["id"]


def test_errors_are_one_line_or_json(cli: Any) -> None:
    r = cli("show", "0123456789", "--json")
    assert r.code == 2
    err = json.loads(r.err)["error"]
    assert set(err) == {"code", "message", "hint"} and err["code"] == "home-not-initialised"
    assert cli("init").code == 0
    usage = cli("keys", "new", "x", "--rol", "collector")
    assert usage.code == 2
    assert usage.err.count("\n") == 1 and usage.err.startswith("error[usage]: No such option: --rol")
    assert "╭" not in usage.err
    missing = cli("log", "--limit", "many", "--json")
    assert missing.code == 2 and json.loads(missing.err)["error"]["code"] == "usage"
    role = cli("keys", "new", "x", "--role", "colector")
    assert role.code == 2
    assert role.err.strip() == (
        "error[bad-input]: unknown role 'colector' "
        "(choose from collector, reviewer, operator, admin, exporter)"
    )


def test_serve_port_validation_and_busy_port(cli: Any) -> None:
    assert cli("init").code == 0
    r = cli("serve", "--port", "80000")
    assert r.code == 2 and r.err.startswith("error[usage]: Invalid value for '--port'")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        busy = s.getsockname()[1]
        r = cli("serve", "--port", str(busy))
    assert r.code == 2
    assert r.err.startswith(f"error[port-in-use]: port {busy} on 127.0.0.1 is already in use")


def test_ambiguous_prefix_lists_candidates(ledger: Ledger, monkeypatch: pytest.MonkeyPatch) -> None:
    ids = ["abcdef01" + "0" * 56, "abcdef01" + "1" * 56]
    monkeypatch.setattr(ledger.repo, "ids_with_prefix", lambda prefix, limit=2: ids)
    with pytest.raises(InputError) as e:
        ledger.resolve_id("abcdef01")
    assert ids[0][:16] in e.value.message and ids[1][:16] in e.value.message


def test_piped_output_is_tab_separated_and_verbatim(cli: Any) -> None:
    assert cli("init").code == 0
    text = "[red]not markup[/] 0xdeadbeef 127.0.0.1 " + "long " * 40
    e = _note(cli, text)
    logged = cli("log", "-s", "campaign=c1")
    assert logged.code == 0
    [row] = logged.out.splitlines()
    cols = row.split("\t")
    assert cols[1] == e["id"] and cols[2] == "note" and "campaign=c1" in cols[3]
    assert not set("│┃━─╭") & set(logged.out)
    shown = cli("show", e["id"])
    assert text in shown.out and "\x1b[" not in shown.out


def test_relative_times_and_subject_warnings(cli: Any) -> None:
    now = datetime(2026, 9, 9, 12, 0, tzinfo=UTC)
    assert parse_when("yesterday", now) == datetime(2026, 9, 8, tzinfo=UTC)
    assert parse_when("2 hours ago", now) == now - timedelta(hours=2)
    assert parse_when("2026-09-09T09:00:00+0200") == datetime(2026, 9, 9, 7, tzinfo=UTC)
    with pytest.raises(InputError):
        parse_when("the day before")
    assert cli("init").code == 0
    e = _note(cli, "x")
    assert [
        i["id"] for i in cli("log", "--since", "yesterday", "--kind", "note", "--json").json()["items"]
    ] == [e["id"]]
    assert cli("log", "--since", "2 hours ago", "--kind", "note", "--json").json()["items"]
    assert cli("log", "--until", "1 hour ago", "--kind", "note", "--json").json()["items"] == []
    bad = cli("log", "--since", "last blue moon")
    assert bad.code == 2 and bad.err.startswith("error[bad-input]: cannot read time")
    # a misspelling of a known field: refused, naming both (audit 75 f2)
    typo = cli("log", "-s", "campain=c1")
    assert typo.code == 2
    assert "subject field 'campain' misspells the subject field 'campaign'" in typo.err
    other = cli("log", "-s", "region=eu")  # another field: a warning, as before
    assert other.code == 0
    assert "warning: unknown subject field 'region' (known: campaign, backend," in other.err


def test_unreachable_server_says_spooled_and_push_reports_what_is_left(cli: Any, tmp_path: Path) -> None:
    assert cli("init").code == 0
    klog = tmp_path / "kernel.log"
    klog.write_text("[    1.0] NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus\n")
    url = f"http://127.0.0.1:{free_port()}"
    r = cli("collect", "kernel", "--file", str(klog), "--campaign", "c1", "--server", url, "--token", "t")
    assert r.code == 0, r.err
    assert "recorded" not in r.out and "spooled (not yet on the server) kernel.log" in r.out
    assert "only spooled, not recorded on" in r.err and f"ledger push --server {url}" in r.err
    pushed = cli("push", "--server", url, "--token", "t", "--json")
    assert pushed.code == 1
    report = pushed.json()
    assert report["remaining"] == 1 and report["remaining_artifacts"] == 1 and report["error"]


def test_collect_enrol_registers_the_host_key_on_the_server(tmp_path: Path) -> None:
    server_home = tmp_path / "server"
    srv_ledger = Ledger.init(server_home)
    admin = srv_ledger.create_token("ops", "admin")[0]
    writer = srv_ledger.create_token("gpu-hosts", "writer")[0]
    srv_ledger.close()
    server = start_server(server_home)
    host_home = tmp_path / "gpu-host"
    try:

        def ledger(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [LEDGER_BIN, *args, "--home", str(host_home)], capture_output=True, text=True, check=False
            )

        refused = ledger("collect", "enrol", "--server", server.url, "--token", writer)
        assert refused.returncode == 2 and "error[forbidden]" in refused.stderr
        r = ledger("collect", "enrol", "--server", server.url, "--token", admin, "--name", "gpu01", "--json")
        assert r.returncode == 0, r.stderr
        rec = json.loads(r.stdout)
        assert rec["created"] is True and rec["roles"] == ["collector"] and rec["name"] == "gpu01"
        again = ledger("collect", "enrol", "--server", server.url, "--token", admin, "--name", "gpu01")
        assert again.returncode == 0 and again.stdout.startswith("already enrolled gpu01")
        renamed = ledger("collect", "enrol", "--server", server.url, "--token", admin, "--name", "other")
        assert renamed.returncode == 2 and "already enrolled as 'gpu01'" in renamed.stderr
        auth = {"Authorization": f"Bearer {admin}"}
        # the same key under another name: its own code, 409 (it was a plain bad-input 422)
        dup = httpx.post(
            f"{server.url}/v1/keys",
            json={"name": "other", "public_key": rec["public_key"]},
            headers=auth,
            timeout=10,
        )
        assert dup.status_code == 409 and dup.json()["code"] == "key-already-enrolled", dup.text
        for body in (
            {"name": "x", "public_key": "!!"},
            {"name": "x"},
            {"name": "x y", "public_key": rec["public_key"]},
        ):
            bad = httpx.post(f"{server.url}/v1/keys", json=body, headers=auth, timeout=10)
            assert 400 <= bad.status_code < 500, (body, bad.status_code, bad.text)
        klog = tmp_path / "kernel.log"
        klog.write_text("nothing\n")
        sent = ledger(
            "collect", "kernel", "--file", str(klog), "-c", "c1", "--server", server.url, "--token", writer
        )
        assert sent.returncode == 0, sent.stderr
        assert "recorded kernel.log" in sent.stdout and "spooled" not in sent.stderr
    finally:
        server.stop()
    served = Ledger.open(server_home)
    try:
        kinds = [e.kind for e in served.query(subject={"campaign": "c1"}, limit=10)]
    finally:
        served.close()
    assert kinds == ["kernel.log"]


def test_healthy_launch_stopped_at_lease_end_succeeds(tmp_path: Path) -> None:
    """A launch that became ready and was stopped by the collector when its lease ended ran as planned."""
    home = tmp_path / "home"
    env = {"PATH": "/usr/bin:/bin", "LEDGER_HOME": str(home)}
    assert subprocess.run([LEDGER_BIN, "init"], env=env, capture_output=True, check=False).returncode == 0
    port = free_port()
    engine = Path(__file__).resolve().parent / "engines" / "fault_engine.py"
    r = subprocess.run(
        [LEDGER_BIN, "collect", "launch", "--engine", "vllm", "--ready-url", f"http://127.0.0.1:{port}",
         "--lease", "6", "--grace", "2", "--campaign", "c1", "--json",
         "--", sys.executable, str(engine), "--port", str(port), "--mode", "ok", "--flavor", "vllm",
         "--load-seconds", "0.2"],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    launch = json.loads(r.stdout)
    assert launch["ready"] is True and launch["failure_signature"] is None
    assert launch["details"]["stop_reason"] == "lease-end" and launch["lease_expired"] is False
    jobs = [
        e["payload"]["state"]
        for e in json.loads(
            subprocess.run(
                [LEDGER_BIN, "log", "--kind", "job", "--json"],
                env=env,
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        )["items"]
    ]
    assert jobs == ["running", "succeeded"]


# --- progress: on a terminal only; the core reports bytes through a callback ---


def test_a_multi_mb_put_calls_the_progress_callback_with_increasing_byte_counts(tmp_path: Path) -> None:
    from ledger.store import FilesystemStore, put_file

    store = FilesystemStore(tmp_path / "store")
    store.init()
    f = tmp_path / "big.bin"
    f.write_bytes(os.urandom(20 * 1024 * 1024 + 123))
    steps: list[int] = []
    stored = put_file(store, f, progress=steps.append)
    done = [sum(steps[: i + 1]) for i in range(len(steps))]
    assert len(steps) >= 3  # chunk by chunk, not once at the end
    assert all(b > a for a, b in zip([0, *done], done, strict=False))  # increasing byte counts
    assert done[-1] == stored.size == f.stat().st_size


def _ledger(home: Path, *args: str, **kw: Any) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [LEDGER_BIN, "--home", str(home), *args], capture_output=True, timeout=120, check=False, **kw
    )


def test_piped_put_and_cat_print_no_progress(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert _ledger(home, "init").returncode == 0
    f = tmp_path / "big.bin"
    data = os.urandom(12 * 1024 * 1024)
    f.write_bytes(data)
    put = _ledger(home, "put", str(f))
    assert put.returncode == 0, put.stderr
    assert put.stderr == b""  # no bar, no spinner, no carriage returns on a pipe
    [line] = put.stdout.decode().splitlines()
    digest = line.split()[0]
    cat = _ledger(home, "cat", digest)
    assert cat.returncode == 0, cat.stderr
    assert cat.stdout == data
    assert cat.stderr == b""
    verify = _ledger(home, "verify")
    assert verify.returncode == 0, verify.stderr
    assert verify.stderr == b""
    assert verify.stdout.startswith(b"ok: ")


def test_verify_reports_the_entries_checked_through_its_callback(tmp_path: Path) -> None:
    ledger = Ledger.init(tmp_path / "home")
    for i in range(5):
        ledger.record("note", {"campaign": "p"}, {"text": f"n{i}"}, key=ledger.cfg.admin_key)
    steps: list[int] = []
    report = ledger.verify(workers=1, progress=steps.append)
    assert report
    assert steps and all(n > 0 for n in steps)
    assert sum(steps) == ledger.size()
    ledger.close()


def _on_terminal(argv: list[str]) -> tuple[int, bytes, bytes]:
    """Run ``argv`` with stderr on a pseudo-terminal (stdout piped): exit code, stdout, what stderr drew."""
    import pty

    master, slave = pty.openpty()
    try:
        r = subprocess.run(
            argv,
            stdout=subprocess.PIPE,
            stderr=slave,
            timeout=120,
            check=False,
            env={**os.environ, "TERM": "xterm", "COLUMNS": "120"},
        )
        os.close(slave)
        slave = -1
        drawn = b""
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            drawn += chunk
    finally:
        if slave >= 0:
            os.close(slave)
        os.close(master)
    return r.returncode, r.stdout, drawn


def test_put_and_cat_on_a_terminal_draw_progress_bars_on_stderr(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert _ledger(home, "init").returncode == 0
    f = tmp_path / "big.bin"
    data = os.urandom(64 * 1024 * 1024)
    f.write_bytes(data)
    rc, out, drawn = _on_terminal([LEDGER_BIN, "--home", str(home), "put", str(f)])
    assert rc == 0
    assert b"storing" in drawn  # the bar, on the terminal only
    assert b"storing" not in out  # the digest line stays clean
    digest = out.decode().split()[0]
    rc, out, drawn = _on_terminal([LEDGER_BIN, "--home", str(home), "cat", digest])
    assert rc == 0
    assert out == data
    assert b"verifying" in drawn or b"writing" in drawn


def test_opening_an_artifact_verified_reports_the_bytes_checked(tmp_path: Path) -> None:
    from ledger.store import FilesystemStore, put_file

    store = FilesystemStore(tmp_path / "store")
    store.init()
    f = tmp_path / "big.bin"
    f.write_bytes(os.urandom(20 * 1024 * 1024))
    stored = put_file(store, f)
    steps: list[int] = []
    with store.open_verified(stored.digest, progress=steps.append) as opened:
        assert opened.read(4) == f.read_bytes()[:4]
    assert len(steps) >= 2 and sum(steps) == stored.size


# --- start-up: `main` builds only the command it runs (the same registered function) ---


def test_a_single_command_app_parses_and_helps_as_the_whole_app() -> None:
    """`main` runs `_app_for(args)`: the root and the one command named. Every command and sub-app, with
    the root options before it in each spelling, resolves to exactly that command, and its help is the
    whole app's help for it, character for character."""
    import typer
    from typer.testing import CliRunner

    from ledger.cli import _app_for, _command_of, app

    whole = typer.main.get_command(app)
    names = list(whole.commands)  # type: ignore[attr-defined]
    assert {"log", "show", "verdict", "check", "keys", "collect"} <= set(names)
    runner = CliRunner()
    for name in names:
        for prefix in ([], ["--home", "/tmp/h"], ["--home=/tmp/h"], ["--home", name]):
            args = [*prefix, name, "--help"]
            assert _command_of(args) == name, args
            one = typer.main.get_command(_app_for(args))
            assert list(one.commands) == [name], args  # type: ignore[attr-defined]
        fast = runner.invoke(_app_for([name, "--help"]), [name, "--help"], prog_name="ledger")
        full = runner.invoke(app, [name, "--help"], prog_name="ledger")
        assert fast.exit_code == full.exit_code == 0, name
        assert fast.output == full.output, name


def test_root_options_and_unknown_names_run_the_whole_app() -> None:
    from ledger.cli import _app_for, _command_of, app

    root_only = ([], ["--help"], ["--version"], ["--install-completion"], ["--home", "/tmp/h"], ["--", "log"])
    for args in root_only:
        assert _command_of(args) is None, args
        assert _app_for(args) is app, args
    assert _app_for(["logg"]) is app  # Click says "No such command" with the whole list to pick from
    assert _app_for(["--bogus", "log"]) is app  # and the unknown option is its usage error


def test_every_command_is_registered_by_the_module_the_start_up_table_names() -> None:
    """`main` imports only the module `_MODULE_OF` names for a command: the table and the whole app agree,
    name for name, so a command added to a module but not to the table (or moved) fails here."""
    import typer

    from ledger.cli import _MODULE_OF, app

    whole = typer.main.get_command(app)
    registered = {}
    for name, cmd in whole.commands.items():  # type: ignore[attr-defined]
        callback = cmd.callback if cmd.callback is not None else None
        sub = getattr(cmd, "commands", None)
        if callback is None and sub:
            callback = next(iter(sub.values())).callback
        registered[name] = callback.__module__.rsplit(".", 1)[-1]
    assert registered == _MODULE_OF


def test_a_read_command_imports_neither_the_collectors_nor_the_bundle_adapters() -> None:
    """Regression (start-up time): `ledger verdict` imported every command module (the bundle's Rich text,
    the collectors' adapters) before it parsed its arguments."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from ledger.cli import _app_for\n"
        "_app_for(['verdict', '--help'])\n"
        "print(sorted(m for m in sys.modules if m.startswith('ledger.cli.')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    loaded = set(eval(out))  # a list of module names printed by repr
    assert {"ledger.cli.core", "ledger.cli.policy"} <= loaded
    assert not loaded & {"ledger.cli.bundle", "ledger.cli.collect", "ledger.cli.export", "ledger.cli.serve"}


def test_a_reference_time_near_year_one_is_an_input_error_not_an_overflow_traceback(cli: Any) -> None:
    """`check routing-change --now 0001-01-01T00:00:00Z` raised OverflowError (exit 1, the code of "refused")
    when the gate subtracted the probe age bound: a time no window can be computed from is input refused."""
    now = datetime(2026, 9, 9, 12, 0, tzinfo=UTC)
    outside = ("0001-01-01T00:00:00Z", "0001-01-01T00:59:59", "1969-12-31T23:59:59Z", "9999-12-31T23:59:59Z")
    for text in outside:
        with pytest.raises(InputError, match="out of range"):
            parse_when(text, now)
    with pytest.raises(InputError, match="out of range"):
        parse_when("100000 weeks ago", now)
    # the neighbours inside the range still read
    assert parse_when("1970-01-01T00:00:00Z") == datetime(1970, 1, 1, tzinfo=UTC)
    assert parse_when("8999-12-31T00:00:00Z").year == 8999
    assert cli("init").code == 0
    for args in (
        ("check", "routing-change", "--subject", "campaign=c1", "--now", "0001-01-01T00:00:00Z"),
        ("log", "--since", "0001-01-01T00:00:00Z"),
    ):
        r = cli(*args)
        assert r.code == 2, r
        assert "error[" in r.err and "out of range" in r.err and "Traceback" not in r.err
