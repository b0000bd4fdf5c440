"""``ledger campaign init``: a campaign file for one engine + model + host, filled in from a shipped template.

The template (``campaigns/templates/<engine>-gpu.toml``) keeps what the policy pins — the corpora, their
digests and the approved benchmark spec — and the gate ladder; this fills in the campaign id, the host the
campaign runs on (the subject ``host``, what a deployment file names), the model (a local path, or a Hugging
Face repo id looked up in the HF cache), the engine's interpreter and the GPUs — or, with ``cpu``, a
CPU-only host (no GPU required, ``CPU_MIN_DISK_FREE_GIB`` free, no GPU option in the engine command). Values
are written as TOML basic strings (any Unicode but the control characters, which are escaped) and arrays, the
template's comments stay, and the result is parsed and loaded by the campaign loader (strictly, as ``ledger
collect run`` loads it) before it is written: text that is no TOML is a ConfigError, never a traceback.
"""

from __future__ import annotations

import re
import tempfile
import tomllib
from pathlib import Path
from typing import Any

from ledger.atomic import write_atomic
from ledger.collectors.campaign import Campaign, load_campaign
from ledger.collectors.corpus import corpus_digest
from ledger.errors import ConfigError, InputError

__all__ = [
    "CPU_MIN_DISK_FREE_GIB",
    "ENGINES",
    "TEMPLATES",
    "campaign_id",
    "init_campaign",
    "parse_gpus",
    "render_campaign",
]

TEMPLATES = Path(__file__).resolve().parent.parent / "campaigns" / "templates"
# engine → (template file, the interpreter variable it names)
ENGINES: dict[str, tuple[str, str]] = {
    "vllm": ("vllm-gpu.toml", "VLLM_PYTHON"),
    "llamacpp": ("llamacpp-gpu.toml", "LLAMACPP_PYTHON"),
}
# ``--cpu``: the host gate's disk minimum on a CPU-only host (the GPU templates ask 20 GiB), as the shipped
# CPU campaigns (campaigns/*-cpu.toml) ask
CPU_MIN_DISK_FREE_GIB = 1
# ``--cpu``: the engine options that name a GPU, dropped (llama.cpp: layers offloaded to the GPU) or set for
# the CPU (vLLM's CPU backend reads --gpu-memory-utilization as the share of host memory it reserves: the GPU
# template's 0.85 leaves too little for anything else; 0.5 is the value its own start-up error proposes)
_CPU_DROP = {"llamacpp": ("--n_gpu_layers", "--n-gpu-layers")}
_CPU_SET = {"vllm": ("--gpu-memory-utilization", "0.5")}
_CPU_ENV = {"vllm": {"VLLM_TARGET_DEVICE": "cpu", "HF_HUB_OFFLINE": "1"}}
_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
_HOST = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$")


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "x"


def campaign_id(engine: str, model_name: str, host: str) -> str:
    return f"{engine}-{_slug(model_name.rsplit('/', 1)[-1])}-{_slug(host)}"[:200]


def _model(model: str) -> tuple[str, str, str | None]:
    """(path as the campaign names it, model name, repo id or None) for a local path or an HF repo id."""
    local = Path(model).expanduser()
    if local.exists():
        where = str(local.resolve())
        if "${" in where:  # the loader would read it as a variable
            raise InputError(f"--model {where!r} holds '${{': a campaign file expands that as a variable")
        return where, local.resolve().name, None
    if _REPO_ID.fullmatch(model):
        # a Hugging Face repo id: its folder in the HF cache (refs/main names the snapshot)
        return "${HF_HOME:-~/.cache/huggingface}/hub/models--" + model.replace("/", "--"), model, model
    raise InputError(f"--model {model!r} is neither an existing path nor a Hugging Face repo id (org/name)")


# TOML basic strings take any Unicode scalar value but the quotation mark, the backslash and the control
# characters (U+0000 to U+001F but tab, and U+007F): those are escaped
_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}
_MUST_ESCAPE = re.compile(r'["\\\x00-\x1f\x7f]')
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_SURROGATE = re.compile(r"[\ud800-\udfff]")


def _toml_str(text: str) -> str:
    """``text`` as a TOML basic string: non-ASCII written as itself (an emoji is one character, not the JSON
    surrogate pair TOML refuses), the control characters escaped. A lone surrogate (a file name that is no
    UTF-8, as Python reads it) is no Unicode scalar value: no TOML string holds it."""
    if _SURROGATE.search(text):
        raise InputError(
            f"{text!r} is not valid Unicode (a name that is no UTF-8): a campaign file cannot hold it"
        )
    body = _MUST_ESCAPE.sub(lambda m: _ESCAPES.get(m.group(), f"\\u{ord(m.group()):04X}"), text)
    return f'"{body}"'


def _toml(value: Any) -> str:
    """A TOML value for a string, an int or a list of them."""
    if isinstance(value, str):
        return _toml_str(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    raise TypeError(f"no TOML value is written for {type(value).__name__}")


def _comment(text: str) -> str:
    """``text`` for a comment line: TOML comments take no control characters (a newline would end one)."""
    if _SURROGATE.search(text):
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return _CONTROL.sub(lambda m: f"\\u{ord(m.group()):04X}", text)


def _parse(lines: list[str], what: str) -> dict[str, Any]:
    """The TOML of ``lines``; text that is no TOML (a value written into it broke it) is a ConfigError."""
    try:
        return tomllib.loads("\n".join(lines))
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"the campaign written from {what} is not valid TOML: {e}") from e
    except RecursionError as e:
        raise ConfigError(f"the campaign written from {what} is nested too deeply") from e


def parse_gpus(text: str) -> list[int]:
    """``--gpus``: comma-separated GPU indexes, each a whole number >= 0, each once. An empty item
    (``0,,1``, a trailing comma) is an error, never skipped."""
    items = [x.strip() for x in text.split(",")]
    if any(not x for x in items):
        raise InputError(f"--gpus {text!r} has an empty item: name each GPU index once, e.g. 0,1")
    if not all(x.isascii() and x.isdigit() for x in items):
        raise InputError(f"--gpus must be comma-separated GPU indexes, not {text!r}")
    gpus = [int(x) for x in items]
    if len(set(gpus)) != len(gpus):
        raise InputError("--gpus names distinct GPU indexes, e.g. 0,1")
    return gpus


def _campaign_option(campaign: str) -> str:
    """``--campaign``: a campaign id as the loader takes it: not blank, nothing around it, no control
    characters, at most 200 characters."""
    if (
        not campaign.strip()
        or campaign != campaign.strip()
        or _CONTROL.search(campaign)
        or len(campaign) > 200
    ):
        raise InputError(
            f"--campaign {campaign!r} is not a campaign id: not blank, no leading or trailing whitespace, "
            "no control characters, at most 200 characters"
        )
    return campaign


def _span(lines: list[str], start: int, end: int, key: str) -> tuple[int, int] | None:
    """Lines ``i..stop`` of ``key = …`` between ``start`` and ``end`` (an array may span several)."""
    key_re = re.compile(rf"^{re.escape(key)}\s*=")
    for i in range(start, end):
        if key_re.match(lines[i]):
            stop = i
            depth = lines[i].count("[") - lines[i].count("]")
            while depth > 0 and stop + 1 < end:
                stop += 1
                depth += lines[stop].count("[") - lines[stop].count("]")
            return i, stop
    return None


def _set(lines: list[str], section: str, key: str, value: Any, *, after: str | None = None) -> None:
    """Replace ``key = …`` in ``[section]``; when the section has no such key, insert it after the value
    of key ``after`` (or right after the header)."""
    try:
        start = lines.index(f"[{section}]")
    except ValueError:
        raise ConfigError(f"template has no [{section}] section") from None
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("[")), len(lines))
    new = _assignment(key, value)
    found = _span(lines, start + 1, end, key)
    if found is not None:
        # a comment line inside a multi-line value stays, above the value written anew
        notes = [x.strip() for x in lines[found[0] + 1 : found[1] + 1] if x.lstrip().startswith("#")]
        lines[found[0] : found[1] + 1] = [*notes, *new]
        return
    prev = _span(lines, start + 1, end, after) if after is not None else None
    at = prev[1] + 1 if prev is not None else start + 1
    lines[at:at] = new


_WIDTH = 110


def _assignment(key: str, value: Any) -> list[str]:
    """The lines of ``key = value``: an array too wide for one line wrapped, items aligned after ``[``."""
    if isinstance(value, _Raw):
        return [f"{key} = {value}"]
    line = f"{key} = {_toml(value)}"
    if not isinstance(value, list) or len(line) <= _WIDTH:
        return [line]
    items = [_toml(v) for v in value]
    indent = " " * (len(key) + 4)
    out: list[str] = []
    current = f"{key} = ["
    for i, item in enumerate(items):
        piece = item + ("," if i < len(items) - 1 else "]")
        if current.endswith("["):
            current += piece
        elif len(current) + 1 + len(piece) > _WIDTH:
            out.append(current)
            current = indent + piece
        else:
            current += " " + piece
    return [*out, current]


class _Raw(str):
    """A value already written as TOML (an inline table)."""


def _command(lines: list[str]) -> list[str]:
    """The template's ``[engine] command`` as a list (read back through the TOML parser)."""
    data = _parse(lines, "the template")
    command = data.get("engine", {}).get("command")
    if not isinstance(command, list) or not all(isinstance(c, str) for c in command):
        raise ConfigError("template has no [engine] command list")
    return list(command)


def _inline_table(env: dict[str, str]) -> _Raw:
    return _Raw("{ " + ", ".join(f"{k} = {_toml(v)}" for k, v in env.items()) + " }")


def _cpu_command(engine: str, command: list[str]) -> list[str]:
    """The template's engine command for a CPU-only host: the GPU options dropped or set (``_CPU_DROP``,
    ``_CPU_SET``), each as ``--flag value`` or ``--flag=value``."""
    drop = _CPU_DROP.get(engine, ())
    setting = _CPU_SET.get(engine)
    out: list[str] = []
    found = False
    i = 0
    while i < len(command):
        flag, eq, _value = command[i].partition("=")
        if flag in drop or (setting is not None and flag == setting[0]):
            if not eq and i + 1 >= len(command):
                raise ConfigError(f"the template's engine command ends with {flag} and no value")
            if setting is not None and flag == setting[0]:
                out += setting
                found = True
            i += 1 if eq else 2
            continue
        out.append(command[i])
        i += 1
    if setting is not None and not found:
        out += setting
    return out


def render_campaign(
    engine: str,
    model: str,
    host: str,
    *,
    gpus: list[int] | None = None,
    python: str | None = None,
    campaign: str | None = None,
    cpu: bool = False,
) -> str:
    """The campaign TOML text (not yet validated: :func:`init_campaign` loads it before writing). ``cpu``:
    for a host without GPUs — the host gate requires none and asks ``CPU_MIN_DISK_FREE_GIB`` free, the
    engine command names no GPU option; it excludes ``gpus``."""
    if engine not in ENGINES:
        raise InputError(f"unknown engine {engine!r}; one of {', '.join(ENGINES)}")
    if cpu and gpus is not None:
        raise InputError(
            "--cpu and --gpus exclude each other: --cpu is a host whose engine uses no GPU",
            hint="drop --gpus for a CPU-only host, or --cpu to use those GPUs",
        )
    if not _HOST.fullmatch(host):
        raise InputError(f"--host {host!r} is not a host name (letters, digits, '.', '-', '_')")
    template_name, python_var = ENGINES[engine]
    template = TEMPLATES / template_name
    try:
        lines = template.read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise ConfigError(f"cannot read the campaign template {template}: {e.strerror}") from e
    if campaign is not None:
        _campaign_option(campaign)
    model_path, name, repo_id = _model(model)
    model_name = name if repo_id is not None else None
    cid = campaign if campaign is not None else campaign_id(engine, name, host)
    _set(lines, "campaign", "id", cid)
    _set(lines, "campaign", "host", host, after="id")
    _set(
        lines,
        "campaign",
        "description",
        f"{engine} + {name} on {host}" + (", CPU only" if cpu else "") + ": bounded qualification",
    )
    _set(lines, "model", "path", model_path)
    if model_name is not None:
        _set(lines, "model", "name", model_name, after="path")
    if repo_id is not None:
        _set(lines, "model", "repo_id", repo_id, after="path")
    _set(lines, "engine", "python", python or f"${{{python_var}:-python3}}")
    if gpus is not None:
        if not gpus or len(set(gpus)) != len(gpus) or any(g < 0 for g in gpus):
            raise InputError("--gpus names distinct GPU indexes, e.g. 0,1")
        visible = ",".join(str(g) for g in gpus)
        # the driver's indexes (nvidia-smi's, the host probe's): CUDA numbers devices fastest first otherwise
        env = {"CUDA_VISIBLE_DEVICES": visible, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
        if engine == "vllm":
            env["HF_HUB_OFFLINE"] = "1"
        _set(lines, "engine", "env", _inline_table(env), after="command")
        command = _command(lines)
        if engine == "vllm" and len(gpus) > 1 and "--tensor-parallel-size" not in command:
            _set(lines, "engine", "command", [*command, "--tensor-parallel-size", str(len(gpus))])
    if cpu:
        _set(lines, "gates.host", "require_gpu", _Raw("false"))
        _set(lines, "gates.host", "min_disk_free_gib", CPU_MIN_DISK_FREE_GIB)
        _set(lines, "engine", "command", _cpu_command(engine, _command(lines)))
        if engine in _CPU_ENV:
            template_env = _section(lines, "engine", template_name).get("env", {})
            env = {**(template_env if isinstance(template_env, dict) else {}), **_CPU_ENV[engine]}
            _set(lines, "engine", "env", _inline_table(env), after="command")
    # the pinned corpora by absolute path: the file works wherever it is written
    for gate in ("semantic", "benchmark"):
        section = f"gates.{gate}"
        data = _section(lines, section, template_name)
        corpus = data.get("corpus")
        if isinstance(corpus, str):
            path = (template.parent / corpus).resolve()
            if corpus_digest(path) != data.get("digest"):
                raise ConfigError(f"template {template}: {section} corpus {path} is not the pinned one")
            _set(lines, section, "corpus", str(path))
    gpu_text = f" --gpus {','.join(str(g) for g in gpus)}" if gpus is not None else " --cpu" if cpu else ""
    header = [
        _comment(
            f"# Written by `ledger campaign init --engine {engine} --model {model} --host {host}{gpu_text}`"
        ),
        f"# from the template {template_name} (its notes follow). Run it with `ledger collect run FILE`.",
        "",
    ]
    _parse(header + lines, template_name)  # every value written stayed one value: else a ConfigError
    return "\n".join(header + lines) + "\n"


def _section(lines: list[str], dotted: str, what: str) -> dict[str, Any]:
    data: Any = _parse(lines, what)
    for part in dotted.split("."):
        data = data.get(part, {}) if isinstance(data, dict) else {}
    return data if isinstance(data, dict) else {}


def init_campaign(
    engine: str,
    model: str,
    host: str,
    *,
    out: Path | None = None,
    force: bool = False,
    gpus: list[int] | None = None,
    python: str | None = None,
    campaign: str | None = None,
    cpu: bool = False,
) -> Campaign:
    """Render, load (as ``collect run`` would) and only then write the campaign file ``out`` (default:
    ``<campaign id>.toml`` in the current folder)."""
    if campaign is not None:
        _campaign_option(campaign)
    if out is None:
        cid = campaign if campaign is not None else campaign_id(engine, _model(model)[1], host)
        if "/" in cid or "\\" in cid:
            raise InputError(f"campaign id {cid!r} is no file name", hint="name the file with --out")
        out = Path(f"{cid}.toml")
    if out.exists() and not force:
        raise InputError(f"{out} exists; not overwritten", hint="pass --force to replace it")
    text = render_campaign(engine, model, host, gpus=gpus, python=python, campaign=campaign, cpu=cpu)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=".campaign-init-") as tmp:
        probe = Path(tmp) / out.name
        probe.write_text(text, encoding="utf-8")
        load_campaign(probe)  # strict: unknown keys, wrong types, unset variables are errors
    write_atomic(out, text.encode("utf-8"))
    return load_campaign(out)
