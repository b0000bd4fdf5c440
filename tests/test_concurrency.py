"""Two processes appending to one SQLite home end with one gap-free chain."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from ledger.service import Ledger

WRITER = """
import sys
from pathlib import Path
from ledger.service import Ledger
led = Ledger.open(Path(sys.argv[1]))
for i in range(int(sys.argv[3])):
    led.record("note", {"campaign": "concurrency", "writer": sys.argv[2]}, {"text": f"{sys.argv[2]} {i}"},
               key=sys.argv[2])
print("done")
"""


def test_two_processes_500_appends_each(ledger: Ledger, home: Path) -> None:
    ledger.new_key("w1", ["collector"])
    ledger.new_key("w2", ["collector"])
    base = ledger.size()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(home), name, "500"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in ("w1", "w2")
    ]
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        assert out.strip() == "done"
    assert ledger.size() == base + 1000
    seqs = [e.seq for e in ledger.query(subject={"campaign": "concurrency"}, limit=None)]
    assert len(seqs) == 1000
    report = ledger.verify()
    assert report, report.to_json()["problems"][:3]
    assert report.size == base + 1000
