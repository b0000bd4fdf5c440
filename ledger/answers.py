"""How a control answer is judged: the checks the collector's probe and the policy share.

A structured-output answer against its schema (``schema_problem``), and whether an answer the request's
``max_tokens`` cut could still have become the right one (``cut_undecided``). The probe records ``ok`` by
them; the policy re-judges the recorded answer by them (``ok`` alone is a claim). And whether the engine
refused a request for the campaign's configuration rather than failing it (``refusal``): the collector's
probe and harnesses and the policy's ``e.derived.refusal`` judge it by that one function; and whether a
harness request that faulted got no answer (``request_unanswered``), the collector's ``request_fault_kind``
and the policy's read-back of the stored request record alike; and a benchmark's c1 parity (``parity_of``),
which the harness records of its requests and the policy derives again from the stored record.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any, Final, Literal

from ledger.canonical import parse_json
from ledger.errors import LedgerError

__all__ = [
    "CHAT_PROBES",
    "CONTEXT_ENV",
    "CONTEXT_OPTIONS",
    "CONTEXT_PADDING",
    "COUNTED_CONTENT",
    "COUNTED_MESSAGES",
    "COUNTED_USAGE",
    "CUT_FINISH_REASON",
    "DEFAULT_CONTEXT",
    "ENGINE_PROGRAMS",
    "HARNESS_REQUEST",
    "LAUNCHERS",
    "PROMPT_COUNTED",
    "PROMPT_COUNTERS",
    "PROMPT_COUNTS",
    "PYTHON_FLAGS",
    "PYTHON_VALUE_OPTIONS",
    "REFUSALS",
    "REFUSAL_ACCESS",
    "REFUSAL_CONTEXT",
    "REFUSAL_OPTION_VALUE",
    "REFUSAL_PARAMS",
    "REFUSAL_REQUEST_FORM",
    "REQUEST_CUT",
    "SIZING_REFUSED",
    "Launch",
    "Launcher",
    "Refusal",
    "command_program",
    "context_overflow",
    "context_record",
    "cut_undecided",
    "is_python",
    "launch_context",
    "launched_command",
    "launched_context",
    "launched_counts",
    "option_value_refusal_problem",
    "option_values",
    "parity_of",
    "prompt_counts",
    "prompt_tokens_exact",
    "python_run",
    "read_context",
    "refusal",
    "refused_option_value",
    "request_cut",
    "request_unanswered",
    "schema_problem",
    "skip_launchers",
    "stated_windows",
    "structured_answer_problem",
    "window_explained",
]

# the finish reason of an answer the request's max_tokens cut (OpenAI's, as vLLM and llama.cpp report it)
CUT_FINISH_REASON = "length"


def schema_problem(answer: str, schema: dict[str, Any]) -> str | None:
    """Why ``answer`` is not JSON valid against ``schema`` (where, what was found, what was expected);
    None: it is. jsonschema is imported on first need: it costs a fresh process more than a verdict."""
    import jsonschema  # type: ignore[import-untyped,unused-ignore]

    try:
        # strict JSON, as the ledger reads its own: a duplicate key (which value a client takes depends on
        # its parser) or NaN/Infinity (not JSON at all) is no valid answer
        value = parse_json(answer)
    except LedgerError as ex:
        return f"answer is not JSON: {ex.message}"
    try:
        jsonschema.validate(value, schema)
    except RecursionError:
        return "answer is not JSON: nested too deeply"
    except jsonschema.ValidationError as ex:
        found = json.dumps(ex.instance, ensure_ascii=False, default=str)
        if len(found) > 80:
            found = found[:77] + "..."
        return f"answer does not match the schema at {ex.json_path}: found {found}; {ex.message}"
    except jsonschema.SchemaError as ex:
        return f"the recorded schema is not a JSON schema: {ex.message}"
    return None


def structured_answer_problem(payload: Any) -> str | None:
    """Why a structured-output probe's recorded answer (``text``) is not JSON valid against the schema it
    recorded (``details.schema``); None: it is. A payload without either never passes."""
    text = payload.get("text") if isinstance(payload, dict) else None
    details = payload.get("details") if isinstance(payload, dict) else None
    schema = details.get("schema") if isinstance(details, dict) else None
    if not isinstance(text, str):
        return "records no answer text"
    if not isinstance(schema, dict) or not schema:
        return "records no JSON schema (details.schema) to judge its answer by"
    return schema_problem(text, schema)


def cut_undecided(payload: Any, control_answer: Any) -> bool:
    """Is a completion or structured probe's answer one its own ``max_tokens`` cut while it could still
    have become the right one — no judgement of the engine either way? The answer ended with
    ``finish_reason`` "length"; its ``completion_tokens``, where recorded, reached ``max_tokens`` (an
    answer that stopped short of the limit was not cut by it); and what it said so far is a beginning of a
    right answer: a completion's text, stripped as the control judges it, begins ``control_answer`` ("REA"
    of "READY"; "READY" itself, which may have gone on "… no, I am NOT READY"), a structured answer's text
    is JSON or the beginning of some (only its end is missing). Anything else a cut answer says is the
    engine's answer: "NOT" or "I am not ready" cut at the limit is still a wrong one. The collector's probe
    and the policy's ``e.derived.cut_undecided`` judge it here, one rule; anything missing or mistyped is
    no cut (the probe is judged as any other, and fails closed)."""
    if not isinstance(payload, dict) or payload.get("finish_reason") != CUT_FINISH_REASON:
        return False
    text, limit, made = payload.get("text"), payload.get("max_tokens"), payload.get("completion_tokens")
    if not isinstance(text, str):
        return False
    if made is not None and (type(made) is not int or type(limit) is not int or made < limit):
        return False
    check = payload.get("check")
    if check == "completion":
        return isinstance(control_answer, str) and control_answer.startswith(text.strip())
    if check == "structured":
        return _json_prefix(text)
    return False


def _json_prefix(text: str) -> bool:
    """Is ``text`` JSON, or JSON whose end is missing (``{"status": "REA``)?"""
    try:
        json.loads(text)
    except json.JSONDecodeError as ex:
        if ex.msg.startswith("Unterminated string"):
            return True
        return ex.pos >= len(text.rstrip())
    except RecursionError:
        return False
    return True


# --- requests the engine refused: the campaign's configuration, not the engine's ----------------------------

# Which refusal a request's record shows (``refusal``; the policy's ``e.derived.refusal``): the engine
# refused the collector's credentials (an API key or access rule of the campaign: HTTP 401/403), the
# campaign's context length (vLLM's --max-model-len, llama-server's --ctx-size) cannot hold the request, or
# the engine does not accept the request form the campaign asks ([gates.structured] format), or the engine
# refused an option value the campaign's command gives it (llama-cpp-python's --chat_format: HTTP 500
# "Invalid chat handler: …", ``refused_option_value``). Each is the campaign's configuration: nothing of the
# engine was judged.
Refusal = Literal["access", "context", "request-form", "option-value"]
REFUSAL_ACCESS: Final = "access"
REFUSAL_CONTEXT: Final = "context"
REFUSAL_REQUEST_FORM: Final = "request-form"
REFUSAL_OPTION_VALUE: Final = "option-value"
REFUSALS: tuple[Refusal, ...] = (
    REFUSAL_ACCESS,
    REFUSAL_CONTEXT,
    REFUSAL_REQUEST_FORM,
    REFUSAL_OPTION_VALUE,
)
# the probes that send a chat request (``/v1/chat/completions``): those an ``option-value`` refusal may be of,
# and those whose answer shows the engine took its launch's options (``ledger.policy.acceptance._refusals``)
CHAT_PROBES: Final = ("completion", "structured", "sequential")
# the params ``refusal`` reads (evidence-acceptance's [params]; a policy's CEL reads them only through
# ``e.derived.refusal``: tests/policy/test_fix68_one_refusal.py)
REFUSAL_PARAMS = (
    "refused_http_statuses",
    "context_refused_http_statuses",
    "context_refusal_patterns",
    "request_form_refused_http_statuses",
    "request_form_refusal_patterns",
    "option_value_refused_http_statuses",
    "option_value_refusal_patterns",
)


# --- a probe's request that cannot fit the context length the campaign launched the engine with -------------

# the key of a probe's ``details`` that records the context length its engine was launched with and the size
# of its prompt as the engine counted it (``context_record``; read by ``context_overflow``)
CONTEXT_DETAIL: Final = "context"
# the probes whose record may show their request did not fit the campaign's context (``context_overflow``)
_PROBES_SIZED = ("completion", "structured", "sequential")

# The key of a context record (``context_record``) that says how its ``prompt_tokens`` were counted, and the
# ways a collector counts them (``PROMPT_COUNTS``): each gives the tokens of the prompt the engine feeds its
# model, or fewer — never more — so a count plus the request's max_tokens beyond the context shows the
# request cannot fit it (``context_overflow``; a way not one of these, missing or mistyped, shows nothing):
# * ``COUNTED_USAGE``: the ``usage.prompt_tokens`` of the engine's answer to the same messages with
#   max_tokens 1 (its chat template applied): the prompt's own count;
# * ``COUNTED_MESSAGES``: the engine's tokenizer given the request as the endpoint it went to builds its
#   prompt — vLLM's ``POST /tokenize`` with a chat request's ``messages``, its chat template applied as its
#   chat completions apply it (the generation prompt added, no special tokens beyond the template's — their
#   defaults), or with a completions request's ``prompt`` text and the special tokens its completions add
#   (``add_special_tokens``, default true): the prompt's own count (one way: one endpoint of one program,
#   exact either way — the name is the one records already carry);
# * ``COUNTED_CONTENT``: the engine's tokenizer given each message's content alone, stripped of the white
#   space at its ends (a template may trim it), less the tokens it adds to any text (its count of the empty
#   text: llama-cpp-python's BOS), summed — llama-cpp-python 0.3.36's ``POST /extras/tokenize`` tokenizes a
#   text only, its server applies the chat template inside a completion alone. A lower bound: the template
#   writes each content whole among text of its own (role markers, the generation prompt), which adds more
#   tokens than a token joining a content's first or last characters to the text beside them can save.
# Where the engine answers the sizing request (max_tokens 1), its usage is the count; the tokenizer is asked
# only where it gives none (llama-cpp-python fails it too where the prompt alone overflows its --n_ctx).
PROMPT_COUNTED: Final = "counted"
COUNTED_USAGE: Final = "usage"
COUNTED_MESSAGES: Final = "tokenize-messages"
COUNTED_CONTENT: Final = "tokenize-content"
PROMPT_COUNTS: Final = (COUNTED_USAGE, COUNTED_MESSAGES, COUNTED_CONTENT)
# The engines whose collector can count a prompt by their tokenizer (every way but ``COUNTED_USAGE``, which
# any engine's answer gives): (engine kind, its programs — ``command_program`` — that serve the endpoint):
# vLLM's ``POST /tokenize`` (its CLI, its OpenAI server module), llama-cpp-python's ``POST /extras/tokenize``
# (llama-server has neither: its ``/tokenize`` reads a text, never the messages, and names no count). The
# collector asks only the tokenizer of the program it launched (``prompt_counts``); the policy holds a
# record to the ways of the program its launch's recorded command runs (``launched_counts``): a way that
# program's collector cannot have counted by — or a program not known — shows nothing.
PROMPT_COUNTERS: Final[dict[str, tuple[str, tuple[str, ...]]]] = {
    COUNTED_MESSAGES: ("vllm", ("vllm", "vllm.entrypoints.openai.api_server", "vllm.entrypoints.cli.main")),
    COUNTED_CONTENT: ("llamacpp", ("llama_cpp.server",)),
}


# the ways that give the prompt's own count (``COUNTED_CONTENT`` gives a lower bound): ``prompt_tokens_exact``
_EXACT_COUNTS: Final = (COUNTED_USAGE, COUNTED_MESSAGES)


def prompt_tokens_exact(ctx: Any) -> int | None:
    """The prompt's own count a context record (``context_record``) gives: its ``prompt_tokens`` where
    they were counted in a way that gives it (``COUNTED_USAGE``, ``COUNTED_MESSAGES``); None for a lower
    bound (``COUNTED_CONTENT``: never the engine's own number of the prompt — an engine's log line stating
    its tokens pairs with it as with a prompt not counted), nothing counted, or a record missing, renamed
    or mistyped."""
    tokens = ctx.get("prompt_tokens") if isinstance(ctx, Mapping) else None
    exact = isinstance(ctx, Mapping) and ctx.get(PROMPT_COUNTED) in _EXACT_COUNTS
    return tokens if exact and type(tokens) is int and tokens >= 0 else None


def prompt_counts(kind: str, program: str | None) -> tuple[str, ...]:
    """The ways (``PROMPT_COUNTS``, in its order) a collector counts the prompt of an engine of ``kind``
    running ``program`` (``command_program``: None where it cannot be told): ``COUNTED_USAGE`` always, each
    tokenizer's way where ``PROMPT_COUNTERS`` names that kind and program — spelled as written (another case
    is another program)."""
    counters = {way: PROMPT_COUNTERS.get(way) for way in PROMPT_COUNTS}
    return tuple(way for way, by in counters.items() if by is None or (by[0] == kind and program in by[1]))


def context_record(
    option: str,
    length: int,
    prompt_tokens: int | None,
    sizing: tuple[int, str] | None = None,
    counted: str = COUNTED_USAGE,
) -> dict[str, Any]:
    """What a probe records in ``details.context`` (``CONTEXT_DETAIL``) — a harness in its request's
    ``context`` — of the context its request had to fit: the engine's context option as the campaign's
    command gives it (``--n_ctx``, ``--ctx-size``, ``--max-model-len``), its value, and the prompt's tokens
    as the engine counted them (its answer's ``usage.prompt_tokens`` for the same messages with max_tokens
    1; None where it gave none) with how they were counted (``PROMPT_COUNTED``: ``counted``, one of
    ``PROMPT_COUNTS``; None where nothing was counted). ``sizing``: where the engine answered that sizing
    request with an error status instead, that status and its error (``sizing``: a prompt the engine
    refuses with one token to generate — llama-cpp-python's 400 "maximum context length is N tokens" — is
    read by ``refusal``)."""
    out: dict[str, Any] = {"option": option, "length": length, "prompt_tokens": prompt_tokens}
    out[PROMPT_COUNTED] = counted if prompt_tokens is not None else None
    if sizing is not None:
        out[SIZING_REFUSED] = {"http_status": sizing[0], "error": sizing[1]}
    return out


# the key of a context record (``context_record``) holding the engine's error answer to the sizing request
SIZING_REFUSED: Final = "sizing"


# The option that sets the context length an engine serves requests in (prompt and generated tokens
# together), in each program's own spelling, keyed by the program that reads it (the collector's
# ``_model_readers``; vLLM and SGLang by their kind): (whole option, shortest prefix its parser takes —
# llama-server and vLLM take whole names only). llama-server's -c / --ctx-size is the whole context (each
# slot gets its share: a request beyond its slot is refused with a 400 the policy knows); llama-cpp-python's
# --n_ctx (llama.cpp may round it up, but its server's own arrays keep the value given: a request beyond it
# fails with HTTP 500); vLLM's --max-model-len; SGLang's --context-length. The collector reads a campaign's
# command by it (``collectors.campaign.context_length``), the policy a launch's recorded command
# (``launched_context``).
CONTEXT_OPTIONS: Final[dict[str, tuple[tuple[str, str], ...]]] = {
    "llama-server": (("--ctx-size", "--ctx-size"), ("-c", "-c")),
    "llama_cpp.server": (("--n_ctx", "--n_c"),),
    "vllm": (("--max-model-len", "--max-model-len"), ("--max_model_len", "--max_model_len")),
    "sglang": (("--context-length", "--context-length"),),
}


# The variable that sets the same context length through the engine's environment, keyed by the engine
# kind whose programs read it (a launch records its ``engine`` kind) and then by the program (the keys of
# ``CONTEXT_OPTIONS``): llama-server's LLAMA_ARG_CTX_SIZE (common/arg.cpp, read as written), llama-cpp-
# python's N_CTX (its server's pydantic-settings ``ModelSettings.n_ctx``, read in any case:
# ``_ANY_CASE_PROGRAMS``). vLLM and SGLang read no variable for it (vLLM's envs.py has none; its
# VLLM_ALLOW_LONG_MAX_MODEL_LEN only lets --max-model-len pass the model's own length). Both llama.cpp
# programs let the option win over the variable (llama-server applies its variables before its arguments;
# llama-cpp-python builds its settings from the arguments given, which pydantic-settings puts before the
# environment), so a variable counts only where no context option is written (``read_context``).
CONTEXT_ENV: Final[dict[str, dict[str, tuple[str, ...]]]] = {
    "llamacpp": {"llama-server": ("LLAMA_ARG_CTX_SIZE",), "llama_cpp.server": ("N_CTX",)},
}
# the programs that read their variables in any case (pydantic-settings' default ``case_sensitive=False``)
_ANY_CASE_PROGRAMS = ("llama_cpp.server",)
_ENV_OF_PROGRAM: Final = {p: names for programs in CONTEXT_ENV.values() for p, names in programs.items()}


def _is_context_option(readers: Sequence[str], name: str) -> bool:
    spellings = dict.fromkeys(s for r in readers for s in CONTEXT_OPTIONS.get(r, ()))
    return any(name.startswith(shortest) and whole.startswith(name) for whole, shortest in spellings)


def _length(option: str, given: str) -> tuple[str, int] | None:
    """(option, length) for a context value written as a whole number above 0; None for any other."""
    return (option, int(given)) if re.fullmatch(r"[0-9]{1,9}", given) and int(given) > 0 else None


def _env_context(readers: Sequence[str], env: Mapping[str, str]) -> tuple[str, int] | None:
    """The context length the variables of ``env`` that the programs ``readers`` read (``CONTEXT_ENV``,
    each in its program's case rule) give: (variable as written, length). None where none is set, where
    two set differ (``N_CTX`` and ``n_ctx``: which one pydantic-settings takes depends on the order of the
    environment; two programs' variables: which the engine reads is the program's), or where the value is
    no whole number above 0 (0: the model's own; a text, a sign: the engine refuses it or reads it its
    own way) — the context is then not known."""
    found: dict[str, str] = {}
    for r in readers:
        for name in _ENV_OF_PROGRAM.get(r, ()):
            any_case = r in _ANY_CASE_PROGRAMS
            for key, value in env.items():
                if (key.upper() == name) if any_case else (key == name):
                    found[key] = value
    if not found or len(set(found.values())) != 1:
        return None
    key = sorted(found)[0]
    return _length(key, found[key])


def read_context(
    readers: Sequence[str],
    args: Sequence[str],
    fill: Callable[[str], str] = str,
    env: Mapping[str, str] | None = None,
    env_readers: Sequence[str] | None = None,
) -> tuple[str, int] | None:
    """The context length an engine's arguments ``args`` and environment ``env`` give it. The last context
    option of the programs ``readers`` (``CONTEXT_OPTIONS``; the ``=`` form and the prefixes its parser
    takes), as written, and its value (``fill``: as launched), a whole number above 0; where no option is
    written, the variable of the programs ``env_readers`` (default ``readers``) set in ``env``
    (``CONTEXT_ENV``, ``_env_context``): the option wins, as in both programs that read one. None where
    neither gives one, or where the last option gives none (the next item is an option) or a value read
    otherwise (0, llama-server's "the model's own"; vLLM's -1, "auto", "1k") — an option so written still
    wins over the variable — or the variables give none: the context is then not known, and nothing is
    judged by it. ``env`` None: the environment is not known (only an option gives a context)."""
    last: tuple[str, str] | None = None
    for i, item in enumerate(args):
        name, eq, value = item.partition("=")
        if not _is_context_option(readers, name):
            continue
        if not eq:
            value = args[i + 1] if i + 1 < len(args) and not args[i + 1].startswith("-") else ""
        last = (name, fill(value) if value else "")
    if last is not None:
        return _length(*last)
    if env is None:
        return None
    return _env_context(readers if env_readers is None else env_readers, env)


# --- which program a launch's command runs: the context it gives is that program's --------------------------

# the engines' own programs (basename): llama.cpp's server, vLLM's CLI (``vllm serve``)
ENGINE_PROGRAMS: Final = ("llama-server", "vllm")
# a Python interpreter's own options that take the next item as their value (``python -W error -m …``)
PYTHON_VALUE_OPTIONS: Final = ("-W", "-X", "--check-hash-based-pycs")
# CPython's short options that take no value (they may be joined: ``-Im``, ``-uBm``)
PYTHON_FLAGS: Final = "bBdEhiIOPqsSuvVx?"


def is_python(program: str) -> bool:
    """Is ``program`` a Python interpreter: the collector's ``{python}`` or a program named ``python…``."""
    return program == "{python}" or re.fullmatch(r"python[0-9.]*", program.rsplit("/", 1)[-1]) is not None


def python_run(argv: Sequence[str], start: int) -> tuple[int, str | None]:
    """For a Python interpreter at ``argv[start]``: where its program's own arguments begin, and the module
    it runs (``-m MODULE``; None for ``-c CODE``, a script or stdin). CPython's short options may be joined
    (``-Im llama_cpp.server`` is ``-I -m llama_cpp.server``; ``-mllama_cpp.server``, ``-IWignore``): a run
    of flags that take no value, ended by one that takes the rest of the item or the next item."""
    i = start + 1
    while i < len(argv):
        item = argv[i]
        if not item.startswith("-") or item == "-":
            return i + 1, None  # a script (or stdin)
        if item.startswith("--"):
            i += 2 if item in PYTHON_VALUE_OPTIONS else 1
            continue
        for k, flag in enumerate(item[1:], start=1):
            rest = item[k + 1 :]
            if flag in "mc":  # the rest of the item, or the next item, is the module or the code
                value = rest if rest else (argv[i + 1] if i + 1 < len(argv) else "")
                end = i + 1 if rest else i + 2
                return end, (value if flag == "m" else None)
            if flag in "WX":  # takes a value: the rest of the item, or the next item
                i += 1 if rest else 2
                break
            if flag not in PYTHON_FLAGS:
                return i + 1, None  # an option the check does not know: no module is read
        else:
            i += 1
    return i, None


def command_program(argv: Sequence[str]) -> tuple[str | None, int]:
    """The program that reads an engine's arguments, for ``argv`` whose first item is the program (the
    collector and the policy pass a command past the launchers in front of it, ``skip_launchers``): an
    engine's own program (``ENGINE_PROGRAMS``, by basename) or the module a
    Python interpreter runs (``-m MODULE``), and where the program's own arguments begin (past the
    interpreter's options and its ``-m MODULE``). None for a script, code, a launcher or a program not
    known: which options and variables it reads cannot be told."""
    if not argv:
        return None, 0
    name = argv[0].rsplit("/", 1)[-1]
    if name in ENGINE_PROGRAMS:
        return name, 1
    if not is_python(argv[0]):
        return None, 1
    start, module = python_run(argv, 0)
    return module, start


# --- the launchers in front of an engine's program: where the program stands, what ``env`` gives it ---------


@dataclass(frozen=True)
class Launcher:
    """How one program that runs another (``taskset -c 0-3 PROGRAM …``) takes its own arguments, as its
    getopt parser reads them (options up to the first item that is none; long options also as any
    unambiguous prefix): short options that take a value (``-N 0`` / ``-N0``) and that take none, long
    options likewise (``--cpunodebind=0`` / ``--cpunodebind 0``), the options that make it run no program
    or run it elsewhere than the reader judges (refused), and how many plain items it takes before the
    program (taskset's CPU mask, chrt's priority)."""

    short_value: str = ""
    short_flag: str = ""
    long_value: tuple[str, ...] = ()
    long_flag: tuple[str, ...] = ()
    refused: tuple[str, ...] = ()
    operands: int = 0


# The launchers a campaign may put in front of the engine (checked against util-linux, coreutils and
# numactl): what follows them, past their own options, is the engine's command. ``env`` also takes
# NAME=VALUE items, which are the engine's environment. The one reader of them (``skip_launchers``): the
# collector's checks of a campaign's command (any other first program that is neither a Python
# interpreter nor a known engine program, ``ENGINE_PROGRAMS``, is refused at load: ``uv run``, ``sh -c``, a
# wrapper script — what they start is not known before launch; kind generic keeps its own rule, its first
# item is the program), and the policy's reading of a launch's recorded command (``launched_context``).
LAUNCHERS: Final[dict[str, Launcher]] = {
    "env": Launcher(
        short_flag="i0v",
        short_value="u",
        long_flag=(
            "ignore-environment",
            "null",
            "debug",
            "list-signal-handling",
            "default-signal",
            "ignore-signal",
            "block-signal",
        ),
        long_value=("unset",),
        # -C starts the engine in another folder (relative paths would name other files); -S splits a
        # text into the command, which is then not read here
        refused=("-C", "--chdir", "-S", "--split-string"),
    ),
    "taskset": Launcher(
        short_flag="ac", long_flag=("all-tasks", "cpu-list"), refused=("-p", "--pid"), operands=1
    ),
    "numactl": Launcher(
        short_value="NmCipwP",
        short_flag="lab",
        long_value=(
            "cpunodebind",
            "membind",
            "physcpubind",
            "interleave",
            "preferred",
            "weighted-interleave",
            "preferred-many",
        ),
        long_flag=("localalloc", "all", "balancing"),
        refused=("-s", "--show", "-H", "--hardware"),
    ),
    "nice": Launcher(short_value="n", long_value=("adjustment",)),
    "chrt": Launcher(
        short_value="TPD",
        short_flag="bdfioRrav",
        long_value=("sched-runtime", "sched-period", "sched-deadline"),
        long_flag=(
            "batch",
            "deadline",
            "fifo",
            "idle",
            "other",
            "rr",
            "reset-on-fork",
            "all-tasks",
            "verbose",
        ),
        refused=("-p", "--pid", "-m", "--max"),
        operands=1,
    ),
    "stdbuf": Launcher(short_value="ioe", long_value=("input", "output", "error")),
    "ionice": Launcher(
        short_value="cn",
        short_flag="t",
        long_value=("class", "classdata"),
        long_flag=("ignore",),
        refused=("-p", "--pid", "-P", "--pgid", "-u", "--uid"),
    ),
    "nohup": Launcher(),
}


@dataclass(frozen=True)
class Launch:
    """What is read in front of the engine (``skip_launchers``): where the program that is not a launcher
    stands, the environment an ``env`` launcher gives it, and why the launchers cannot be read (None if
    they can)."""

    program: int
    env: dict[str, str]
    problem: str | None
    unset: frozenset[str] = frozenset()  # names ``env -u`` / ``--unset`` removes (no later NAME=VALUE sets)
    cleared: bool = False  # ``env -i`` / ``-`` / ``--ignore-environment``: the engine inherits nothing

    def engine_env(self, base: Mapping[str, str], assigned: Mapping[str, str]) -> dict[str, str]:
        """The environment the engine gets when the launchers start it under ``base``: ``base`` less what
        an ``env`` launcher unsets (all of it where one clears it), then the launchers' NAME=VALUE items
        (``assigned``: this launch's ``env``, as filled by the caller)."""
        kept = {} if self.cleared else {k: v for k, v in base.items() if k not in self.unset}
        return {**kept, **assigned}


def _launcher_options(
    name: str, how: Launcher, argv: Sequence[str], i: int, read: list[tuple[str, str | None]] | None = None
) -> tuple[int, str | None]:
    """Past the options of the launcher ``name`` whose first argument is ``argv[i]``: the index of the
    first item that is no option of it, or a problem. Each option read is added to ``read`` (when given)
    under its whole name (``-u``, ``--unset``; ``env -`` as ``-i``) with its value (None for a flag)."""
    seen: list[tuple[str, str | None]] = [] if read is None else read
    while i < len(argv):
        item = argv[i]
        if item == "--":
            return i + 1, None
        if item.startswith("--"):
            opt, eq, value = item[2:].partition("=")
            known = [o for o in (*how.long_value, *how.long_flag) if o.startswith(opt)] if opt else []
            refused = [r for r in how.refused if r.startswith("--") and r[2:].startswith(opt)] if opt else []
            if opt in how.long_value or opt in how.long_flag:
                known = [opt]
            if refused and (opt == refused[0][2:] or not known):
                return i, f"{name} {item} (it runs no engine, or runs it where the check does not look)"
            if len(known) != 1:
                return i, f"{name} option {item!r} is not one the collector knows"
            takes = known[0] in how.long_value
            given = value if eq else (argv[i + 1] if i + 1 < len(argv) else None)
            seen.append((f"--{known[0]}", given if takes else None))
            i += 2 if takes and not eq else 1
            continue
        if item == "-" and name == "env":  # env - : the same as -i
            seen.append(("-i", None))
            i += 1
            continue
        if not item.startswith("-") or item == "-":
            return i, None
        if name == "nice" and re.fullmatch(r"-[0-9]+", item):  # nice's old form: -10
            i += 1
            continue
        j = 1
        step = 1
        while j < len(item):
            c = item[j]
            if f"-{c}" in how.refused:
                return i, f"{name} -{c} (it runs no engine, or runs it where the check does not look)"
            if c in how.short_value:
                step = 1 if j + 1 < len(item) else 2  # -N0, or -N 0
                rest = item[j + 1 :] if j + 1 < len(item) else (argv[i + 1] if i + 1 < len(argv) else None)
                seen.append((f"-{c}", rest))
                break
            if c not in how.short_flag:
                return i, f"{name} option {item!r} is not one the collector knows"
            seen.append((f"-{c}", None))
            j += 1
        i += step
    return i, None


# what ``env``'s options do to the environment it passes on (coreutils: every -u, and a clearing -i, take
# effect before its NAME=VALUE items)
_ENV_CLEARS = ("-i", "--ignore-environment")
_ENV_UNSETS = ("-u", "--unset")


def skip_launchers(argv: Sequence[str], name: Callable[[str], str] = str) -> Launch:
    """Where the engine's program stands in ``argv`` past the launchers in front of it (``LAUNCHERS``, by
    the basename of ``name`` of the item: the collector fills its placeholders there, a recorded command
    is filled already), and what an ``env`` launcher leaves the engine: its NAME=VALUE items (as written),
    the names it unsets, whether it clears the environment (``Launch.engine_env``); launchers in a row
    each act on what the one before passes on. A launcher option not known or one that runs no engine
    here, or launchers that start no program: ``Launch.problem``."""
    i = 0
    env: dict[str, str] = {}
    unset: set[str] = set()
    cleared = False

    def launch(at: int, problem: str | None) -> Launch:
        return Launch(at, env, problem, frozenset(unset), cleared)

    while i < len(argv):
        launcher = name(argv[i]).rsplit("/", 1)[-1]
        how = LAUNCHERS.get(launcher)
        if how is None:
            return launch(i, None)
        read: list[tuple[str, str | None]] = []
        i, problem = _launcher_options(launcher, how, argv, i + 1, read)
        if problem is not None:
            return launch(i, problem)
        if launcher == "env":
            if any(option in _ENV_CLEARS for option, _ in read):
                cleared = True
                env.clear()
                unset.clear()
            for option, value in read:
                if option in _ENV_UNSETS and value is not None:
                    env.pop(value, None)
                    unset.add(value)
            while i < len(argv) and "=" in argv[i] and not argv[i].startswith("="):
                key, _, value = argv[i].partition("=")
                env[key] = value
                unset.discard(key)
                i += 1
        i += how.operands
    return launch(i, f"{' '.join(argv[:i])!r} starts no program")


def _context_readers(kind: str, program: str | None) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The programs whose context options and whose context variables count for an engine of ``kind``
    running ``program`` (``command_program``). A kind whose programs read their own spellings
    (``CONTEXT_ENV``: llamacpp): the program's own where it runs one of them — its options and variables —,
    else every one of their options and no variable (a variable counts only where the program that reads it
    is known to run: llama-cpp-python ignores llama-server's LLAMA_ARG_CTX_SIZE); any other kind: its own
    options (``CONTEXT_OPTIONS``; none for generic) and no variable."""
    programs = tuple(CONTEXT_ENV.get(kind, {}))
    if not programs:
        return (kind,), ()
    if program in programs:
        return (program,), (program,)
    return programs, ()


# The context length a program serves where the command gives no context option and the environment no
# context variable of it, keyed like ``CONTEXT_OPTIONS`` by the program, as (what gave it, length):
# llama-cpp-python's server builds its settings from its arguments and its environment, and what neither
# gives is its ``ModelSettings.n_ctx`` default, 2048 (llama-cpp-python 0.3.36's llama_cpp/server/settings.py;
# its ``Llama`` class's own default, 512, is not the server's). llama-server has none here: its default is
# the model's own training context in newer builds and 4096 in older ones, and a launch's record does not
# say which build ran. vLLM's and SGLang's default is the model's own (its config.json): not known from the
# record either.
DEFAULT_CONTEXT: Final[dict[str, tuple[str, int]]] = {"llama_cpp.server": ("--n_ctx (default)", 2048)}
# how a program with a default reads its settings from a file instead, where its defaults are then the
# file's: llama-cpp-python's ``--config_file`` (argparse: any prefix it takes, ``--config``) and its
# ``CONFIG_FILE`` variable, read as written (``os.environ.get``, winning over the option)
_SETTINGS_FILE: Final[dict[str, tuple[str, str]]] = {"llama_cpp.server": ("--config_file", "CONFIG_FILE")}


def _default_context(program: str, args: Sequence[str], env: Mapping[str, str]) -> tuple[str, int] | None:
    """The context ``program`` serves by its own default (``DEFAULT_CONTEXT``) where its arguments ``args``
    write no context option of it (as its parser reads them: a prefix it takes; a value read otherwise or
    none still counts as written) and ``env`` (the whole environment the program gets) sets no context
    variable of it (in its case rule; a value that is no length still counts as set), and neither names a
    settings file (``_SETTINGS_FILE``: an option its parser takes for it, any prefix longer than ``--``;
    the variable, set to anything). None otherwise, or for a program without a default."""
    default = DEFAULT_CONTEXT.get(program)
    option, variable = _SETTINGS_FILE.get(program, ("", ""))
    if default is None or not option:
        return None
    for item in args:
        name = item.partition("=")[0]
        if _is_context_option((program,), name) or (len(name) > 2 and option.startswith(name)):
            return None
    names = _ENV_OF_PROGRAM.get(program, ())
    any_case = program in _ANY_CASE_PROGRAMS
    if variable in env or any(((k.upper() if any_case else k) in names) for k in env):
        return None
    return default


def launch_context(
    kind: str,
    argv: Sequence[str],
    fill: Callable[[str], str] = str,
    env: Mapping[str, str] | None = None,
    *,
    default: bool = False,
) -> tuple[str, int] | None:
    """The context length an engine of ``kind`` launched by ``argv`` (its first item the program,
    ``command_program``: past the launchers, ``skip_launchers``) in the environment ``env`` gets:
    ``read_context`` of the program's own arguments by the options and variables of the program it runs
    (``_context_readers``). The one reader of the collector (``collectors.campaign.context_length``,
    ``fill``: placeholders as launched) and the policy (``launched_context``). ``env`` None: not known (only
    an option gives a context). ``default``: where neither an option nor a variable is given, the
    program's own default (``_default_context``), only where the program is known to run, as one of
    ``kind``'s (``CONTEXT_ENV``), and ``env`` is known; the collector, which sizes its requests by what the
    campaign gives, asks for none."""
    program, start = command_program(argv)
    options, variables = _context_readers(kind, program)
    found = read_context(options, argv[start:], fill, env=env, env_readers=variables)
    if found is None and default and env is not None and program is not None and variables == (program,):
        return _default_context(program, argv[start:], env)
    return found


def launched_context(launch: Any) -> tuple[str, int] | None:
    """The context length an ``engine.launch`` entry's payload records its engine was launched with
    (``launch_context``, the collector's reader), read past the launchers in front of the engine's program
    (``skip_launchers``, the collector's reader of them: ``taskset``, ``nice``, ``numactl``, ``env`` …):
    from its recorded ``command`` (the argv as launched, placeholders filled) by the options of the program
    it runs; where the command writes no context option, from the environment the engine got by the
    variables that program reads (``CONTEXT_ENV``); where neither gives one, the program's own default
    (``DEFAULT_CONTEXT``: llama-cpp-python's server, no settings file named).

    The environment the engine got is the recorded ``env`` with an ``env`` launcher's settings applied
    (``Launch.engine_env``: what it unsets, or all of it where it clears it, then its NAME=VALUE items, as
    the recorded command gives them). The recorded ``env`` is what the engine inherited: the collector
    starts the engine under ``launch_env`` (the allow-listed variables of its own environment, then the
    campaign's ``env``) and records ``relevant_env`` of its own environment and the campaign's ``env``
    (``collectors.launch.EngineRun``); the engine-relevant ones are recorded, the rest of the allow-list
    (PATH, HOME, LANG, LC_* …) holds no variable a program here reads for its context or settings file.
    An ``env`` launcher's items are not in the recorded ``env``: they are in the recorded command, and are
    applied from it here as the collector applies them. A value the record redacted is not the engine's:
    it gives no length (not known).

    None — fail closed: nothing is excused by it — where the payload is not a mapping, its ``engine`` is
    no text, its ``command`` is not a list of texts, or its launchers cannot be read (``Launch.problem``: a
    launcher option the reader does not know, one that runs no engine or runs it elsewhere, launchers that
    start no program); where the last context option gives a value read otherwise (0, a text); and, where
    no option gives the context, where the recorded ``env`` is missing or not a mapping of texts (the
    environment the engine got cannot be known from the record), where a variable gives a value read
    otherwise, or where the program cannot be told (a script, code, a program not known — ``sudo`` or
    ``sh -c`` in front of it hides it: the options of the kind's programs are read, no variable, no
    default)."""
    read = _launch_read(launch)
    if read is None:
        return None
    kind, command, front = read
    env = launch.get("env")
    engine_env: dict[str, str] | None = None
    if isinstance(env, Mapping) and all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        engine_env = front.engine_env(env, front.env)
    return launch_context(kind, command[front.program :], env=engine_env, default=True)


def _launch_read(launch: Any) -> tuple[str, list[str], Launch] | None:
    """(engine kind, recorded command, its launchers read: ``skip_launchers``) of an ``engine.launch``
    entry's payload; None where its ``engine`` is no text, its ``command`` no list of texts, or its
    launchers cannot be read (``launched_context``'s reading, which ``launched_counts`` shares)."""
    if not isinstance(launch, Mapping) or not isinstance(launch.get("engine"), str):
        return None
    command = launch.get("command")
    if not isinstance(command, list) or not all(isinstance(item, str) for item in command):
        return None
    front = skip_launchers(command)
    return None if front.problem is not None else (launch["engine"], command, front)


def launched_counts(launch: Any) -> tuple[str, ...]:
    """The ways the prompt of a request to the engine an ``engine.launch`` entry's payload records can have
    been counted (``prompt_counts``): those of its ``engine`` kind and of the program its recorded command
    runs past the launchers (``command_program``, read as ``launched_context`` reads the launch). None of
    them — nothing counted shows anything — where the launch cannot be read (``launched_context``'s cases:
    no ``engine`` text, a ``command`` missing or mistyped, launchers not read)."""
    read = _launch_read(launch)
    if read is None:
        return ()
    kind, command, front = read
    return prompt_counts(kind, command_program(command[front.program :])[0])


# --- the values a launch's recorded command gives an engine's options ---------------------------------------


def option_values(args: Sequence[str], options: Sequence[str]) -> tuple[str, ...]:
    """The value ``args`` (an engine's arguments) give each option of ``options`` as the engine reads it:
    the last time the option is written, whole (``--chat_format X`` or ``--chat_format=X``), its value — one
    per option written, in the order of ``options``. An option written last with no value after it gives
    none. A prefix argparse would take (``--chat_f``) is not read: its value is then not known (fail closed:
    nothing is excused by it)."""
    out: list[str] = []
    for option in options:
        last: str | None = None
        for i, item in enumerate(args):
            name, eq, value = item.partition("=")
            if name != option:
                continue
            last = value if eq else (args[i + 1] if i + 1 < len(args) else None)
        if last is not None:
            out.append(last)
    return tuple(out)


def launched_command(launch: Any) -> tuple[str, ...] | None:
    """The argv an ``engine.launch`` entry's payload records its engine was launched with (its ``command``:
    placeholders filled, secrets redacted), the one reader of it for the collector (which passes the command
    it launched, as it records it) and the policy (``ledger.policy.acceptance._refusals``). None where the
    payload is not a mapping or its ``command`` is not a non-empty list of texts: not known."""
    command = launch.get("command") if isinstance(launch, Mapping) else None
    if not isinstance(command, list) or not command or not all(isinstance(i, str) for i in command):
        return None
    return tuple(command)


# --- the context window an engine's refusal states ------------------------------------------------------

# How the engines' refusals state the context window they serve requests in (a group ``window``): vLLM's
# and llama-cpp-python's 400 "This model's maximum context length is N tokens", llama-server's 400
# "request (T tokens) exceeds the available context size (N tokens)" (older builds state no N), and
# llama-cpp-python's "Requested tokens (T) exceed context window of N" (its streamed overflow)
_STATED_WINDOW = (
    re.compile(r"maximum context length is (?P<window>[0-9]{1,9}) tokens"),
    re.compile(r"available context size \((?P<window>[0-9]{1,9}) tokens\)"),
    re.compile(r"exceed context window of (?P<window>[0-9]{1,9})"),
)
# llama.cpp pads the context it is given up to a multiple of this (its llama_context: --n_ctx 100 serves
# 256, 300 serves 512, 513 serves 768 — llama-cpp-python 0.3.36; older builds pad less), and states the
# padded window in its refusals; vLLM states its --max-model-len as given (``window_explained``)
CONTEXT_PADDING: Final = 256


def stated_windows(error: str) -> tuple[int, ...]:
    """Every context window ``error`` (an engine's refusal) states (``_STATED_WINDOW``), in order; none
    where it states none."""
    return tuple(int(m.group("window")) for p in _STATED_WINDOW for m in p.finditer(error))


def window_explained(window: int, length: int) -> bool:
    """Is a window an engine states it serves what a launch's context ``length`` gives it, or what the
    engine derives from it: ``length`` itself (vLLM's --max-model-len; a larger one than the model's own is
    refused at start-up, not served) up to ``length`` padded to ``CONTEXT_PADDING`` (llama.cpp's). A smaller
    window (the engine served less than launched — a model's own length, a slot's share) or a larger one is
    not the launch's: a refusal stating it is no refusal of the campaign's context."""
    padded = -(-length // CONTEXT_PADDING) * CONTEXT_PADDING
    return length <= window <= padded


def _windows_explained(error: Any, length: int | None) -> bool:
    """Does every window ``error`` states (``stated_windows``) fit the context ``length``
    (``window_explained``)? True where it states none or the length is not known (nothing to hold it
    to); an error that is no text states none."""
    if not isinstance(error, str) or length is None:
        return True
    return all(window_explained(w, length) for w in stated_windows(error))


def _whole(value: Any, least: int) -> int | None:
    return value if type(value) is int and value >= least else None


def context_overflow(
    payload: Any, counts: Collection[str] = PROMPT_COUNTS
) -> tuple[str, int, int, int] | None:
    """(option, context length, prompt tokens, max_tokens) where a probe's record shows its request cannot
    fit the context length the campaign launched the engine with: its prompt's tokens (as the engine counted
    them, ``PROMPT_COUNTS``: the prompt's own count, or a lower bound of it) plus its own ``max_tokens``
    exceed it (vLLM's rule: it refuses such a request with HTTP 400; an engine that takes it may fail it —
    llama-cpp-python 0.3.36 answers HTTP 500 "could not broadcast input array" where its --n_ctx is below
    the context llama.cpp rounded it up to). The campaign asked a request its own context cannot hold: its
    configuration, not the engine's. None where the record does not show that: ``details.context`` missing
    or not ``context_record``'s shape, a value that is no whole number (a boolean, a text, a fraction; a
    length below 1, tokens below 0, max_tokens below 1), tokens counted in a way not known
    (``PROMPT_COUNTED`` missing, mistyped or not one of ``PROMPT_COUNTS``: a count that may exceed the
    prompt's shows nothing) or not one of ``counts`` — the ways the engine the request went to can be
    counted by (``prompt_counts``; the policy passes its launch's, ``launched_counts``: a tokenizer the
    launched program does not serve counted nothing) —, ``COUNTED_USAGE`` beside a sizing refusal
    (``SIZING_REFUSED``: usage is read from the engine's 2xx answer to the sizing request, its refusal from
    an error status — one answer never gives both), a sizing refusal that is not one (no mapping, its
    ``http_status`` no whole number from 400), or a request that fits (fail closed: the failure is judged
    as any other)."""
    if not isinstance(payload, Mapping):
        return None
    details = payload.get("details")
    ctx = details.get(CONTEXT_DETAIL) if isinstance(details, Mapping) else None
    if not isinstance(ctx, Mapping):
        return None
    option = ctx.get("option")
    length, prompt = _whole(ctx.get("length"), 1), _whole(ctx.get("prompt_tokens"), 0)
    asked = _whole(payload.get("max_tokens"), 1)
    if not isinstance(option, str) or not option or length is None or prompt is None or asked is None:
        return None
    counted = ctx.get(PROMPT_COUNTED)
    if not isinstance(counted, str) or counted not in PROMPT_COUNTS or counted not in counts:
        return None
    if SIZING_REFUSED in ctx:
        sizing = ctx[SIZING_REFUSED]
        status = sizing.get("http_status") if isinstance(sizing, Mapping) else None
        if counted == COUNTED_USAGE or _whole(status, 400) is None:
            return None
    return (option, length, prompt, asked) if prompt + asked > length else None


def _context_of(payload: Mapping[str, Any]) -> Mapping[str, Any] | None:
    details = payload.get("details")
    ctx = details.get(CONTEXT_DETAIL) if isinstance(details, Mapping) else None
    return ctx if isinstance(ctx, Mapping) else None


def _recorded_context(payload: Mapping[str, Any]) -> tuple[str, int] | None:
    """(option, length) the request's context record names; None where it names none, or mistyped."""
    ctx = _context_of(payload)
    option, length = (ctx.get("option"), _whole(ctx.get("length"), 1)) if ctx is not None else (None, None)
    return (option, length) if isinstance(option, str) and option and length is not None else None


def _sizing_refused(
    payload: Mapping[str, Any], params: Mapping[str, Any], counts: Collection[str] = PROMPT_COUNTS
) -> tuple[str, int] | None:
    """(option, context length) where a request's context record (``context_record``) shows the engine
    refused the sizing request itself — the same prompt with max_tokens 1 — for the context length: a status
    in ``params.context_refused_http_statuses`` whose error matches ``params.context_refusal_patterns``
    (the engine's own word that the prompt alone does not fit), stating no window, or one the record's
    context length gives (``window_explained``: an engine that says it serves another window than the one
    the request was sized for refused it for its own context, not the campaign's). None otherwise, or for a
    record missing, renamed or mistyped (fail closed), or one no collector of the engine writes: its prompt
    counted by ``COUNTED_USAGE`` (read from a 2xx answer to the sizing request: never beside its refusal)
    or in a way not one of ``counts`` (``context_overflow``'s; nothing counted — ``PROMPT_COUNTED`` None —
    is the record of a sizing refused with no tokenizer to count by)."""
    ctx = _context_of(payload)
    sized = ctx.get(SIZING_REFUSED) if ctx is not None else None
    if ctx is None or not isinstance(sized, Mapping):
        return None
    counted = ctx.get(PROMPT_COUNTED)  # None: nothing counted
    way = counted if isinstance(counted, str) and counted != COUNTED_USAGE else ""
    if counted is not None and way not in counts:
        return None
    option, length = ctx.get("option"), _whole(ctx.get("length"), 1)
    status, error = sized.get("http_status"), sized.get("error")
    if not isinstance(option, str) or not option or length is None or type(status) is not int:
        return None
    if not isinstance(error, str) or not _listed(status, params.get("context_refused_http_statuses")):
        return None
    if not _windows_explained(error, length):
        return None
    return (option, length) if _matches(error, params.get("context_refusal_patterns")) else None


# the ``check`` a harness (benchmark, semantic) gives ``refusal`` for one request it sent, with ``count`` (the
# run's requests the engine answered before this one) and ``prompt_count`` (those of them that asked the same
# prompt, by corpus id): the harness passes what it saw, ``refusal`` judges it
HARNESS_REQUEST: Final = "harness"


def _listed(status: int, statuses: Any) -> bool:
    return isinstance(statuses, list) and any(type(s) is int and s == status for s in statuses)


def _matches(error: str, patterns: Any) -> bool:
    """Does ``error`` match one of ``patterns`` (regular expressions, searched as CEL's ``matches``)? A
    param that is no list of texts, or a pattern that does not compile, matches nothing."""
    if not isinstance(patterns, list):
        return False
    for p in patterns:
        if not isinstance(p, str):
            continue
        try:
            if re.search(p, error) is not None:
                return True
        except re.error:
            continue
    return False


# the named group of an ``option_value_refusal_patterns`` pattern that holds the value the engine refused
OPTION_VALUE_GROUP: Final = "value"
# the optional named group that holds the values the engine's error says it accepts, as the engine prints
# them (a Python list: llama-cpp-python's "(valid formats: ['llama-2', 'chatml', …])")
OPTION_VALID_GROUP: Final = "valid"
# one item of such a list as Python prints it (a quoted text), and the separator between two
_LISTED_ITEM = re.compile(r"'(?:[^'\\\n]|\\.)*'|\"(?:[^\"\\\n]|\\.)*\"")


def _listed_values(text: str) -> tuple[tuple[str, ...], bool] | None:
    """The values an engine's error lists (``OPTION_VALID_GROUP``), read as the engine prints them: a Python
    list of texts (``ast.literal_eval``, which evaluates nothing; its ``repr`` the text) — ``(items,
    False)`` — or that list cut where the collector's record of the error ends (its probe keeps the first
    300 characters of an error: llama-cpp-python's list of 27 formats is cut) — ``(its whole items,
    True)``. None where it is no such list (a text, numbers, an item not followed by ``, `` or the end, not
    as Python prints it): malformed."""
    if not text.startswith("["):
        return None
    if text.endswith("]"):
        try:
            items = ast.literal_eval(text)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            return None
        if not isinstance(items, list) or not all(isinstance(i, str) for i in items) or repr(items) != text:
            return None  # no list of texts, or not as Python prints one (``['a' 'b']`` joins two)
        return tuple(items), False
    whole: list[str] = []
    at = 1
    while (found := _LISTED_ITEM.match(text, at)) is not None:
        item = ast.literal_eval(found.group())
        if repr(item) != found.group():
            return None  # not as Python prints it
        whole.append(item)
        at = found.end()
        if text[at:] in ("", ","):
            return tuple(whole), True  # cut right after an item
        if not text.startswith(", ", at):
            return None  # an item not followed by the next: no list
        at += 2
    rest = text[at:]
    if rest and (rest[0] not in "'\"" or rest[0] in rest[1:] or "\n" in rest):
        return None  # what follows the whole items is no item cut at the end
    return tuple(whole), True


def option_value_refusal_problem(value: Any) -> str | None:
    """Why ``value`` is no ``option_value_refusal_patterns`` param (checked at policy load): a list of
    tables, each with ``pattern`` — a regular expression that compiles and has the named group
    ``OPTION_VALUE_GROUP`` (``(?P<value>…)``: the value the engine's error names), and may have
    ``OPTION_VALID_GROUP`` (``(?P<valid>…)``: the values it says it accepts), no other — and ``options`` — a
    non-empty list of the options (``--chat_format``) whose value in the launch's command it must be. None:
    it is one."""
    if not isinstance(value, list):
        return f"{value!r} is no list of tables {{pattern = ..., options = [...]}}"
    for n, item in enumerate(value):
        if not isinstance(item, Mapping) or set(item) != {"pattern", "options"}:
            return f"item {n} ({item!r}) is no table of exactly pattern and options"
        pattern, options = item["pattern"], item["options"]
        if not isinstance(pattern, str):
            return f"item {n}: pattern {pattern!r} is no text"
        try:
            groups = re.compile(pattern).groupindex
        except re.error as e:
            return f"item {n}: pattern {pattern!r} does not compile: {e}"
        if OPTION_VALUE_GROUP not in groups:
            return (
                f"item {n}: pattern {pattern!r} has no group (?P<{OPTION_VALUE_GROUP}>...) for the value "
                "the engine's error names"
            )
        if set(groups) - {OPTION_VALUE_GROUP, OPTION_VALID_GROUP}:
            return (
                f"item {n}: pattern {pattern!r} has a named group other than (?P<{OPTION_VALUE_GROUP}>...) "
                f"and (?P<{OPTION_VALID_GROUP}>...) (the values the engine's error says it accepts)"
            )
        if (
            not isinstance(options, list)
            or not options
            or not all(isinstance(o, str) and o.startswith("-") for o in options)
        ):
            return f"item {n}: options {options!r} is no non-empty list of options (texts beginning '-')"
    return None


def refused_option_value(
    payload: Any, params: Mapping[str, Any], command: Sequence[str] | None
) -> tuple[str, str] | None:
    """(option, value) where a request's record shows the engine refused a value the launch's ``command``
    (``launched_command``: the recorded argv, never the request's own claim) gives one of its options: its
    ``http_status`` in ``params.option_value_refused_http_statuses`` and its ``error`` matching a pattern of
    ``params.option_value_refusal_patterns`` whose group ``value`` is the value the command gives
    (``option_values``) one of the options that pattern names — llama-cpp-python's HTTP 500 "Invalid chat
    handler: X (valid formats: […])" for ``--chat_format X``. None otherwise: a value the command does not
    give (the engine's own), a status or error not listed, a command not known, a param missing or
    malformed (``option_value_refusal_problem``: matches nothing; the load refuses it); and, where the
    pattern has the group ``valid`` (``OPTION_VALID_GROUP``), a refused value that list names (the engine
    contradicting itself: llama-cpp-python raises it only for a name missing from its registry), or a list
    that is malformed or not captured (``_listed_values``) — the engine's failure, never the campaign's."""
    if not isinstance(payload, Mapping) or not isinstance(params, Mapping) or command is None:
        return None
    status, error = payload.get("http_status"), payload.get("error")
    if type(status) is not int or not isinstance(error, str):
        return None
    patterns = params.get("option_value_refusal_patterns")
    if not _listed(status, params.get("option_value_refused_http_statuses")):
        return None
    if not isinstance(patterns, list) or option_value_refusal_problem(patterns) is not None:
        return None
    for item in patterns:
        found = re.search(item["pattern"], error)
        value = found.group(OPTION_VALUE_GROUP) if found is not None else None
        if found is None or value is None or not _not_listed(found, value):
            continue
        for option in item["options"]:
            if value in option_values(command[1:], (option,)):
                return option, value
    return None


def _not_listed(found: re.Match[str], value: str) -> bool:
    """Does the error ``found`` matched not list ``value`` among the values the engine accepts? True where
    its pattern has no group ``valid``; False where the list names it, or where the group caught nothing or
    no list (``_listed_values``: malformed). A list cut where the record ends is held to its whole items:
    what the record lost cannot show the engine contradicting itself (the refusal then withholds credit,
    ``engine-refused-probe``: INCONCLUSIVE, not passed)."""
    if OPTION_VALID_GROUP not in found.re.groupindex:
        return True
    text = found.group(OPTION_VALID_GROUP)
    listed = _listed_values(text) if text is not None else None
    if listed is None:
        return False
    return value not in listed[0]


def _none_yet(value: Any) -> bool | None:
    """Is a recorded count of answers the whole number 0 (True), another whole number ≥ 0 (False)? None:
    missing, mistyped (a boolean, a text, a fraction) or negative — no count at all."""
    if type(value) is not int or value < 0:
        return None
    return value == 0


def _answered_before(payload: Mapping[str, Any], check: Any) -> tuple[bool, bool] | None:
    """Of a request a run sent (a ``sequential`` probe's, a harness's ``HARNESS_REQUEST``): did the engine
    answer none of the run's requests before refusing it, and none that asked the same prompt? ``(True,
    True)`` for a request that is no run's; None where the record does not say (fail closed)."""
    if check == "sequential":  # one prompt, asked ``count`` times: every answer is one of the same prompt
        none = _none_yet(payload.get("count"))
        return None if none is None else (none, none)
    if check == HARNESS_REQUEST:
        none, same = _none_yet(payload.get("count")), _none_yet(payload.get("prompt_count"))
        if none is None or same is None or (none and not same):  # the prompt's answers are of the run's
            return None
        return none, same
    return True, True


class _Unread(Enum):
    UNREAD = "unread"


def refusal(
    payload: Any,
    params: Mapping[str, Any],
    launched: tuple[str, int] | _Unread | None = _Unread.UNREAD,
    command: Sequence[str] | None = None,
    counts: Collection[str] | None = None,
) -> Refusal | None:
    """Which refusal of the campaign's configuration a request's record shows (``REFUSALS``), or None: the
    engine failed it, or answered it. ``payload``: a ``health.probe``'s (``check``, ``http_status``,
    ``error``, ``count``) or what a harness passes of one request it sent (``check`` ``HARNESS_REQUEST``,
    ``http_status``, ``error``, ``count``, ``prompt_count``); ``params``: the policy's (evidence-acceptance's
    ``REFUSAL_PARAMS``).

    * ``access``: an HTTP status in ``params.refused_http_statuses`` (401/403: an API key or access rule of
      the campaign the collector does not meet);
    * ``context``: a status in ``params.context_refused_http_statuses`` (400) whose recorded ``error`` (the
      engine's message) matches one of ``params.context_refusal_patterns`` (vLLM's "maximum context length
      is N tokens", llama-server's "exceeds the available context size"); or a probe (``completion``,
      ``structured``, ``sequential``) failed with any other non-2xx status whose record shows its request
      could not fit the context length the campaign launched the engine with (``context_overflow``: its
      prompt's tokens plus its ``max_tokens`` beyond it — llama-cpp-python's HTTP 500 under a small --n_ctx);
      so too a harness request (``HARNESS_REQUEST``) failed without an answer — its stream cut after a 2xx
      status, or none — or with any such status, whose record shows it (``context_overflow``, or the engine
      refusing its sizing request for the context, ``_sizing_refused``: llama-cpp-python's streamed
      "Requested tokens (N) exceed context window of M");
    * ``request-form``: a ``structured`` probe whose status is in
      ``params.request_form_refused_http_statuses`` and whose error matches one of
      ``params.request_form_refusal_patterns`` (a request validation error naming response_format);
    * ``option-value``: a probe's chat request (``completion``, ``structured``, ``sequential``) refused with
      a value the launch's ``command`` gives one of the engine's options (``refused_option_value``:
      llama-cpp-python's HTTP 500 "Invalid chat handler: X" for ``--chat_format X``) — ``command`` is the
      launch's recorded argv (``launched_command``; the collector passes the one it launched), None where
      not known: no such refusal then. A harness request is never one (its run began after the probes'
      chat requests were answered).

    Checked in that order (the first that holds is the one). A refusal the run's own earlier answers
    contradict is none — the engine changed its answer mid-run, its failure:

    * of a run (a ``sequential`` probe; a harness request, ``HARNESS_REQUEST``), ``count`` is the requests
      of the run the engine answered before it refused this one: an access refusal holds only where it is
      the whole number 0 — the run sends the same credentials with every request, so one answer shows
      they were met;
    * an option-value refusal, as an access one, holds only where the run answered none before (the engine
      reads the option once, at launch: one answer shows it took the value);
    * a context refusal holds only where no request of the run that asked the same prompt was answered
      before (``prompt_count`` 0; a sequential probe asks one prompt: its ``count``): whether a request
      fits the context length the engine was launched with (--max-model-len; --ctx-size, per slot) depends
      on its prompt and max_tokens, which a run sends the same each time it asks the prompt — another,
      shorter prompt answered says nothing of this one, the same prompt answered says it fits.

    A count missing, mistyped (a boolean, a text) or negative, a ``prompt_count`` above ``count``; a status
    that is not a non-2xx whole number (none: no answer), an error that is no text, a param missing or
    mistyped: no refusal — the request is judged as any other failure (fail closed).

    ``launched``: the context length the probe's launch gave the engine as the reader derives it
    (``launched_context`` of its attempt's ``engine.launch``; None where that is not known). Where given, a
    context refusal that rests on the record alone (``context_overflow``) holds only where the context the
    record names — the collector's claim — is that one (derive, don't trust); the collector, which sized the
    request by the command it launched, passes none. ``counts``: the ways its prompt may have been counted
    (``context_overflow``, ``_sizing_refused``): the policy passes those of the program its launch's command
    runs (``launched_counts``); not given, ``COUNTED_USAGE`` alone where ``launched`` is (the way of any
    engine: a tokenizer's is held to the program that serves it, which the caller did not tell), every way
    of ``PROMPT_COUNTS`` where it is not either (the collector, which counted by its own launch's ways,
    ``prompt_counts``).

    A context refusal whose error states a window (``stated_windows``: "maximum context length is N
    tokens", "available context size (N tokens)", "context window of N") holds only where each such N is
    one the context gives (``window_explained``: the launch's, ``launched``, where given; else the one the
    record names; N at least it and at most it padded to ``CONTEXT_PADDING``, llama.cpp's rounding): the
    engine serving a smaller or larger window than launched refused the request for its own context, not
    the campaign's — whatever the request's size. An error that states no window, or a context known to
    neither, holds the refusal to the rest of the rules alone."""
    if not isinstance(payload, Mapping) or not isinstance(params, Mapping):
        return None
    status = payload.get("http_status")
    check = payload.get("check")
    # a harness request the engine took and then failed without an answer — its stream cut after a 2xx
    # status (llama-cpp-python's streamed overflow: "Requested tokens (N) exceed context window of M" raised
    # after the headers), or no status at all: only its context record can show it refused
    cut = check == HARNESS_REQUEST and (status is None or (type(status) is int and 200 <= status <= 299))
    if not cut and (type(status) is not int or 200 <= status <= 299):
        return None
    before = _answered_before(payload, check)
    if before is None:
        return None
    none_answered, prompt_unanswered = before
    if type(status) is int and not cut and _listed(status, params.get("refused_http_statuses")):
        return REFUSAL_ACCESS if none_answered else None
    error = payload.get("error")
    if not isinstance(error, str):
        return None
    refused_context = (
        type(status) is int
        and not cut
        and _listed(status, params.get("context_refused_http_statuses"))
        and _matches(error, params.get("context_refusal_patterns"))
    )
    overflow: tuple[str, int] | None = None
    if counts is None:
        counts = PROMPT_COUNTS if launched is _Unread.UNREAD else (COUNTED_USAGE,)
    if check in _PROBES_SIZED or check == HARNESS_REQUEST:
        found = context_overflow(payload, counts)
        overflow = found[:2] if found is not None else _sizing_refused(payload, params, counts)
    if overflow is not None and launched is not _Unread.UNREAD and launched != overflow:
        overflow = None  # the record names another context than its launch's command gives
    # the window the engine's own words state must be one the context the request was launched into gives
    # (the launch's, where the reader knows it, else the one the record names): one it does not give is the
    # engine serving another context than the campaign's — its failure, however large the request
    held = launched if isinstance(launched, tuple) else _recorded_context(payload)
    if not _windows_explained(error, held[1] if held is not None else None):
        refused_context, overflow = False, None
    if refused_context or overflow is not None:
        return REFUSAL_CONTEXT if prompt_unanswered else None
    if (
        check == "structured"
        and type(status) is int
        and _listed(status, params.get("request_form_refused_http_statuses"))
        and _matches(error, params.get("request_form_refusal_patterns"))
    ):
        return REFUSAL_REQUEST_FORM
    if check in CHAT_PROBES and none_answered and refused_option_value(payload, params, command) is not None:
        return REFUSAL_OPTION_VALUE
    return None


def request_unanswered(fault: Any, unanswered: Any, http_status: Any) -> bool:
    """A harness request that faulted without an answer: ``fault`` and ``unanswered`` true (its connection
    refused, reset or closed before the answer was whole), and no HTTP status, or a 2xx one — the connection
    cut before the streamed answer was whole (an outside stop cuts the streams in flight mid-answer). An error
    status (a 4xx, a 5xx: audit 73 f1) is an answer whatever else the record says, and so is a status that is
    no whole number (fail closed). The collector judges its live ``RequestRecord`` by it, the policy the
    stored record's fields."""
    no_answer = http_status is None or (type(http_status) is int and 200 <= http_status <= 299)
    return fault is True and unanswered is True and no_answer


# how the error of a harness request the run itself cut begins (its lease ran out, an operator's stop,
# another request's engine fault): no answer the engine failed to give (``request_cut``)
REQUEST_CUT: Final = "stopped:"


def request_cut(error: Any) -> bool:
    """A harness request the run itself cut rather than the engine failing it: its error, a text, begins
    ``REQUEST_CUT``. The collectors count their live records by it (``counts.cut``), the policy the stored
    record's ``error`` (``acceptance._requests_shown``): one test, so a count a rule subtracts from the
    errors is the one the record shows. Anything else (no error, a mistyped one): not cut."""
    return isinstance(error, str) and error.startswith(REQUEST_CUT)


# --- c1 parity: the same prompt's outputs across a benchmark's repetitions ----------------------------------


def _same_output(ref: Mapping[str, Any], other: Mapping[str, Any]) -> tuple[bool, bool]:
    """(two recorded outputs are the same, only their token counts differ): by ``token_ids_digest`` where
    both carry one; else by ``output_digest`` (the text's, with its reasoning) AND the output token count
    and where it came from (``output_tokens``, ``tokens_from``) — the same text generated as other tokens
    is not the same output at temperature 0. An output that records neither digest (dropped, null, no
    text) shows nothing to compare: it is the same as no other, so a run whose records lost their digests
    never reads as matching (audit 104 f1: 96 of 96 c1 outputs with no digest "matched")."""
    ids, other_ids = ref.get("token_ids_digest"), other.get("token_ids_digest")
    if isinstance(ids, str) and ids and isinstance(other_ids, str) and other_ids:
        return ids == other_ids, False
    text, other_text = ref.get("output_digest"), other.get("output_digest")
    if not (isinstance(text, str) and text and isinstance(other_text, str) and other_text):
        return False, False
    same_text = text == other_text
    count = (ref.get("output_tokens"), ref.get("tokens_from"))
    same_count = count == (other.get("output_tokens"), other.get("tokens_from"))
    return same_text and same_count, same_text and not same_count


def parity_of(
    records: Iterable[Mapping[str, Any]], level: int, *, token_ids_asked: bool | None = None
) -> dict[str, Any] | None:
    """Prompt-by-prompt parity of the outputs at ``level`` (temperature 0: c1, ``ledger.policy.bounds.
    PARITY_LEVEL``) across repetitions, from request records as ``benchmark-requests.jsonl`` stores them
    (``collectors.benchmark.RequestRecord.to_json``): each prompt's reference is its first completed output
    (``error`` null; by ``repetition``, then ``index``), and every other completed output of it at that
    level is compared with it (``_same_output``). ``by``: "token_ids" only where every output compared
    carried ids, else "text". The one reading of c1 parity: the benchmark harness records it of its own
    records as ``bounds.parity`` (``token_ids_asked``: what its spec asked, recorded as ``asked`` —
    "token_ids", else "text"), and the policy derives it again from the stored records
    (``acceptance._parity_unshown``; no ``asked``), so the harness's c1 parity is never its own word. None
    when nothing could be compared."""
    by_prompt: dict[str, list[Mapping[str, Any]]] = {}
    for r in sorted(records, key=lambda r: (r["repetition"], r["index"])):
        if r.get("level") == level and r.get("error") is None:
            by_prompt.setdefault(str(r.get("prompt_id")), []).append(r)
    compared = matched = 0
    mismatched: list[str] = []
    counts_differ: list[str] = []
    for pid, outs in by_prompt.items():
        ref, ok = outs[0], True
        for other in outs[1:]:
            compared += 1
            same, only_count = _same_output(ref, other)
            matched += same
            ok = ok and same
            if only_count and pid not in counts_differ:
                counts_differ.append(pid)
        if not ok:
            mismatched.append(pid)
    if compared == 0:
        return None
    outputs = by_prompt.values()
    parity: dict[str, Any] = {
        "level": level,
        "compared": compared,
        "matched": matched,
        "fraction": round(matched / compared, 6),
        "prompts": len(by_prompt),
        "prompts_mismatched": sorted(mismatched),
        # the prompts whose text repeated while the output token count did not
        "token_counts_differ": sorted(counts_differ),
        "by": "token_ids" if all(r.get("token_ids_digest") for o in outputs for r in o) else "text",
    }
    if token_ids_asked is not None:
        parity["asked"] = "token_ids" if token_ids_asked else "text"
    return parity
