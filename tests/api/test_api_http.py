"""Every endpoint and every refusal, over real HTTP against `ledger serve`, on SQLite and PostgreSQL.

Each refusal also asserts that nothing was stored: the log's size and the store are unchanged.
"""

from __future__ import annotations

import base64
import json
import secrets
import subprocess
from datetime import UTC, datetime, timedelta
from typing import Any

import blake3
import httpx

from ledger.canonical import canonical_bytes
from ledger.entries import ArtifactRef
from ledger.hashing import Digest, HexDigest
from ledger.log import parse_receipt
from ledger.proofs import verify_proof_document
from ledger.service import MAX_BATCH
from tests.api.conftest import LEDGER_BIN, MAX_ARTIFACT, MAX_BODY, Deployment, Server


def campaign() -> dict[str, str]:
    return {"campaign": f"c-{secrets.token_hex(4)}"}


def note(dep: Deployment, subject: dict[str, str], text: str = "observed", **kw: Any) -> dict[str, Any]:
    return dep.sign("note", subject, {"text": text}, **kw)


def b3(data: bytes) -> str:
    return "blake3:" + blake3.blake3(data).hexdigest()


def error_code(resp: httpx.Response) -> str:
    """The stable code of an RFC 9457 problem document (and of its compatibility member ``error``)."""
    body = resp.json()
    assert body["code"] == body["error"]["code"]
    assert body["hint"], f"an error without a hint: {body}"
    return str(body["code"])


class Unchanged:
    """Context manager: the log size (and optionally a store digest's absence) must not change."""

    def __init__(self, dep: Deployment, *digests: str) -> None:
        self.dep = dep
        self.digests = digests

    def __enter__(self) -> Unchanged:
        self.size = self.dep.ledger.size()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.dep.ledger.size() == self.size, "a refused request stored an entry"
        for d in self.digests:
            assert not self.dep.ledger.store.has(Digest(HexDigest(d.split(":")[1]))), f"{d} was stored"


# --- service endpoints ---


def test_health_reports_size_and_database(http: httpx.Client, deployment: Deployment) -> None:
    r = http.get("/v1/health")
    assert r.status_code == 200
    body = r.json()
    assert body["status"] == "ok"
    assert body["size"] == deployment.ledger.size()
    assert body["database"] == ("postgresql" if deployment.backend == "postgres" else "sqlite")


def test_openapi_document_is_published(http: httpx.Client) -> None:
    doc = http.get("/openapi.json").json()
    for path in (
        "/v1/entries",
        "/v1/entries/batch",
        "/v1/entries/{entry_id}",
        "/v1/artifacts/{digest}",
        "/v1/checkpoint",
        "/v1/proofs/inclusion/{entry_id}",
        "/v1/proofs/consistency",
        "/v1/verdict",
        "/v1/routing-check",
        "/v1/health",
    ):
        assert path in doc["paths"], path


def test_metrics_are_prometheus_text(http: httpx.Client) -> None:
    http.get("/v1/health")
    r = http.get("/metrics")
    assert r.status_code == 200
    assert "ledger_http_requests_total" in r.text
    assert "ledger_log_size" in r.text


# --- appending ---


def test_append_one_returns_the_cli_json_shape_and_recognises_a_resend(
    http: httpx.Client, deployment: Deployment
) -> None:
    env = note(deployment, campaign())
    before = deployment.ledger.size()
    r = http.post("/v1/entries", json=env, headers=deployment.headers("writer"))
    assert r.status_code == 201, r.text
    got = r.json()
    assert got.pop("duplicate") is False
    receipt = parse_receipt(got.pop("receipt"), deployment.ledger.log_public_key())  # signed by the log
    stored = deployment.ledger.get(got["id"])
    assert got == stored.to_json("collector1")  # the same JSON as `ledger show --json`
    assert (receipt.record.entry_id, receipt.record.index, receipt.record.logged_at) == (
        stored.entry_id,
        stored.seq,
        stored.logged_at,
    )
    assert got["seq"] == before
    again = http.post("/v1/entries", json=env, headers=deployment.headers("writer"))
    assert again.status_code == 200
    assert again.json()["duplicate"] is True
    assert again.json()["id"] == got["id"]
    assert deployment.ledger.size() == before + 1


def test_batch_is_appended_in_order_with_refs_inside_the_batch(
    http: httpx.Client, deployment: Deployment
) -> None:
    subj = campaign()
    first = note(deployment, subj, "launch")
    first_id = blake3.blake3(canonical_bytes(first)).hexdigest()
    second = deployment.sign(
        "supersession",
        subj,
        {"reason": "wrong host recorded"},
        key="reviewer1",
        refs=[("supersedes", first_id)],
    )
    r = http.post(
        "/v1/entries/batch", json={"envelopes": [first, second]}, headers=deployment.headers("admin")
    )
    assert r.status_code == 201, r.text
    entries = r.json()["items"]
    assert entries[0]["id"] == first_id
    assert entries[1]["seq"] == entries[0]["seq"] + 1
    assert entries[1]["refs"] == [{"rel": "supersedes", "id": first_id}]


def test_batch_is_atomic_one_bad_envelope_stores_nothing(http: httpx.Client, deployment: Deployment) -> None:
    subj = campaign()
    good = note(deployment, subj)
    bad = note(deployment, subj, "tampered")
    bad["signatures"][0]["sig"] = good["signatures"][0]["sig"]
    with Unchanged(deployment):
        r = http.post(
            "/v1/entries/batch", json={"envelopes": [good, bad]}, headers=deployment.headers("writer")
        )
    assert r.status_code == 403
    assert error_code(r) == "bad-signature"


# --- refusals ---


def test_append_without_a_token_is_refused(http: httpx.Client, deployment: Deployment) -> None:
    with Unchanged(deployment):
        r = http.post("/v1/entries", json=note(deployment, campaign()))
    assert r.status_code == 401
    assert error_code(r) == "unauthenticated"
    assert r.headers["www-authenticate"].startswith("Bearer")


def test_append_with_an_unknown_token_is_refused(http: httpx.Client, deployment: Deployment) -> None:
    with Unchanged(deployment):
        r = http.post(
            "/v1/entries", json=note(deployment, campaign()), headers={"Authorization": "Bearer elt_nope"}
        )
    assert r.status_code == 401


def test_append_with_a_reader_token_is_refused(http: httpx.Client, deployment: Deployment) -> None:
    with Unchanged(deployment):
        r = http.post("/v1/entries", json=note(deployment, campaign()), headers=deployment.headers("reader"))
    assert r.status_code == 403
    assert error_code(r) == "forbidden"


def test_a_revoked_token_is_refused(http: httpx.Client, deployment: Deployment) -> None:
    from ledger.tokens import create_token, revoke_token

    token, rec = create_token(deployment.ledger.engine, f"short-lived-{secrets.token_hex(3)}", "writer")
    ok = http.get("/v1/entries", params={"limit": 1}, headers={"Authorization": f"Bearer {token}"})
    assert ok.status_code == 200
    revoke_token(deployment.ledger.engine, rec.name)
    with Unchanged(deployment):
        r = http.post(
            "/v1/entries", json=note(deployment, campaign()), headers={"Authorization": f"Bearer {token}"}
        )
    assert r.status_code == 401
    assert "revoked" in r.json()["error"]["message"]


def test_a_bad_signature_is_refused(http: httpx.Client, deployment: Deployment) -> None:
    env = note(deployment, campaign())
    sig = bytearray(base64.b64decode(env["signatures"][0]["sig"]))
    sig[0] ^= 0xFF
    env["signatures"][0]["sig"] = base64.b64encode(bytes(sig)).decode()
    with Unchanged(deployment):
        r = http.post("/v1/entries", json=env, headers=deployment.headers("writer"))
    assert r.status_code == 403
    assert error_code(r) == "bad-signature"


def test_a_signature_by_an_unenrolled_key_is_refused(http: httpx.Client, deployment: Deployment) -> None:
    from ledger.signing import SigningKey

    stranger = SigningKey.generate("stranger")
    st = deployment.ledger.make_statement("note", campaign(), {"text": "hello"})
    env = deployment.ledger.sign(st, stranger).to_json()
    with Unchanged(deployment):
        r = http.post("/v1/entries", json=env, headers=deployment.headers("writer"))
    assert r.status_code == 403
    assert error_code(r) == "unknown-signer"


def test_a_collector_key_may_not_sign_a_review(http: httpx.Client, deployment: Deployment) -> None:
    target = http.post("/v1/entries", json=note(deployment, campaign()), headers=deployment.headers("writer"))
    env = deployment.sign(
        "review", campaign(), {"result": "PASS"}, key="collector1", refs=[("reviews", target.json()["id"])]
    )
    with Unchanged(deployment):
        r = http.post("/v1/entries", json=env, headers=deployment.headers("writer"))
    assert r.status_code == 403
    assert error_code(r) == "wrong-role"


def test_a_ref_to_an_unknown_entry_is_refused(http: httpx.Client, deployment: Deployment) -> None:
    env = deployment.sign(
        "supersession", campaign(), {"reason": "x"}, key="reviewer1", refs=[("supersedes", "ab" * 32)]
    )
    with Unchanged(deployment):
        r = http.post("/v1/entries", json=env, headers=deployment.headers("writer"))
    assert r.status_code == 422
    assert error_code(r) == "dangling-ref"


def test_malformed_json_is_refused(http: httpx.Client, deployment: Deployment) -> None:
    with Unchanged(deployment):
        r = http.post(
            "/v1/entries",
            content=b'{"payload": ',
            headers={**deployment.headers("writer"), "Content-Type": "application/json"},
        )
    assert r.status_code == 400
    assert error_code(r) == "non-canonical-json"


def test_a_schema_violation_is_refused(http: httpx.Client, deployment: Deployment) -> None:
    env = note(deployment, campaign())
    st = json.loads(base64.b64decode(env["payload"]))
    st["payload"] = {"text": ""}  # note text must not be empty
    from ledger.signing import sign_envelope

    bad = sign_envelope(st, deployment.ledger.signing_key("collector1")).to_json()
    with Unchanged(deployment):
        r = http.post("/v1/entries", json=bad, headers=deployment.headers("writer"))
    assert r.status_code == 422
    assert error_code(r) == "schema-violation"


def test_an_oversized_body_is_refused(http: httpx.Client, deployment: Deployment) -> None:
    env = note(deployment, campaign(), "x" * (MAX_BODY + 10))
    with Unchanged(deployment):
        r = http.post("/v1/entries", json=env, headers=deployment.headers("writer"))
    assert r.status_code == 413
    assert error_code(r) == "request-too-large"


def test_an_oversized_batch_is_refused(http: httpx.Client, deployment: Deployment) -> None:
    with Unchanged(deployment):  # tiny items, so the count (not the body size) is what is refused
        r = http.post(
            "/v1/entries/batch",
            json={"envelopes": [{}] * (MAX_BATCH + 1)},
            headers=deployment.headers("writer"),
        )
    assert r.status_code == 413
    assert error_code(r) == "batch-too-large"


def test_an_entry_naming_an_artifact_that_was_not_uploaded_is_refused(
    http: httpx.Client, deployment: Deployment
) -> None:
    data = secrets.token_bytes(100)
    ref = ArtifactRef(name="stderr.log", digest=b3(data), size=len(data), media_type="text/plain")
    env = note(deployment, campaign(), artifacts=[ref])
    with Unchanged(deployment):
        r = http.post("/v1/entries", json=env, headers=deployment.headers("writer"))
    assert r.status_code == 404
    assert error_code(r) == "artifact-missing"


# --- reading ---


def test_search_filters_and_keyset_pagination(http: httpx.Client, deployment: Deployment) -> None:
    subj = campaign()
    w = deployment.headers("writer")
    envs = [note(deployment, {**subj, "host": f"h{i % 2}"}, f"n{i}") for i in range(5)]
    r = http.post("/v1/entries/batch", json={"envelopes": envs}, headers=w)
    ids = [e["id"] for e in r.json()["items"]]
    rd = deployment.headers("reader")
    page1 = http.get(
        "/v1/entries", params={"subject": f"campaign={subj['campaign']}", "limit": 2}, headers=rd
    )
    assert page1.status_code == 200
    body = page1.json()
    assert [e["id"] for e in body["items"]] == ids[:2]
    page2 = http.get(
        "/v1/entries",
        params={"subject": f"campaign={subj['campaign']}", "limit": 2, "after": body["next"]},
        headers=rd,
    ).json()
    assert [e["id"] for e in page2["items"]] == ids[2:4]
    both = http.get(
        "/v1/entries",
        params=[("subject", f"campaign={subj['campaign']}"), ("subject", "host=h1")],
        headers=rd,
    ).json()
    assert [e["id"] for e in both["items"]] == [ids[1], ids[3]]
    assert both["next"] is None
    by_signer = http.get(
        "/v1/entries",
        params={"signer": "collector1", "kind": "note", "order": "desc", "limit": 1},
        headers=rd,
    ).json()
    assert by_signer["items"][0]["signer_name"] == "collector1"
    last = deployment.ledger.get(ids[-1])
    until = http.get(
        "/v1/entries", params={"subject": f"campaign={subj['campaign']}", "until": last.logged_at}, headers=rd
    ).json()
    assert ids[-1] not in [e["id"] for e in until["items"]]
    since = http.get(
        "/v1/entries", params={"subject": f"campaign={subj['campaign']}", "since": last.logged_at}, headers=rd
    ).json()
    assert ids[-1] in [e["id"] for e in since["items"]]


def test_reads_need_a_token_unless_the_server_is_public(
    http: httpx.Client, public_server: Server, deployment: Deployment
) -> None:
    assert http.get("/v1/entries").status_code == 401
    assert http.get("/v1/entries", headers=deployment.headers("reader")).status_code == 200
    pub = httpx.get(public_server.url + "/v1/entries", params={"limit": 1})
    assert pub.status_code == 200
    with Unchanged(deployment):
        assert (
            httpx.post(public_server.url + "/v1/entries", json=note(deployment, campaign())).status_code
            == 401
        )


def test_one_entry_by_id_prefix_and_its_envelope_bytes(http: httpx.Client, deployment: Deployment) -> None:
    entry = http.post(
        "/v1/entries", json=note(deployment, campaign()), headers=deployment.headers("writer")
    ).json()
    rd = deployment.headers("reader")
    one = http.get(f"/v1/entries/{entry['id'][:12]}", headers=rd)
    assert one.status_code == 200
    assert one.json()["id"] == entry["id"]
    raw = http.get(f"/v1/entries/{entry['id']}", params={"envelope": "true"}, headers=rd)
    assert blake3.blake3(raw.content).hexdigest() == entry["id"]
    missing = http.get(f"/v1/entries/{'0' * 64}", headers=rd)
    assert missing.status_code == 404
    assert error_code(missing) == "entry-not-found"


# --- artifacts ---


def test_artifact_upload_is_verified_idempotent_and_downloadable_with_ranges(
    http: httpx.Client, deployment: Deployment
) -> None:
    data = secrets.token_bytes(300_000)
    d = b3(data)
    w, rd = deployment.headers("writer"), deployment.headers("reader")
    r = http.put(f"/v1/artifacts/{d}", content=data, headers=w)
    assert r.status_code == 201, r.text
    assert r.json() == {"digest": d, "size": len(data), "created": True}
    again = http.put(f"/v1/artifacts/{d}", content=data, headers=w)
    assert again.status_code == 200
    assert again.json()["created"] is False
    head = http.head(f"/v1/artifacts/{d}", headers=rd)
    assert head.status_code == 200
    assert int(head.headers["content-length"]) == len(data)
    full = http.get(f"/v1/artifacts/{d}", headers=rd)
    assert full.content == data
    part = http.get(f"/v1/artifacts/{d}", headers={**rd, "Range": "bytes=100-199"})
    assert part.status_code == 206
    assert part.content == data[100:200]
    assert part.headers["content-range"] == f"bytes 100-199/{len(data)}"
    tail = http.get(f"/v1/artifacts/{d}", headers={**rd, "Range": "bytes=-10"})
    assert tail.content == data[-10:]
    beyond = http.get(f"/v1/artifacts/{d}", headers={**rd, "Range": f"bytes={len(data)}-"})
    assert beyond.status_code == 416
    assert http.get(f"/v1/artifacts/{d}").status_code == 401
    # the entry that names it is now accepted
    ref = ArtifactRef(name="blob.bin", digest=d, size=len(data))
    entry = http.post("/v1/entries", json=note(deployment, campaign(), artifacts=[ref]), headers=w)
    assert entry.status_code == 201, entry.text


def test_an_upload_whose_bytes_do_not_match_the_address_is_refused(
    http: httpx.Client, deployment: Deployment
) -> None:
    data = secrets.token_bytes(5000)
    claimed = b3(secrets.token_bytes(10))
    with Unchanged(deployment, claimed, b3(data)):
        r = http.put(f"/v1/artifacts/{claimed}", content=data, headers=deployment.headers("writer"))
    assert r.status_code == 422
    assert error_code(r) == "integrity"
    assert http.head(f"/v1/artifacts/{claimed}", headers=deployment.headers("reader")).status_code == 404


def test_artifact_uploads_need_a_writer_and_respect_the_size_limit(
    http: httpx.Client, deployment: Deployment
) -> None:
    small = secrets.token_bytes(1000)
    with Unchanged(deployment, b3(small)):
        assert http.put(f"/v1/artifacts/{b3(small)}", content=small).status_code == 401
        r = http.put(f"/v1/artifacts/{b3(small)}", content=small, headers=deployment.headers("reader"))
        assert r.status_code == 403
    big = secrets.token_bytes(MAX_ARTIFACT + 1)
    with Unchanged(deployment, b3(big)):
        r = http.put(f"/v1/artifacts/{b3(big)}", content=big, headers=deployment.headers("writer"))
    assert r.status_code == 413
    assert error_code(r) == "artifact-too-large"

    def chunks() -> Any:  # no Content-Length: the limit is enforced while streaming
        for i in range(0, len(big), 65536):
            yield big[i : i + 65536]

    with Unchanged(deployment, b3(big)):
        r = http.put(f"/v1/artifacts/{b3(big)}", content=chunks(), headers=deployment.headers("writer"))
    assert r.status_code == 413
    bad = http.put("/v1/artifacts/sha256:abc", content=small, headers=deployment.headers("writer"))
    assert bad.status_code == 422


# --- log proofs ---


def test_checkpoint_and_proofs_verify_offline(http: httpx.Client, deployment: Deployment) -> None:
    rd = deployment.headers("reader")
    entry = http.post(
        "/v1/entries", json=note(deployment, campaign()), headers=deployment.headers("writer")
    ).json()
    cp = http.get("/v1/checkpoint", headers=rd).json()
    assert cp["size"] >= entry["seq"] + 1
    pub = cp["log_public_key"]
    inc = http.get(f"/v1/proofs/inclusion/{entry['id']}", headers=rd)
    assert inc.status_code == 200
    assert verify_proof_document(inc.json(), pub, cp["log_key_name"])
    old = entry["seq"]
    con = http.get("/v1/proofs/consistency", params={"old": old}, headers=rd)
    assert con.status_code == 200, con.text
    assert verify_proof_document(con.json(), pub, cp["log_key_name"])
    too_big = http.get("/v1/checkpoint", params={"size": 10**9}, headers=rd)
    assert too_big.status_code == 404  # no tree of that size exists: not found, not malformed
    assert error_code(too_big) == "entry-not-found"
    assert too_big.headers["content-type"] == "application/problem+json"


# --- policy ---


def seed_campaign(dep: Deployment) -> dict[str, Any]:
    """A small campaign: host and model pass, the only engine launch never gets ready, probes are fresh."""
    tag = secrets.token_hex(4)
    subj = {"campaign": f"c-{tag}", "backend": "vllm", "model": f"org/m-{tag}", "host": f"h-{tag}"}
    rev = "1" * 40
    led = dep.ledger
    rec = {
        "probe": led.record(
            "host.probe",
            subj,
            # the GPU's index as the driver gives it: a GPU listed without one tells no index (8fb3cf5)
            {"hostname": subj["host"], "os": "linux", "kernel": "6.8", "gpus": [{"index": 0, "name": "GPU"}]},
            key="collector1",
        ),
        # the env snapshot beside the host probe: the host gate judges the host on both (fix 157)
        "env": led.record(
            "env.snapshot",
            subj,
            {"interpreter": "/opt/vllm/bin/python", "python": "3.12.3"},
            key="collector1",
        ),
        "pin": led.record(
            "model.pin",
            subj,
            {
                "repo_id": subj["model"],
                "revision": rev,
                "root": "/m",
                "total_size": 1,
                "verification": "passed",
                "files": [{"path": "m.bin", "size": 1, "sha256": "a" * 64, "blake3": "blake3:" + "b" * 64}],
            },
            key="collector1",
        ),
        "launch": led.record(
            "engine.launch",
            subj,
            {
                "engine": "vllm",
                # no job binds the engine's interpreter: the launch names the one it ran, the env
                # snapshot's (the host gate counts the snapshot by it, fix 164)
                "command": ["/opt/vllm/bin/python", "-m", "vllm.entrypoints.openai.api_server"],
                "started_at": "2026-09-10T09:00:00Z",
                "ready": False,
                "bindings": {"model_revision": rev, "model_repo": subj["model"]},
                # where it served: its probes asked that server (probe-other-endpoint, fix 159)
                "details": {"base_url": "http://127.0.0.1:8000"},
            },
            key="collector1",
        ),
        "health": led.record(
            "health.probe",
            subj,
            {
                "endpoint": "http://127.0.0.1:8000/health",
                "check": "health",
                "ok": True,
                "http_status": 200,
                "sleeping": False,
            },
            key="collector1",
        ),
        "models": led.record(
            "health.probe",
            subj,
            {
                "endpoint": "http://127.0.0.1:8000/v1/models",
                "check": "models",
                "ok": True,
                "http_status": 200,
                "model_identity": subj["model"],
            },
            key="collector1",
        ),
        "completion": led.record(
            "health.probe",
            subj,
            {
                "endpoint": "http://127.0.0.1:8000/v1/chat",
                "check": "completion",
                "ok": True,
                "http_status": 200,
                "text": "READY",
                "max_tokens": 8,
            },
            key="collector1",
        ),
    }
    return {"subject": subj, "ids": {k: v.entry_id for k, v in rec.items()}}


def ledger_cli(dep: Deployment, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [LEDGER_BIN, "--home", str(dep.home), *args], capture_output=True, timeout=120, check=False
    )


def test_verdict_is_the_cli_verdict_json_byte_for_byte(http: httpx.Client, deployment: Deployment) -> None:
    seeded = seed_campaign(deployment)
    subj, ids = seeded["subject"], seeded["ids"]
    size = deployment.ledger.size()
    rd = deployment.headers("reader")
    params = {"subject": f"campaign={subj['campaign']}", "at": str(size)}
    r = http.get("/v1/verdict", params=params, headers=rd)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("application/json")
    cli = ledger_cli(
        deployment, "verdict", "--subject", f"campaign={subj['campaign']}", "--at", str(size), "--json"
    )
    assert cli.returncode == 0, cli.stderr
    assert r.content == cli.stdout  # the same canonical bytes, newline included
    v = r.json()
    assert r.content == canonical_bytes(v) + b"\n"
    assert v["verdict"] == "NOT QUALIFIED — RUNTIME RELIABILITY"
    assert v["status"] == "not_qualified"
    assert v["subject"] == {"campaign": subj["campaign"]}
    assert v["identity"] == {"backend": "vllm", "model": subj["model"], "host": subj["host"]}
    assert v["policy"]["name"] == "backend-qualification"
    assert v["checkpoint"]["size"] == size
    gates = {g["name"]: g for g in v["gates"]}
    assert gates["host-prerequisites"]["status"] == "passed"
    assert gates["model-pinned"]["status"] == "passed"
    assert gates["api-readiness"]["status"] == "failed"
    assert "reached API readiness" in gates["api-readiness"]["reason"]
    assert gates["ready-control"]["status"] == "not_authorized"
    assert ids["launch"] in gates["api-readiness"]["evidence"]
    assert {ids["probe"], ids["env"], ids["pin"], ids["launch"], ids["health"]} <= set(v["used"])
    # the completion is api-readiness evidence too (the model its answer names), read there; its own gate,
    # ready-control, was not reached
    assert ids["completion"] in gates["api-readiness"]["evidence"]
    assert v["counts"]["considered"] == 7

    # the default policy is backend-qualification; naming it changes nothing
    named = http.get("/v1/verdict", params={**params, "policy": "backend-qualification"}, headers=rd)
    assert named.content == r.content


def test_verdict_errors_come_from_the_error_handler(http: httpx.Client, deployment: Deployment) -> None:
    rd = deployment.headers("reader")
    with Unchanged(deployment):
        unknown = http.get("/v1/verdict", params={"subject": "campaign=no-such-campaign"}, headers=rd)
        assert unknown.status_code == 404
        assert error_code(unknown) == "entry-not-found"
        for policy, code in (
            ("no-such-policy", "bad-policy"),
            ("routing-change", "bad-policy"),  # a routing policy gives no verdict
            ("../../etc/passwd", "bad-input"),  # a name, never a path
            ("/tmp/x.toml", "bad-input"),
        ):
            r = http.get("/v1/verdict", params={"subject": "campaign=x", "policy": policy}, headers=rd)
            assert r.status_code == 422, (policy, r.text)
            assert error_code(r) == code, policy
        assert http.get("/v1/verdict", headers=rd).status_code == 422  # no subject
        bad = http.get("/v1/verdict", params={"subject": "campaign"}, headers=rd)
        assert bad.status_code == 422
        assert http.get("/v1/verdict", params={"subject": "campaign=x"}).status_code == 401


def test_routing_check_refuses_without_a_qualified_verdict_and_allows_a_restoration(
    http: httpx.Client, deployment: Deployment
) -> None:
    from ledger.entries import format_time, now_utc
    from ledger.policy import evaluate, load_policy, record_verdict

    seeded = seed_campaign(deployment)
    subj = seeded["subject"]
    rd = deployment.headers("reader")
    target = {"model": subj["model"], "host": subj["host"]}
    route_target = {"backend": subj["backend"], **target}  # a route names its backend; a restoration need not

    none = http.post("/v1/routing-check", json={"subject": route_target}, headers=rd)
    assert none.status_code == 200, none.text
    assert none.json()["allowed"] is False
    assert none.json()["reasons"] == [
        "no trusted backend-qualification verdict recorded for "
        f"backend={subj['backend']} host={subj['host']} model={subj['model']}",
        f"no deployment layout for {subj['host']}: the GPU checks cannot be judged (give the host's layout "
        "after the change — `--deployment FILE`, or the request body's `deployment` — or record an allowed "
        "routing.change with one)",
    ]

    result = evaluate(deployment.ledger, {"campaign": subj["campaign"]}, load_policy("backend-qualification"))
    recorded = record_verdict(deployment.ledger, result, key="reviewer1")
    now = format_time(now_utc())
    with Unchanged(deployment):
        route = http.post("/v1/routing-check", json={"subject": route_target, "now": now}, headers=rd)
    assert route.status_code == 200, route.text
    body = route.json()
    assert body["allowed"] is False
    assert body["verdict"]["entry"] == recorded.entry_id
    assert body["verdict"]["verdict"] == "NOT QUALIFIED — RUNTIME RELIABILITY"
    assert any("not QUALIFIED" in reason for reason in body["reasons"]), body["reasons"]
    cli = ledger_cli(
        deployment,
        "check",
        "routing-change",
        "--subject",
        f"backend={subj['backend']}",
        "--subject",
        f"model={subj['model']}",
        "--subject",
        f"host={subj['host']}",
        "--now",
        now,
        "--json",
    )
    assert cli.returncode == 1, cli.stderr
    assert json.loads(cli.stdout) == body  # the same answer as the CLI's

    restore = http.post("/v1/routing-check", json={"subject": target, "action": "restore"}, headers=rd)
    assert restore.status_code == 200, restore.text
    assert restore.json()["allowed"] is True, restore.json()["reasons"]
    assert restore.json()["reasons"] == []
    assert {c["name"]: c["status"] for c in restore.json()["checks"]}["restoration-identity"] == "passed"

    crowded = {
        "subject": target,
        "action": "restore",
        "deployment": {
            "host": subj["host"],
            "services": [
                {
                    "engine": "vllm",
                    "name": "text",
                    "model": "other",
                    "gpus": [0],
                    "gpu_memory_utilization": 0.85,
                },
                {
                    "engine": "vllm",
                    "name": "embed",
                    "model": subj["model"],
                    "gpus": [0],
                    "gpu_memory_utilization": 0.25,
                },
            ],
        },
    }
    full = http.post("/v1/routing-check", json=crowded, headers=rd)
    assert full.status_code == 200, full.text
    assert full.json()["allowed"] is False
    assert full.json()["reasons"] == ["GPU0 gpu_memory_utilization sum 1.1 > 0.88 (text 0.85 + embed 0.25)"]


def test_routing_check_refuses_malformed_requests(http: httpx.Client, deployment: Deployment) -> None:
    rd = deployment.headers("reader")
    target = {"backend": "b", "model": "m", "host": "h"}
    with Unchanged(deployment):
        for body, code in (
            ({"subject": {"backend": "b", "model": "m"}}, "bad-input"),  # no host
            ({"subject": {"model": "m", "host": "h"}}, "bad-input"),  # a route names its backend
            ({"subject": {**target, "campaign": "c"}}, "bad-input"),  # verdicts are not matched on it
            ({"subject": target, "action": "fly"}, "bad-input"),
            ({"subject": target, "now": "the day before"}, "bad-input"),
            ({"subject": target, "now": "9999-12-31T23:59:59Z"}, "bad-input"),  # out of range, as the CLI's
            ({"subject": target, "now": 5}, "bad-input"),
            (
                {
                    "subject": target,
                    "deployment": {"services": [{"engine": "vllm", "name": "a", "gpus": "0"}]},
                },
                "bad-input",
            ),
            ({"subject": target, "deployment": {"services": []}}, "bad-input"),
            ({"subject": target, "policy": "backend-qualification"}, "bad-policy"),
            ({"subject": target, "policy": "../routing-change"}, "bad-input"),
            ({"subject": target, "extra": 1}, "bad-input"),
            ([], "bad-input"),
        ):
            r = http.post("/v1/routing-check", json=body, headers=rd)
            assert r.status_code == 422, (body, r.text)
            assert error_code(r) == code, (body, r.text)
        # a utilisation with more digits than a float keeps is refused, as in a --deployment file (it was
        # read as 0.44 + 0.44 under a 0.88 bound and allowed)
        r = http.post(
            "/v1/routing-check",
            content=(
                b'{"subject": {"backend": "b", "model": "m", "host": "h"}, "deployment": {"host": "h", '
                b'"services": [{"engine": "vllm", "name": "a", "gpus": [0], "gpu_memory_utilization": 0.44}, '
                b'{"engine": "vllm", "name": "b", "gpus": [0], '
                b'"gpu_memory_utilization": 0.440000000000000001}]}}'
            ),
            headers={**rd, "content-type": "application/json"},
        )
        assert r.status_code in (400, 422), r.text
        assert "0.440000000000000001 has more digits than can be kept exactly" in r.text
        not_json = http.post("/v1/routing-check", content=b"{", headers=rd)
        assert not_json.status_code == 400
        assert http.post("/v1/routing-check", json={"subject": target}).status_code == 401


# --- keys and subjects ---


def test_keys_and_subjects(http: httpx.Client, deployment: Deployment) -> None:
    rd = deployment.headers("reader")
    keys = http.get("/v1/keys", headers=rd).json()["items"]
    assert {"admin", "collector1", "reviewer1"} <= {k["name"] for k in keys}
    subj = campaign()
    http.post("/v1/entries", json=note(deployment, subj), headers=deployment.headers("writer"))
    subjects = http.get("/v1/subjects", params={"field": "campaign"}, headers=rd).json()["items"]
    assert subj["campaign"] in [s["value"] for s in subjects]


# --- one list shape ---


def _list_operations(doc: dict[str, Any]) -> set[tuple[str, str]]:
    """Operations of the OpenAPI document that answer a list: their 2xx schema is the Page, or an array."""
    out: set[tuple[str, str]] = set()
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            for status, resp in op.get("responses", {}).items():
                if not status.startswith("2"):
                    continue
                for media in resp.get("content", {}).values():
                    schema = media.get("schema", {})
                    if schema.get("$ref", "").endswith("/Page") or schema.get("type") == "array":
                        out.add((method.upper(), path))
    return out


def test_every_list_endpoint_answers_the_clis_list_shape(http: httpx.Client, deployment: Deployment) -> None:
    from ledger.listing import LIST_FIELDS

    rd = deployment.headers("reader")
    doc = http.get("/openapi.json").json()
    page = doc["components"]["schemas"]["Page"]
    assert tuple(page["properties"]) == LIST_FIELDS
    # no endpoint answers a bare array: every list is the Page (a new list endpoint must be run below)
    for path, ops in doc["paths"].items():
        for op in ops.values():
            for status, resp in op.get("responses", {}).items():
                for media in resp.get("content", {}).values():
                    assert media.get("schema", {}).get("type") != "array", (path, status)
    subj = campaign()
    first, second = note(deployment, subj, "one"), note(deployment, subj, "two")
    calls = {
        ("POST", "/v1/entries/batch"): lambda: http.post(
            "/v1/entries/batch", json={"envelopes": [first, second]}, headers=deployment.headers("writer")
        ),
        ("GET", "/v1/entries"): lambda: http.get(
            "/v1/entries", params={"subject": f"campaign={subj['campaign']}", "limit": 1}, headers=rd
        ),
        ("GET", "/v1/keys"): lambda: http.get("/v1/keys", headers=rd),
        ("GET", "/v1/subjects"): lambda: http.get("/v1/subjects", headers=rd),
    }
    assert _list_operations(doc) == set(calls)
    bodies = {}
    for op, call in calls.items():
        r = call()
        assert r.status_code in (200, 201), (op, r.text)
        bodies[op] = r.json()
        assert tuple(bodies[op]) == LIST_FIELDS, op
        assert isinstance(bodies[op]["items"], list), op
    # the batch appended two entries; the search page of one names the cursor of the next
    assert [e["duplicate"] for e in bodies[("POST", "/v1/entries/batch")]["items"]] == [False, False]
    one = bodies[("GET", "/v1/entries")]
    assert len(one["items"]) == 1 and isinstance(one["next"], int)
    rest = http.get(
        "/v1/entries", params={"subject": f"campaign={subj['campaign']}", "after": one["next"]}, headers=rd
    ).json()
    assert [e["payload"]["text"] for e in rest["items"]] == ["two"] and rest["next"] is None


def test_routing_check_reads_now_as_the_cli_does(http: httpx.Client, deployment: Deployment) -> None:
    """Found by an audit: a reference time without a zone was read as UTC by `--now` but refused by the API
    with a kind-schema error ("check the payload against its kind's schema"), and a time the CLI refuses
    as out of range was judged by the API. One parser (``parse_when``) reads both."""
    rd = deployment.headers("reader")
    target = {"backend": "b", "model": "m", "host": "h"}
    # 7b65cde: the gate judges the log as it stood at `now`, so `now` is after what this deployment logged
    # (a fixed past date held no entry: 422); the three spellings of one instant
    later = datetime.now(UTC).replace(microsecond=0, tzinfo=None) + timedelta(days=1)
    spellings = (
        later.isoformat(),
        later.isoformat() + "Z",
        (later + timedelta(hours=2)).isoformat() + "+02:00",
    )
    with Unchanged(deployment):
        answers = [
            http.post("/v1/routing-check", json={"subject": target, "now": now}, headers=rd)
            for now in spellings
        ]
        before = http.post(
            "/v1/routing-check", json={"subject": target, "now": "2000-01-01T00:00:00Z"}, headers=rd
        )
    assert [a.status_code for a in answers] == [200, 200, 200], [a.text for a in answers]
    assert answers[0].json() == answers[1].json() == answers[2].json()
    # before the log's first entry there is nothing to judge as of then, a bad input as the CLI says
    assert before.status_code == 422 and "no entry logged at or before" in before.text, before.text
