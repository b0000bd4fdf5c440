"""Regressions of an audit of the HTTP surface, each with its neighbour cases (in process, on homes built
from the shipped policy fixtures):

1. ``POST /v1/routing-check`` read its deployment with a model of its own: ``"gpus": [true]`` (GPU 1),
   ``["0"]`` and ``"gpu_memory_utilization": "0.5"`` were allowed while the CLI's ``--deployment`` refuses
   them, and ``device``/``engine`` (a CPU deployment) were refused. The API now reads it by the core's one
   vocabulary (``ledger.policy.routing.validate_deployment``), and names the request body, not
   ``--deployment``, in its errors and answer.
2. ``?subject=campaign=other&subject=campaign=C`` answered for the last value; a field given twice is refused.
3. The subjects page showed a recorded QUALIFIED as "the latest verdict" after its evidence was superseded;
   it is now labelled as recorded, with its time, beside the verdict derived now.
4. ``/v1/entries?kind=nonsense`` answered an empty page; an unknown kind is refused, naming the known ones.
5. ``after=-5`` and unknown query parameters were accepted silently; an upper-case id prefix was refused.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from ledger.api.app import create_app
from ledger.api.settings import ApiSettings
from ledger.entries import parse_time
from ledger.errors import InputError
from ledger.policy import evaluate, load_policy, record_verdict
from ledger.policy.fixtures import build_fixture_ledger
from ledger.policy.routing import load_deployment, validate_deployment
from ledger.policy.verdict import judge_again_at
from ledger.reads import parse_subject_args
from ledger.service import Ledger

REPO = Path(__file__).resolve().parents[2]
POLICY_DIR = REPO / "policies"
FIXTURES = POLICY_DIR / "fixtures"
ROUTE = {"backend": "vllm", "model": "Qwen3-Embedding-8B", "host": "gpu-box-1"}
NOW = "2026-09-11T09:00:00Z"  # the router fixture's checks judge as of this time
WITHIN_BOUNDS: dict[str, Any] = {  # seed004-router.toml's "within bounds: allowed" deployment
    "host": "gpu-box-1",
    "services": [
        {
            "engine": "vllm",
            "name": "vllm-text",
            "model": "Qwen3.6-35B-A3B-FP8",
            "gpus": [0, 1],
            "gpu_memory_utilization": 0.85,
            "env": {"NCCL_P2P_DISABLE": "1"},
        },
        {
            "engine": "vllm",
            "name": "vllm-ocr",
            "model": "OvisOCR2",
            "gpus": [2],
            "gpu_memory_utilization": 0.10,
        },
        {
            "engine": "vllm",
            "name": "vllm-embed",
            "model": "Qwen3-Embedding-8B",
            "gpus": [2],
            "gpu_memory_utilization": 0.25,
        },
    ],
}


@dataclass
class Home:
    path: Path
    ledger: Ledger
    names: dict[str, str]
    client: TestClient


def _home(tmp: Path, fixture: str) -> Iterator[Home]:
    ledger, _spec, builder = build_fixture_ledger(
        FIXTURES / fixture, tmp / "home", POLICY_DIR, init=Ledger.init
    )
    app = create_app(ApiSettings(home=str(tmp / "home"), public_reads=True), ledger=ledger)
    with TestClient(app) as client:
        yield Home(tmp / "home", ledger, {n: e.entry_id for n, e in builder.names.items()}, client)
    ledger.close()


@pytest.fixture(scope="module")
def router(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Home]:
    """seed004-router: a recorded QUALIFIED verdict for campaign router-embed on gpu-box-1."""
    yield from _home(tmp_path_factory.mktemp("router"), "routing-change/seed004-router.toml")


@pytest.fixture
def qualified(tmp_path: Path) -> Iterator[Home]:
    """The QUALIFIED fixture (campaign vllm-embed), its verdict not yet recorded; a fresh home per test."""
    yield from _home(tmp_path, "backend-qualification/qualified.toml")


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Callable[..., tuple[int, str, str]]:
    from ledger.cli import main

    def run(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = main(list(args))
        out = capsys.readouterr()
        return code, out.out, out.err

    return run


def _problem(r: Any, status: int = 422) -> dict[str, Any]:
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/problem+json", r.headers
    body: dict[str, Any] = r.json()
    return body


def _route(client: TestClient, deployment: Any, **extra: Any) -> Any:
    return client.post(
        "/v1/routing-check", json={"subject": ROUTE, "now": NOW, "deployment": deployment, **extra}
    )


def _service(**fields: Any) -> dict[str, Any]:
    return {"host": "gpu-box-1", "services": [{"name": "a", "engine": "vllm", "model": "m-7", **fields}]}


# --- 1. one deployment vocabulary: the API reads what a --deployment file reads, by the same rules --------

# each refused by `ledger check routing-change --deployment FILE`: (the deployment, the field it names)
REFUSED: dict[str, tuple[Any, str]] = {
    "gpus-true": (_service(gpus=[True], gpu_memory_utilization=0.5), "services.0.gpus.0"),
    "gpus-string": (_service(gpus=["0"], gpu_memory_utilization=0.5), "services.0.gpus.0"),
    "gpus-float": (_service(gpus=[0.0], gpu_memory_utilization=0.5), "services.0.gpus.0"),
    "gpus-not-a-list": (_service(gpus="0"), "services.0.gpus"),
    "util-string": (_service(gpus=[0], gpu_memory_utilization="0.5"), "services.0.gpu_memory_utilization"),
    "util-true": (_service(gpus=[0], gpu_memory_utilization=True), "services.0.gpu_memory_utilization"),
    "util-zero": (_service(gpus=[0], gpu_memory_utilization=0), "services.0.gpu_memory_utilization"),
    "util-above-one": (_service(gpus=[0], gpu_memory_utilization=1.5), "services.0.gpu_memory_utilization"),
    "unknown-key": (_service(gpus=[0], gpu=[1]), "services.0.gpu"),
    "unknown-device": (_service(device="tpu"), "services.0.device"),
    "env-not-text": (_service(gpus=[0], env={"NCCL_P2P_DISABLE": 1}), "services.0.env.NCCL_P2P_DISABLE"),
    "port-string": (_service(gpus=[0], port="8000"), "services.0.port"),
    "no-host": ({"services": [{"engine": "vllm", "name": "a", "gpus": [0]}]}, "host"),
    "host-not-text": ({"host": 7, "services": [{"engine": "vllm", "name": "a", "gpus": [0]}]}, "host"),
    "no-services": ({"host": "gpu-box-1", "services": []}, "services"),
    "no-gpus-no-device": (_service(), "device"),
    "gpu-without-gpus": (_service(device="gpu"), 'device "gpu" needs its gpus'),
    "cpu-with-gpus": (_service(device="cpu", gpus=[0]), 'device "cpu" takes no gpus'),
    "cpu-with-util": (_service(device="cpu", gpu_memory_utilization=0.5), "gpu_memory_utilization"),
    "gpu-twice": (_service(gpus=[0, 0]), "lists a GPU more than once"),
    "gpu-negative": (_service(gpus=[-1]), "services.0.gpus.0"),  # a GPU index is 0, 1, …
    "engine-without-util": (_service(gpus=[0], engine="sglang"), "gpu_memory_utilization"),
    "name-twice": (
        {
            "host": "gpu-box-1",
            "services": [
                {"engine": "vllm", "name": "a", "gpus": [0]},
                {"engine": "vllm", "name": "a", "gpus": [1]},
            ],
        },
        "is already services[0]'s",
    ),
    "not-an-object": ("gpu-box-1", "a deployment must be an object"),
    "a-list": ([WITHIN_BOUNDS], "a deployment must be an object"),
}

# each accepted by the CLI: the API judges it (200), as the CLI's file would be judged
ACCEPTED: dict[str, Any] = {
    "within-bounds": WITHIN_BOUNDS,
    "cpu-service": _service(device="cpu", engine="llama.cpp"),
    "engine-and-port": _service(gpus=[3], engine="sglang", port=30000, gpu_memory_utilization=0.4),
    "vllm-default-util": _service(gpus=[3]),  # vLLM's own default, 0.9
    "device-gpu-stated": _service(device="gpu", gpus=[3], gpu_memory_utilization=0.5),
    "util-one-as-integer": _service(gpus=[3], gpu_memory_utilization=1),
}


def _file(tmp_path: Path, deployment: Any) -> Path:
    p = tmp_path / "deployment.json"
    p.write_text(json.dumps(deployment))
    return p


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_routing_check_refuses_a_mistyped_deployment_the_cli_refuses(
    router: Home, tmp_path: Path, case: str
) -> None:
    deployment, field = REFUSED[case]
    p = _file(tmp_path, deployment)
    with pytest.raises(InputError) as cli_refusal:
        load_deployment(p)
    size = router.ledger.size()
    body = _problem(_route(router.client, deployment))
    assert body["code"] == "bad-input"
    assert field in body["detail"], body["detail"]
    # the same refusal, the request body named where the CLI names its file
    assert body["detail"] == cli_refusal.value.message.replace(str(p), "request body")
    assert body["detail"].startswith("request body: ") and "--deployment" not in body["detail"]
    assert router.ledger.size() == size  # nothing written


def test_routing_check_refuses_gpus_true_that_it_read_as_gpu_1(
    router: Home, cli: Any, tmp_path: Path
) -> None:
    """The audit's reproduction: ``"gpus": [true]`` was read as GPU 1 and the route allowed (200)."""

    def embed(gpus: list[Any]) -> dict[str, Any]:
        service = {
            "engine": "vllm",
            "name": "vllm-embed",
            "model": ROUTE["model"],
            "gpus": gpus,
            "gpu_memory_utilization": 0.5,
        }
        return {"host": "gpu-box-1", "services": [service]}

    mistyped = embed([True])
    body = _problem(_route(router.client, mistyped))
    assert body["detail"] == "request body: deployment services.0.gpus.0: Input should be a valid integer"
    args = [x for k, v in ROUTE.items() for x in ("-s", f"{k}={v}")]
    code, _out, err = cli(
        "--home", str(router.path), "check", "routing-change", *args,
        "--deployment", str(_file(tmp_path, mistyped)), "--now", NOW,
    )  # fmt: skip
    assert code == 2 and "services.0.gpus.0: Input should be a valid integer" in err, err
    # its well-typed twin is judged, and allowed: what the mistyped one was answered (GPU 1 read for true)
    fine = _route(router.client, embed([1]))
    assert fine.status_code == 200 and fine.json()["allowed"] is True, fine.text


@pytest.mark.parametrize("case", sorted(ACCEPTED))
def test_routing_check_accepts_every_deployment_the_cli_accepts(
    router: Home, tmp_path: Path, case: str
) -> None:
    deployment = ACCEPTED[case]
    from_file = load_deployment(_file(tmp_path, deployment))
    r = _route(router.client, deployment)
    assert r.status_code == 200, r.text
    got = r.json()
    assert got["deployment_spec"] == from_file  # read alike, defaults filled alike
    assert got["deployment"]["source"] == "request body"
    # the answer is the CLI's (the service `ledger check routing-change --record` calls), but for the source
    want = router.ledger.check_routing(ROUTE, "routing-change", deployment=from_file, now=parse_time(NOW))
    assert want["deployment"]["source"] == "--deployment"
    want["deployment"]["source"] = "request body"
    assert got == want
    if case == "within-bounds":
        assert got["allowed"] is True, got["reasons"]
    if case == "cpu-service":  # a CPU deployment can be checked (was: 422, gpus required)
        assert got["deployment_spec"]["services"][0] == {
            "name": "a", "model": "m-7", "device": "cpu", "gpus": [], "engine": "llama.cpp",
            "port": None, "gpu_memory_utilization": None, "env": {},
        }  # fmt: skip


def test_routing_check_answer_and_errors_name_the_request_body_not_the_cli_option(router: Home) -> None:
    r = _route(router.client, WITHIN_BOUNDS)
    assert r.status_code == 200 and "--deployment" not in r.text, r.text
    assert r.json()["deployment"]["source"] == "request body"
    over = {**WITHIN_BOUNDS, "services": [{**WITHIN_BOUNDS["services"][0], "gpu_memory_utilization": 0.95}]}
    refused = _route(router.client, over)
    assert refused.status_code == 200 and refused.json()["allowed"] is False
    assert "--deployment" not in refused.text
    # without a deployment the answer names none (the policy's own reason may tell a CLI user what to pass)
    bare = router.client.post("/v1/routing-check", json={"subject": ROUTE, "now": NOW})
    assert bare.status_code == 200 and bare.json()["deployment"] is None
    # the rest of the body is still checked once the deployment passes
    extra = _problem(_route(router.client, WITHIN_BOUNDS, extra=1))
    assert "extra" in extra["detail"]


def test_openapi_shows_the_deployment_file_format_for_routing_check(router: Home) -> None:
    doc = router.client.get("/openapi.json").json()
    schema = doc["paths"]["/v1/routing-check"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    dep = next(s for s in schema["properties"]["deployment"]["anyOf"] if s.get("type") == "object")
    assert dep["required"] == ["host", "services"] and dep["additionalProperties"] is False
    service = dep["properties"]["services"]["items"]
    assert service["additionalProperties"] is False and service["required"] == ["name", "engine"]
    assert {"name", "device", "gpus", "engine", "model", "port", "gpu_memory_utilization", "env"} == set(
        service["properties"]
    )
    devices = next(s for s in service["properties"]["device"]["anyOf"] if "enum" in s)
    assert devices["enum"] == ["gpu", "cpu"]
    assert "$ref" not in json.dumps(schema)  # inlined: ReDoc cannot follow #/$defs


def test_validate_deployment_is_the_loaders_rule(tmp_path: Path) -> None:
    """The API and the loader share one function: a file's deployment and the same data validate equal."""
    p = _file(tmp_path, WITHIN_BOUNDS)
    assert validate_deployment(WITHIN_BOUNDS, "x") == load_deployment(p)
    with pytest.raises(InputError, match=r"^somewhere: a deployment must be an object"):
        validate_deployment(["not", "an", "object"], "somewhere")


# --- 2. a subject field given twice is refused, never answered for its last value -----------------------


@pytest.mark.parametrize(
    "path", ["/v1/verdict", "/v1/entries", "/verdict"], ids=["api-verdict", "api-entries", "page-verdict"]
)
@pytest.mark.parametrize("order", ["other-first", "real-first"])
def test_a_subject_field_given_twice_is_refused_not_answered_for_the_last(
    router: Home, path: str, order: str
) -> None:
    pair = [("subject", "campaign=other"), ("subject", "campaign=router-embed")]
    params = pair if order == "other-first" else pair[::-1]
    body = _problem(router.client.get(path, params=params))
    assert "subject field 'campaign' given twice" in body["detail"], body["detail"]
    assert "subject=campaign=other" in body["detail"] and "subject=campaign=router-embed" in body["detail"]
    # a field spelled with spaces is the same field
    spaced = _problem(router.client.get(path, params=[("subject", "campaign =x"), ("subject", "campaign=y")]))
    assert "'campaign' given twice" in spaced["detail"]


def test_distinct_subject_fields_and_a_single_field_still_answer(router: Home) -> None:
    one = router.client.get("/v1/verdict", params={"subject": "campaign=router-embed"})
    assert one.status_code == 200 and one.json()["verdict"] == "QUALIFIED", one.text
    two = router.client.get(
        "/v1/entries", params=[("subject", "campaign=router-embed"), ("subject", "host=gpu-box-1")]
    )
    assert two.status_code == 200 and two.json()["items"], two.text
    page = router.client.get("/verdict", params={"subject": "campaign=router-embed"})
    assert page.status_code == 200 and "QUALIFIED" in page.text


def test_the_cli_and_the_core_refuse_a_field_given_twice_alike(router: Home, cli: Any) -> None:
    with pytest.raises(InputError, match=r"subject field 'campaign' given twice \(--subject campaign=a"):
        parse_subject_args(["campaign=a", "campaign=b"])
    with pytest.raises(InputError, match=r"\(subject=campaign=a and subject=campaign=b\)"):
        parse_subject_args(["campaign=a", "campaign=b"], given_as="subject=")
    assert parse_subject_args(["campaign=a", "host=h"]) == {"campaign": "a", "host": "h"}
    code, _out, err = cli(
        "--home", str(router.path), "verdict", "-s", "campaign=other", "-s", "campaign=router-embed"
    )
    assert code == 2 and "subject field 'campaign' given twice" in err, err


# --- 3. the subjects page labels a recorded verdict as recorded and shows the verdict now beside it -------


def _cells(html: str, subject: str) -> list[str]:
    """The text of each cell of the subjects page's row for ``subject``."""
    row = re.search(
        r"<tr>\s*<td><a href=\"[^\"]*\">" + re.escape(subject) + r"</a></td>(.*?)</tr>", html, re.S
    )
    assert row is not None, subject
    cells = re.findall(r"<td>(.*?)</td>", row.group(1), re.S)
    return [" ".join(re.sub(r"<[^>]+>", " ", c).split()) for c in cells]


# log times just after the fixture's campaign (it ends at 10:50): nothing is stale by then, so a verdict
# derived now differs from the recorded one only where later evidence changed it
RECORDED_AT = "2026-09-10T11:00:00Z"
SUPERSEDED_AT = "2026-09-10T11:05:00Z"


def _record_verdict(home: Home) -> Any:
    led = home.ledger
    result = evaluate(led, {"campaign": "vllm-embed"}, load_policy("backend-qualification"))
    assert result["verdict"] == "QUALIFIED"
    return record_verdict(
        led,
        result,
        key="reviewer",
        at=parse_time(RECORDED_AT),
        judge_at=judge_again_at(led, result, load_policy("backend-qualification")),
    )


def _supersede(home: Home, name: str) -> None:
    led = home.ledger
    st = led.make_statement(
        "supersession",
        {"campaign": "vllm-embed"},
        {"reason": "the benchmark ran another build", "correction": "rerun the benchmark"},
        refs=[("supersedes", home.names[name])],
        collected_at=SUPERSEDED_AT,
    )
    led.append([led.sign(st, "reviewer")], logged_at=parse_time(SUPERSEDED_AT))


def test_subjects_page_labels_a_stale_recorded_qualified_verdict_and_shows_the_verdict_now(
    qualified: Home,
) -> None:
    led = qualified.ledger
    recorded = _record_verdict(qualified)
    _supersede(qualified, "benchmark")
    now_result = evaluate(led, {"campaign": "vllm-embed"}, load_policy("backend-qualification"))
    assert now_result["verdict"] == "INCONCLUSIVE"
    assert {"entry": qualified.names["benchmark"], "rule": "superseded"}.items() <= next(
        r for r in now_result["rejected"] if r["entry"] == qualified.names["benchmark"]
    ).items()
    home = qualified.client.get("/")
    assert home.status_code == 200
    assert "<th>latest verdict</th>" not in home.text
    assert "<th>latest recorded verdict</th>" in home.text and "<th>verdict now</th>" in home.text
    _entries, _last, was, now = _cells(home.text, "campaign=vllm-embed")
    assert was == f"QUALIFIED recorded {recorded.logged_at}"
    assert now == "INCONCLUSIVE changed since recorded"
    # a row whose subject the verdict names too (its host, model, backend) shows the same two
    assert _cells(home.text, "model=Qwen3-Embedding-8B")[2:] == [was, now]
    # the verdict now links to its gate ladder, which says the same
    link = re.search(r'href="(/verdict\?subject=campaign%3Dvllm-embed[^"]*)"', home.text)
    assert link is not None
    ladder = qualified.client.get(link.group(1).replace("&amp;", "&"))
    assert ladder.status_code == 200 and 'id="verdict-word">INCONCLUSIVE' in ladder.text
    # the host page's campaigns, likewise
    host = qualified.client.get("/hosts/gpu-box-1")
    assert host.status_code == 200 and "<th>latest recorded verdict</th>" in host.text
    assert f"recorded {recorded.logged_at}" in host.text and "changed since recorded" in host.text


def test_subjects_page_shows_a_recorded_verdict_that_still_holds_without_a_change_mark(
    qualified: Home,
) -> None:
    recorded = _record_verdict(qualified)
    home = qualified.client.get("/")
    _entries, _last, was, now = _cells(home.text, "campaign=vllm-embed")
    assert was == f"QUALIFIED recorded {recorded.logged_at}" and now == "QUALIFIED"
    assert "changed since recorded" not in home.text


def test_subjects_page_without_a_recorded_verdict_and_with_one_it_cannot_derive(qualified: Home) -> None:
    home = qualified.client.get("/")
    assert _cells(home.text, "campaign=vllm-embed")[2:] == ["no verdict recorded", "—"]
    # a verdict entry naming a policy this server does not hold: shown as recorded, never derived
    qualified.ledger.record(
        "verdict",
        {"campaign": "elsewhere"},
        {"verdict": "QUALIFIED", "status": "qualified", "policy": {"name": "not-here"}, "checkpoint": {}},
        key="reviewer",
    )
    home = qualified.client.get("/")
    assert home.status_code == 200
    was, now = _cells(home.text, "campaign=elsewhere")[2:]
    assert was.startswith("result unreadable recorded ") and now == "cannot be derived here"


# --- 4. an unknown kind filter is refused, naming the known kinds --------------------------------------


@pytest.mark.parametrize("kind", ["nonsense", "nope.*", "HOST.PROBE", "verdicts"])
def test_entries_refuses_an_unknown_kind_filter_instead_of_an_empty_page(router: Home, kind: str) -> None:
    body = _problem(router.client.get("/v1/entries", params={"kind": kind}))
    assert body["code"] == "unknown-kind"
    assert repr(kind) in body["detail"] and "host.probe" in body["detail"] and "verdict" in body["detail"]


@pytest.mark.parametrize("kind", ["verdict", "key.*", "health.probe", "*", "routing.change"])
def test_entries_answers_a_known_kind_or_prefix(router: Home, kind: str) -> None:
    r = router.client.get("/v1/entries", params={"kind": kind})
    assert r.status_code == 200, r.text
    items = r.json()["items"]
    if kind == "routing.change":
        assert items == []  # a kind the log holds none of: an empty page is the true answer
    else:
        assert items and all(i["kind"].startswith(kind.rstrip("*")) for i in items)


# --- 5. cursors below 0, unknown query parameters, upper-case ids ---------------------------------------


@pytest.mark.parametrize("after", ["-5", "-1"])
def test_entries_refuses_a_negative_cursor(router: Home, after: str) -> None:
    body = _problem(router.client.get("/v1/entries", params={"after": after}))
    assert "after" in body["detail"]
    first = router.client.get("/v1/entries", params={"after": "0", "limit": 1})
    assert first.status_code == 200 and first.json()["items"][0]["seq"] == 1


@pytest.mark.parametrize(
    ("path", "params", "unknown"),
    [
        ("/v1/entries", {"knd": "verdict"}, "knd"),
        ("/v1/entries", {"kind": "verdict", "sort": "desc"}, "sort"),
        ("/v1/verdict", {"subject": "campaign=router-embed", "polcy": "x"}, "polcy"),
        ("/v1/health", {"verbose": "1"}, "verbose"),
        ("/v1/checkpoint", {"sise": "3"}, "sise"),
    ],
)
def test_an_unknown_query_parameter_is_refused_naming_it(
    router: Home, path: str, params: dict[str, str], unknown: str
) -> None:
    body = _problem(router.client.get(path, params=params))
    assert repr(unknown) in body["detail"], body["detail"]
    assert f"{path} takes:" in body["detail"]
    if path == "/v1/entries":
        assert "kind" in body["detail"] and "subject" in body["detail"]


def test_known_query_parameters_still_answer_and_pages_are_left_alone(router: Home) -> None:
    c = router.client
    assert c.get("/v1/entries", params={"kind": "verdict", "order": "desc", "limit": 1}).status_code == 200
    assert c.get("/v1/health").status_code == 200
    assert c.get("/v1/checkpoint", params={"size": 3}).status_code == 200
    assert c.get("/", params={"utm_source": "mail"}).status_code == 200  # a page ignores what it does not use
    verdict = router.names["verdict"]
    assert c.get(f"/v1/entries/{verdict}", params={"envelope": "true"}).status_code == 200


def test_an_upper_case_entry_id_or_prefix_is_accepted_as_ledger_show_accepts_it(router: Home) -> None:
    c = router.client
    full = router.names["verdict"]
    for given in (full[:12].upper(), full.upper(), full[:8].upper(), full[:10].lower()):
        r = c.get(f"/v1/entries/{given}")
        assert r.status_code == 200 and r.json()["id"] == full, (given, r.text)
    env = c.get(f"/v1/entries/{full.upper()}", params={"envelope": "true"})
    assert env.status_code == 200 and env.headers["etag"]
    proof = c.get(f"/v1/proofs/inclusion/{full[:16].upper()}")
    assert proof.status_code == 200 and proof.json()["entry_id"] == full
    assert c.get(f"/entries/{full[:12].upper()}").status_code == 200
    # still hex, at least 8 characters
    assert _problem(c.get(f"/v1/entries/{'G' * 12}"))["code"] == "bad-input"
    assert _problem(c.get(f"/v1/entries/{full[:7].upper()}"))["code"] == "bad-input"
