#!/usr/bin/env bash
# Longer reliability soak, by hand: many more kill -9 trials and fuzz examples than CI runs.
#   scripts/soak.sh [CRASH_TRIALS] [FUZZ_EXAMPLES]      (defaults: 3000 trials, 5000 examples)
# Figures of the crash trials go to bench/results/reliability-soak.json; CRASH_SEED=N replays a run.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
export CRASH_TRIALS="${1:-3000}"
export FUZZ_EXAMPLES="${2:-5000}"
mkdir -p bench/results
export RELIABILITY_REPORT="${RELIABILITY_REPORT:-$REPO/bench/results/reliability-soak.json}"
echo "== crash consistency: $CRASH_TRIALS kill -9 trials (report: $RELIABILITY_REPORT)"
.venv/bin/pytest -q -s -p no:cacheprovider tests/reliability/test_crash.py
echo "== hostile input: $FUZZ_EXAMPLES examples per fuzz test"
.venv/bin/pytest -q -p no:cacheprovider tests/reliability/test_hostile_input.py \
  tests/reliability/test_collector_parsers.py
echo "== disk full, paths, tampering, secrets"
exec .venv/bin/pytest -q -p no:cacheprovider -rxX tests/reliability/test_disk_full.py \
  tests/reliability/test_paths.py tests/reliability/test_tamper_more.py tests/reliability/test_secrets.py
