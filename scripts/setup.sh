#!/usr/bin/env bash
# Set up everything the project needs on a fresh machine of this kind; idempotent and quick on reruns.
#   - the project virtualenv .venv with the package (editable) and its test tools
#   - Debian packages the tests use: chromium (reviewer pages driven by Playwright), b3sum (benchmarks)
#   - the PostgreSQL server the shared-deployment tests talk to (started if it is installed but down)
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
log() { printf '[setup] %s\n' "$*" >&2; }
export PIP_DISABLE_PIP_VERSION_CHECK=1

PY="${LEDGER_PYTHON:-}"
if [[ -z "$PY" ]]; then
  if command -v python3.11 >/dev/null 2>&1; then PY=python3.11; else PY=python3; fi
fi

stamp=".venv/.setup-$(sha256sum pyproject.toml constraints.txt 2>/dev/null | sha256sum | cut -c1-16)"
if [[ ! -f "$stamp" ]]; then
  log "creating .venv and installing the project (pyproject.toml + constraints.txt)"
  [[ -x .venv/bin/python ]] || "$PY" -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -c constraints.txt -e ".[test]"
  rm -f .venv/.setup-*
  touch "$stamp"
fi

need_apt=()
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
command -v b3sum >/dev/null 2>&1 || need_apt+=(b3sum)
if (( ${#need_apt[@]} )); then
  if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
    log "installing Debian packages: ${need_apt[*]}"
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
  else
    log "WARNING: missing ${need_apt[*]} and cannot apt-get install them (tests that need them will fail)"
  fi
fi

if command -v pg_isready >/dev/null 2>&1 && ! pg_isready -q -h 127.0.0.1 -p 5432; then
  if command -v pg_ctlcluster >/dev/null 2>&1 && [[ -d /etc/postgresql ]]; then
    log "starting PostgreSQL"
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start || true
  fi
fi
log "ready: $REPO/.venv/bin/ledger"

# ---------------------------------------------------------------- training extra (torch, CPU build)
# The tiny answering GGUF (scripts/engines.sh trained) is trained with torch in the project venv.
# pip must take the CPU build of torch==2.13.0 (a local wheel on this kind of machine); never a plain
# `torch`, which pulls the CUDA build. Set LEDGER_SKIP_TRAIN=1 to leave it out.
if [[ "${LEDGER_SKIP_TRAIN:-0}" != 1 ]] && ! .venv/bin/python -c 'import torch' >/dev/null 2>&1; then
  log "installing the training extra (torch==2.13.0, CPU build)"
  .venv/bin/python -m pip install -q -c constraints.txt -e ".[train]"
fi
