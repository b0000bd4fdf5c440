#!/usr/bin/env bash
# The whole test suite, as CI runs it: set-up, real engines (cached), lint, types, import layers, tests.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
bash scripts/setup.sh
bash scripts/engines.sh all >/dev/null
echo "== ruff"
.venv/bin/ruff check .
echo "== mypy (strict on the whole package: core, CLI, and api/, collectors/, migrations/ through their links)"
.venv/bin/python -m mypy ledger
echo "== import-linter (the floors of docs/ARCHITECTURE.md)"
.venv/bin/lint-imports
echo "== pytest"
exec .venv/bin/pytest "$@"
