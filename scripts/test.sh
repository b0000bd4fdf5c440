#!/usr/bin/env bash
# The whole test suite, as CI runs it: set-up, real engines (cached), lint, types, tests.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
bash scripts/setup.sh
bash scripts/engines.sh all >/dev/null
echo "== ruff"
.venv/bin/ruff check .
echo "== mypy (strict on the package)"
.venv/bin/mypy ledger
echo "== pytest"
exec .venv/bin/pytest "$@"
