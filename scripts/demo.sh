#!/usr/bin/env bash
# The main job, end to end, against a REAL engine: a bounded qualification of llama.cpp on a tiny model.
#
#   scripts/demo.sh [DEMO_HOME]        (default: ./.ledger/demo, removed and recreated)
#
# Sets up the project venv itself (scripts/setup.sh); needs bash, and a C/C++ toolchain + cmake
# the first time (scripts/engines.sh compiles llama-cpp-python once, ~4-5 min on 2 cores; cached in
# ${LEDGER_ENGINE_CACHE:-~/.cache/evidence-ledger/engines} afterwards).
#
# Steps: build/reuse the llama.cpp engine venv and the tiny GGUF model → ledger init → collect host →
# collect model → collect run campaigns/llamacpp-cpu.toml → ledger verdict --record → ledger verify. The
# campaign's READY control fails honestly (the tiny random model answers gibberish): the verdict is
# "NOT QUALIFIED — CONTROL", and the ledger verifies clean.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
bash "$REPO/scripts/setup.sh"
LEDGER="${LEDGER_BIN:-$REPO/.venv/bin/ledger}"
DEMO_HOME="${1:-$REPO/.ledger/demo}"
export LEDGER_ENGINE_CACHE="${LEDGER_ENGINE_CACHE:-$HOME/.cache/evidence-ledger/engines}"

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "engine: llama-cpp-python[server] venv + tiny GGUF model (cached)"
bash "$REPO/scripts/engines.sh" llamacpp
MODEL="$LEDGER_ENGINE_CACHE/models/tiny.gguf"

step "ledger init $DEMO_HOME"
rm -rf "$DEMO_HOME"
"$LEDGER" init --home "$DEMO_HOME"

step "ledger collect host"
"$LEDGER" collect host --home "$DEMO_HOME" --campaign llamacpp-cpu-tiny \
  --engine-python "$LEDGER_ENGINE_CACHE/llamacpp/bin/python" --path "$MODEL"

step "ledger collect model $MODEL"
"$LEDGER" collect model "$MODEL" --home "$DEMO_HOME" --campaign llamacpp-cpu-tiny

step "ledger collect run campaigns/llamacpp-cpu.toml"
set +e
"$LEDGER" collect run campaigns/llamacpp-cpu.toml --home "$DEMO_HOME"
run_rc=$?
set -e
if [[ $run_rc -ne 0 && $run_rc -ne 1 ]]; then
  echo "demo: the campaign run failed to complete (exit $run_rc)" >&2
  exit "$run_rc"
fi

step "ledger verdict (policy backend-qualification, recorded as a signed verdict entry)"
"$LEDGER" --home "$DEMO_HOME" verdict --subject campaign=llamacpp-cpu-tiny --record

step "ledger verify"
"$LEDGER" --home "$DEMO_HOME" verify

step "summary"
echo "ledger home:   $DEMO_HOME"
echo "campaign exit: $run_rc (1 = a gate failed: the READY control, as expected for the tiny model)"
echo "browse it:     $LEDGER --home $DEMO_HOME log"
