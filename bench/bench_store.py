"""Store hashing and `ledger put` on a large file vs b3sum and `cp && sync && b3sum` (issue: foundation)."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import print_table, timed, write_results

from ledger.hashing import hash_file


def peak_rss_of(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, int]:
    """Wall time and peak RSS (KiB) of a child process."""
    import time

    # ru_maxrss survives fork and exec on Linux, so a child forked from this (large) process would report
    # our own peak; GNU time measures the command from a small parent.
    gnu_time = shutil.which("time") or "/usr/bin/time"
    if Path(gnu_time).exists():
        t = time.perf_counter()
        done = subprocess.run(
            [gnu_time, "-f", "%M", *cmd], env=env, capture_output=True, text=True, check=True
        )
        return time.perf_counter() - t, int(done.stderr.strip().splitlines()[-1])
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{cmd} failed: {proc.stderr.read() if proc.stderr else ''!r}")
    return wall, usage.ru_maxrss


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-mib", type=int, default=2048)
    ap.add_argument("--dir", default=None, help="where to put the test file (default: a temp dir)")
    args = ap.parse_args()
    b3sum = shutil.which("b3sum")
    if not b3sum:
        raise SystemExit("b3sum is required (Debian package b3sum)")
    work = Path(args.dir or tempfile.mkdtemp(prefix="bench-store-"))
    work.mkdir(parents=True, exist_ok=True)
    big = work / "big.bin"
    size = args.size_mib * 1024 * 1024
    if not big.exists() or big.stat().st_size != size:
        with big.open("wb") as f:
            block = os.urandom(16 * 1024 * 1024)
            for _ in range(size // len(block)):
                f.write(block)
    gib = size / 2**30
    subprocess.run(["cat", str(big)], stdout=subprocess.DEVNULL, check=True)  # warm the page cache

    t_b3sum = timed(lambda: subprocess.run([b3sum, str(big)], capture_output=True, check=True), 3)
    t_hash = timed(lambda: hash_file(big), 3)
    with big.open("rb") as f0:
        from ledger.hashing import hash_stream

        def stream_hash() -> None:
            with big.open("rb") as f:
                hash_stream(f)

        t_stream = timed(stream_hash, 3)
    del f0

    home = work / "home"
    if home.exists():
        shutil.rmtree(home)
    ledger_bin = str(Path(sys.executable).with_name("ledger"))
    env = dict(os.environ, LEDGER_HOME=str(home))
    subprocess.run([ledger_bin, "init"], env=env, check=True, capture_output=True)
    objects = home / "store" / "objects"

    def clean_store() -> None:
        for sub in objects.iterdir():
            if sub.is_dir():
                for f in sub.iterdir():
                    os.chmod(f, 0o644)
                shutil.rmtree(sub)

    dest = work / "copy.bin"
    t_ref_put = float("inf")
    for _ in range(2):
        if dest.exists():
            dest.unlink()
        t_ref_put = min(
            t_ref_put,
            timed(
                lambda: subprocess.run(
                    f"cp {big} {dest} && sync {dest} && {b3sum} {big}",
                    shell=True,
                    capture_output=True,
                    check=True,
                )
            ),
        )
    t_put = float("inf")
    rss = 0
    for _ in range(2):
        clean_store()
        wall, rss = peak_rss_of([ledger_bin, "put", str(big)], env)
        t_put = min(t_put, wall)

    rows = [
        {"what": "b3sum FILE", "seconds": t_b3sum, "GiB/s": gib / t_b3sum, "ratio": 1.0},
        {
            "what": "hash_file (mmap, all cores)",
            "seconds": t_hash,
            "GiB/s": gib / t_hash,
            "ratio": t_b3sum / t_hash,
            "target": ">= 0.8",
        },
        {
            "what": "hash_stream (8 MiB reads)",
            "seconds": t_stream,
            "GiB/s": gib / t_stream,
            "ratio": t_b3sum / t_stream,
        },
        {"what": "cp && sync && b3sum", "seconds": t_ref_put, "GiB/s": gib / t_ref_put, "ratio": 1.0},
        {
            "what": "ledger put (copy+hash+fsync)",
            "seconds": t_put,
            "GiB/s": gib / t_put,
            "ratio": t_ref_put / t_put,
            "target": ">= 1.2",
            "peak_rss_mib": rss / 1024,
        },
    ]
    print_table(rows, ["what", "seconds", "GiB/s", "ratio", "target", "peak_rss_mib"])
    path = write_results("store", rows, {"size_mib": args.size_mib})
    print(f"results: {path}")
    if not args.dir:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
