"""Crash consistency: kill -9 at random points of `ledger put`, `ledger record` and batch appends.

After every kill: no partially-written artifact is visible, the chain has no gap or fork, verification
passes, and every entry (or artifact) whose command reported success is present. Trials run against one
home. ``CRASH_TRIALS`` scales the count (scripts/soak.sh runs thousands); ``CRASH_SEED`` replays a run;
``RELIABILITY_REPORT=FILE`` writes the figures as JSON.
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from ledger.errors import LedgerError
from ledger.hashing import parse_digest
from ledger.service import Ledger
from tests.reliability.conftest import ForkServer, LogWatch

LEDGER_BIN = Path(sys.executable).with_name("ledger")
MB = 1024 * 1024

# Trial mix for the default 240 trials: most go through the fork server (real CLI code, real process,
# no interpreter start-up); a few through the installed console script, exactly as an operator runs it.
MIX = {"put": 70, "record": 60, "batch-append": 90, "console-put": 10, "console-record": 10}


def _random_file(path: Path, size: int, rng: random.Random) -> Path:
    with path.open("wb") as f:
        left = size
        while left:
            n = min(left, 4 * MB)
            f.write(rng.randbytes(n))
            left -= n
    return path


def _check_entries_reported(ledger: Ledger, reported: list[str]) -> None:
    for entry_id in reported:
        entry = ledger.get(entry_id)  # raises EntryNotFoundError if a reported entry was lost
        for a in entry.statement.artifacts:
            ledger.store.verify(parse_digest(a.digest))


def _check_batches_whole(ledger: Ledger, first_new_seq: int) -> int:
    """Every batch with any entry in the log has all of its entries: appends are all-or-nothing."""
    new = ledger.query(subject={"campaign": "crash"}, after_seq=first_new_seq - 1, limit=None)
    sizes: dict[str, int] = {}
    seen: Counter[str] = Counter()
    for e in new:
        tag = e.statement.subject.get("batch")
        if tag is None:
            continue
        m = re.fullmatch(r"(\S+) (\d+)/(\d+)", e.statement.payload["text"])
        assert m, e.statement.payload
        sizes[tag] = int(m.group(3))
        seen[tag] += 1
    for tag, k in sizes.items():
        assert seen[tag] == k, f"batch {tag}: {seen[tag]} of {k} entries visible (a torn batch)"
    return len(sizes)


@pytest.mark.slow
def test_kill9_at_random_points_keeps_every_reported_entry(tmp_path: Path, forkserver: ForkServer) -> None:
    total = int(os.environ.get("CRASH_TRIALS", "240"))
    seed = int(os.environ.get("CRASH_SEED", str(random.randrange(1 << 32))))
    rng = random.Random(seed)
    print(f"crash trials: {total}, CRASH_SEED={seed}")
    scale = total / sum(MIX.values())
    plan = [k for k, n in MIX.items() for _ in range(max(1, round(n * scale)))]
    rng.shuffle(plan)

    home = tmp_path / "home"
    led = Ledger.init(home)
    led.new_key("hostA", ["collector"])
    led.close()
    work = tmp_path / "work"
    work.mkdir()
    watch = LogWatch()
    led = Ledger.open(home)

    # Calibrate: how long an unkilled put of 20 MB and a record with a 4 MB artifact take here, so the
    # random kill times cover the whole command on a fast or a slow machine.
    def timed_run(argv: list[str]) -> float:
        t = time.monotonic()
        trial = forkserver.start({"op": "cli", "argv": argv, "out": str(work / "calibrate.out")})
        assert forkserver.reap(trial)["code"] == 0, (work / "calibrate.out.err").read_text()
        return time.monotonic() - t

    big = _random_file(work / "cal.bin", 20 * MB, rng)
    t_put = timed_run(["--home", str(home), "put", str(big)])
    mid = _random_file(work / "cal.log", 4 * MB, rng)
    t_record = timed_run(
        ["--home", str(home), "record", "note", "--key", "hostA", "-s", "campaign=calibrate",
         "--data", '{"text": "calibration"}', "--artifact", f"log={mid}"]
    )  # fmt: skip
    big.unlink()
    mid.unlink()
    print(f"calibration: put 20 MB {t_put:.3f} s, record with 4 MB artifact {t_record:.3f} s")
    watch.check(led)  # the starting point: init, key enrolment and the calibration entry
    watch.check_store(led)

    # Load on the machine changes the durations, so the estimates adapt: shorter after a command finished
    # before its kill, longer after a kill, aiming at most kills landing inside the command.
    estimate = {"put": t_put, "record": t_record}
    stats: dict[str, Counter[str]] = {k: Counter() for k in MIX}
    t0 = time.monotonic()
    for n, what in enumerate(plan):
        size_before = len(watch.ids)
        src: Path | None = None
        out = work / f"t{n}.out"
        console = what.startswith("console-")
        if what.endswith("put"):
            size = rng.randint(1 * MB, 48 * MB)  # from 32 MiB up, the O_DIRECT ingest path
            src = _random_file(work / f"put{n}.bin", size, rng)
            argv = ["--home", str(home), "put", str(src)]
            delay = rng.uniform(0.0, 1.5 * estimate["put"] * size / (20 * MB) + 0.01)
        elif what.endswith("record"):
            src = _random_file(work / f"art{n}.log", rng.randint(64 * 1024, 4 * MB), rng)
            argv = [
                "--home", str(home), "record", "note", "--key", "hostA", "-s", "campaign=crash",
                "-s", f"trial={n}", "--data", json.dumps({"text": f"trial {n}"}), "--artifact", f"log={src}",
            ]  # fmt: skip
            delay = rng.uniform(0.0, 1.5 * estimate["record"])
        else:
            argv = []
            delay = rng.uniform(0.01, 0.15)
        if console:
            delay += rng.uniform(0.3, 1.6)  # interpreter start-up
            with out.open("wb") as fo:
                p = subprocess.Popen([str(LEDGER_BIN), *argv], stdout=fo, stderr=subprocess.DEVNULL)
                time.sleep(delay)
                p.kill()
                rc = p.wait()
            killed = rc == -9
        else:
            if what == "batch-append":
                req = {"op": "writer", "home": str(home), "key": "hostA", "tag": f"w{n}", "out": str(out)}
            else:
                req = {"op": "cli", "argv": argv, "out": str(out)}
            trial = forkserver.start(req)
            time.sleep(delay)
            status = forkserver.kill_and_reap(trial)
            killed = status["signal"] == 9
            if not killed:
                assert status["code"] == 0, (what, status, Path(str(out) + ".err").read_text())
        if what in ("put", "record"):
            estimate[what] *= 1.05 if killed else 0.85
        stats[what]["trials"] += 1
        stats[what]["killed mid-command" if killed else "finished before the kill"] += 1

        text = out.read_text() if out.exists() else ""  # killed before it opened its output
        led.close()
        led = Ledger.open(home)
        watch.check(led)  # no gap, no fork, every new row links to its predecessor
        new_objects = watch.check_store(led)  # only complete objects are visible
        if what.endswith("put"):
            reported = [line.split()[0] for line in text.splitlines() if line.startswith("blake3:")]
            for d in reported:
                led.store.verify(parse_digest(d))
            stats[what]["reported success"] += len(reported)
            stats[what]["new objects"] += len(new_objects)
        elif what.endswith("record"):
            reported = [line.split()[0] for line in text.splitlines() if "seq=" in line]
            _check_entries_reported(led, reported)
            stats[what]["reported success"] += len(reported)
        else:
            reported = [line.split()[1] for line in text.splitlines() if line.strip()]
            present = set(watch.ids)
            lost = [i for i in reported if i not in present]
            assert not lost, f"{len(lost)} reported entries lost, e.g. {lost[0]}"
            stats[what]["reported success"] += len(reported)
            stats[what]["batches"] += _check_batches_whole(led, size_before)
        added = len(watch.ids) - size_before
        if what.endswith("put"):
            assert added == 0, "a put appended entries"
        elif what.endswith("record"):
            assert added <= 1, f"one record appended {added} entries"
        stats[what]["entries added"] += added
        if src is not None:
            src.unlink()
        if (n + 1) % 60 == 0:
            watch.check(led, full=True)
            report = led.verify(artifacts=False)
            assert report, report.to_json()["problems"][:3]

    leftovers = watch.incoming_left
    # Temp files of killed writes are never served or counted: not an address, not listed, not verified.
    objects = home / "store" / "objects"
    temps = [p for p in objects.iterdir() if p.is_file()]
    assert all(p.name.startswith(".incoming-") for p in temps)
    for p in temps:
        with pytest.raises(LedgerError):
            led.open_artifact("blake3:" + p.name)
    listed = {d.hex for d in led.store.iter_digests()}
    assert listed == watch.objects_seen
    led.close()
    elapsed = time.monotonic() - t0
    # The finished ledger passes the operator's own check: `ledger verify` re-hashes every artifact.
    r = subprocess.run(
        [str(LEDGER_BIN), "--home", str(home), "verify", "--json"], check=False, capture_output=True
    )
    assert r.returncode == 0, r.stderr.decode() + r.stdout.decode()
    final = json.loads(r.stdout)
    assert final["ok"] and final["size"] == len(watch.ids)

    figures: dict[str, Any] = {
        "seed": seed,
        "trials": len(plan),
        "seconds": round(elapsed, 1),
        "final_size": final["size"],
        "artifacts_verified": final["artifacts_checked"],
        "incoming_temp_files_left": leftovers,
        "by_kind": {k: dict(v) for k, v in stats.items()},
    }
    print(json.dumps(figures, indent=2))
    if os.environ.get("RELIABILITY_REPORT"):
        Path(os.environ["RELIABILITY_REPORT"]).write_text(json.dumps(figures, indent=2) + "\n")
    assert sum(v["killed mid-command"] for v in stats.values()) >= len(plan) // 2, stats
