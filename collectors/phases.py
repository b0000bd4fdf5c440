"""Phase timings of an engine start, taken from the log lines the engines print."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

__all__ = ["PHASE_PATTERNS", "PhaseTracker", "parse_phases"]

# (phase name, pattern, unit of the captured number). A number-less pattern only marks when the line
# appeared: the tracker records ``t_<name>_s`` (seconds since launch) for every phase it sees.
PHASE_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    # vLLM
    ("weights_loaded_s", re.compile(r"Loading weights took ([\d.]+) seconds")),
    ("model_memory_gib", re.compile(r"Model loading took ([\d.]+) GiB memory")),
    ("model_loading_s", re.compile(r"Model loading took [\d.]+ GiB memory and ([\d.]+) seconds")),
    ("model_memory_gib", re.compile(r"Model loading took ([\d.]+) GiB and [\d.]+ seconds")),
    ("model_loading_s", re.compile(r"Model loading took [\d.]+ GiB and ([\d.]+) seconds")),
    ("kv_cache_gib", re.compile(r"Available KV cache memory: ([\d.]+) GiB")),
    (
        "engine_init_s",
        re.compile(r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+) seconds"),
    ),
    ("compile_s", re.compile(r"torch\.compile takes ([\d.]+) s in total")),
    ("api_server_started", re.compile(r"Starting vLLM API server")),
    # llama.cpp (llama-server and llama-cpp-python)
    ("model_file_mib", re.compile(r"print_info: file size\s+=\s+([\d.]+) MiB")),
    ("model_loaded", re.compile(r"main: model loaded|srv\s+load_model: loading model")),
    ("load_ms", re.compile(r"llama_perf_context_print:\s+load time =\s+([\d.]+) ms")),
    ("server_listening", re.compile(r"Uvicorn running on|server is listening on|HTTP server is listening")),
    # SGLang
    ("weights_loaded_s", re.compile(r"Load weight end\. elapsed=([\d.]+) s")),
    ("weight_memory_gib", re.compile(r"Load weight end\..*mem usage=([\d.]+) GB")),
    ("server_fired_up", re.compile(r"The server is fired up and ready to roll")),
)


@dataclass
class PhaseTracker:
    """Feed log lines as they arrive; keeps the first value and arrival time of each phase."""

    phases: dict[str, float] = field(default_factory=dict)

    def feed(self, line: str, elapsed_s: float | None = None) -> None:
        for name, pat in PHASE_PATTERNS:
            m = pat.search(line)
            if m is None:
                continue
            if m.groups():
                try:
                    self.phases.setdefault(name, float(m.group(1)))
                except ValueError:
                    continue
            if elapsed_s is not None:
                base = name.removesuffix("_s").removesuffix("_gib").removesuffix("_mib").removesuffix("_ms")
                self.phases.setdefault(f"t_{base}_s", round(elapsed_s, 3))


def parse_phases(lines: Iterable[str]) -> dict[str, float]:
    """Values printed in the log (no arrival times): for saved logs."""
    t = PhaseTracker()
    for line in lines:
        t.feed(line)
    return t.phases
