"""The GPU-fault catalogue (collectors/gpu_faults.toml): every parsed kernel event gets its class, the
payload cites the catalogue by digest, an unknown code is its own class, and a bad catalogue is refused."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import tomllib
from datetime import UTC, datetime
from pathlib import Path

import pytest

from ledger.cli import main
from ledger.collectors.kernel import KernelRead, classify_kernel_events, kernel_payload, parse_kernel_log
from ledger.entries import validate_payload
from ledger.errors import ConfigError
from ledger.gpu_faults import DEFAULT_CATALOGUE, UNRECOGNISED, GpuEventClass, classify_events, load_catalogue
from ledger.hashing import blake3_hex
from ledger.service import Ledger

from .conftest import FIXTURES

KERNEL = FIXTURES / "kernel"
BOOT = datetime(2026, 9, 1, 17, 0, 0, tzinfo=UTC)


def _classified(name: str) -> list[dict[str, object]]:
    return classify_kernel_events(parse_kernel_log((KERNEL / name).read_text(), boot_time=BOOT))


def test_catalogue_codes_from_real_looking_nvrm_lines() -> None:
    events = _classified("xid_catalogue_codes.dmesg")
    got = [(e.get("xid", e["kind"]), e["fault_class"]) for e in events]
    assert got == [
        (13, "application"),
        (31, "application"),
        (43, "application"),
        (48, "memory-ecc"),
        (63, "informational"),
        (64, "memory-ecc"),
        (74, "interconnect"),
        (79, "gpu-fault"),
        ("gpu-fell-off-bus", "gpu-fault"),
        (154, "informational"),
        (92, "memory-ecc"),
        (94, "memory-ecc"),
        (95, "memory-ecc"),
        (119, "driver"),
        (154, "informational"),
        (999, "unknown"),
    ]
    by_xid = {e["xid"]: e for e in events if "xid" in e}
    assert by_xid[79]["mnemonic"] == "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS"
    assert by_xid[48]["mnemonic"] == "ROBUST_CHANNEL_GPU_ECC_DBE"
    assert "mnemonic" not in by_xid[999]  # nothing is invented for an unknown code; it is still kept
    assert not any("e1000e" in str(e["message"]) for e in events)


def test_xid154_names_the_recovery_action_and_the_xid_it_summarises() -> None:
    events = _classified("xid_catalogue_codes.dmesg")
    x154 = [e for e in events if e.get("xid") == 154]
    # after Xid 79 on 3b:00: reboot; on 86:00 the latest linked Xid is 95 (119 has no Xid 154 linkage)
    assert [(e["device"], e["recovery_action"], e["related_xid"]) for e in x154] == [
        ("PCI:0000:3b:00", "Node Reboot Required", 79),
        ("PCI:0000:86:00", "GPU Reset Required", 95),
    ]
    assert all("recovery_action" not in e for e in events if e.get("xid") != 154)


def test_xid79_fallen_off_bus_incident() -> None:
    events = _classified("xid79_fallen_off_bus.dmesg")
    assert [(e["kind"], e.get("xid"), e["fault_class"]) for e in events] == [
        ("nvrm-xid", 79, "gpu-fault"),
        ("gpu-fell-off-bus", None, "gpu-fault"),
        ("nvrm-xid", 154, "informational"),
    ]
    assert events[2]["recovery_action"] == "Node Reboot Required"
    cat = load_catalogue()
    assert cat.xids[79].immediate == "RESTART_BM"
    assert cat.xids[79].investigatory == "CONTACT_SUPPORT"
    assert cat.xids[79].xid154  # NVIDIA's "Xid 154 linkage" column
    assert cat.events["gpu-fell-off-bus"].same_as_xid == 79


def test_mes_unrecoverable_reset_incident() -> None:
    events = _classified("mes_unrecoverable_reset.log")
    assert [(e["kind"], e["fault_class"]) for e in events] == [
        ("mes-failure", "driver"),
        ("mes-unrecoverable", "gpu-fault"),
        ("mes-failure", "driver"),
        ("queue-eviction-failed", "driver"),
        ("amdgpu-ring-timeout", "gpu-fault"),
        ("gpu-reset-begin", "gpu-fault"),
        ("vram-lost", "gpu-fault"),
        ("gpu-reset-succeeded", "informational"),
    ]


def test_payload_cites_the_catalogue_by_digest_and_validates() -> None:
    text = (KERNEL / "xid_catalogue_codes.dmesg").read_text()
    payload = kernel_payload(KernelRead("file", True, text))
    assert payload["catalogue"] == {
        "name": "gpu-faults",
        "version": load_catalogue().version,
        "digest": "blake3:" + blake3_hex(DEFAULT_CATALOGUE.read_bytes()),
    }
    assert len(payload["events"]) == 16  # the unknown Xid 999 is kept
    assert payload["events"][-1]["fault_class"] == "unknown"
    validate_payload("kernel.log", 1, payload)  # the strict model accepts the classified payload


def test_every_event_kind_the_collector_names_has_a_catalogue_class() -> None:
    from ledger.collectors.kernel import EVENT_PATTERNS

    cat = load_catalogue()
    kinds = {k for k, _ in EVENT_PATTERNS} - {"nvrm-xid", UNRECOGNISED}
    assert kinds == set(cat.events), "add the new event kind to collectors/gpu_faults.toml"
    assert UNRECOGNISED not in cat.events  # its class is `unknown`: it fails closed


@pytest.mark.parametrize(
    ("line", "kind", "fault_class"),
    [
        ("NVRM: GPU 0000:3b:00.0: RmInitAdapter failed! (0x26:0x56:1474)", "gpu-init-failed", "gpu-fault"),
        ("NVRM: GPU 0000:3b:00.0: GPU is lost", "gpu-lost", "gpu-fault"),
        (
            "amdgpu 0000:03:00.0: amdgpu: 2 uncorrectable hardware errors detected in umc block",
            "uncorrectable-memory-error",
            "memory-ecc",
        ),
        (
            "nvidia: module verification failed: signature and/or required key missing - tainting kernel",
            "driver-module-unsigned",
            "informational",
        ),
        # a GPU line that says something failed and that no kind knows: kept, unknown (contact support)
        ("amdgpu 0000:03:00.0: [drm] *ERROR* psp gfx command LOAD_TA(0x1) failed", UNRECOGNISED, "unknown"),
        ("NVRM: nvAssertFailedNoLog: Assertion failed: 0 @ gpu_mgr.c:296", UNRECOGNISED, "unknown"),
    ],
)
def test_gpu_lines_no_earlier_kind_knew_are_recorded_never_dropped(
    line: str, kind: str, fault_class: str
) -> None:
    """Regression: the kernel collector dropped GPU lines no pattern knew (RmInitAdapter failed, a RAS
    uncorrectable error, a GPU lost, any new *ERROR*): a run beside them was judged as if the log were
    clean. Each is now an event, and one no kind knows is class `unknown`, which fails closed."""
    (event,) = parse_kernel_log(f"[  100.000000] {line}\n")
    assert event["kind"] == kind
    (fact,) = classify_events([event], load_catalogue())
    assert fact["fault_class"] == fault_class


def test_benign_gpu_driver_lines_are_not_events() -> None:
    text = "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.54.15\n[drm] Initialized amdgpu 3.57.0\n"
    assert parse_kernel_log(text) == []


def test_unknown_kinds_and_codes_are_unknown_never_dropped() -> None:
    cat = load_catalogue()
    facts = classify_events(
        [
            {"kind": "nvrm-xid", "xid": 424242, "message": "m"},
            {"kind": "nvrm-xid", "message": "no code"},
            {"kind": "nvrm-xid", "xid": "79", "message": "a string is not a code"},
            {"kind": "some-new-event", "message": "m"},
            {"message": "no kind"},
        ],
        cat,
    )
    assert [f["fault_class"] for f in facts] == ["unknown"] * 5
    assert facts[0]["code"] == "xid:424242"


def test_an_unreadable_xid154_action_is_not_none() -> None:
    facts = classify_events(
        [{"kind": "nvrm-xid", "xid": 154, "message": "GPU recovery action garbled"}], load_catalogue()
    )
    assert facts[0]["recovery_action"] == "unreadable recovery action"
    facts = classify_events(
        [{"kind": "nvrm-xid", "xid": 154, "message": "recovery action changed from 0x0 (None) to 0x9 (New)"}],
        load_catalogue(),
    )
    assert facts[0]["recovery_action"] == "unknown recovery action 0x9"


def test_catalogue_classes_are_the_closed_set() -> None:
    cat = load_catalogue()
    assert {r.fault_class for r in cat.xids.values()} | {r.fault_class for r in cat.events.values()} <= set(
        GpuEventClass
    ) - {GpuEventClass.UNKNOWN}
    # one vocabulary: the catalogue's [classes] table names exactly the code's closed set (host-memory, the
    # OOM killer's class, included), and every class but unknown has a row
    classes = tomllib.loads(DEFAULT_CATALOGUE.read_text())["classes"]
    assert set(classes) == {c.value for c in GpuEventClass}
    assert "host-memory" in classes
    used = {r.fault_class for r in cat.xids.values()} | {r.fault_class for r in cat.events.values()}
    assert used == set(GpuEventClass) - {GpuEventClass.UNKNOWN}


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda s: s.replace('class = "gpu-fault"\n', 'class = "catastrophic"\n', 1), "class 'catastrophic'"),
        (lambda s: s.replace('class = "gpu-fault"\n', 'class = "unknown"\n', 1), "class 'unknown'"),
        (
            lambda s: (
                s + '\n[[xid]]\ncode = 79\nmnemonic = "X"\ndescription = "d"\nimmediate = "IGNORE"\n'
                'investigatory = "IGNORE"\nclass = "gpu-fault"\n'
            ),
            "duplicate Xid code 79",
        ),
        (lambda s: s.replace("code = 13\n", "code = 13\nseverity = 3\n"), "unknown field(s) severity"),
        (
            lambda s: re.sub(r"version = \d+\n", 'version = "1"\n', s, count=1),
            "version must be a positive integer",
        ),
        (lambda s: s.replace('thermal = "', 'heat = "', 1), "must name exactly the classes"),
        (lambda s: re.sub(r"\nhost-memory = [^\n]*", "", s, count=1), "must name exactly the classes"),
        (
            lambda s: s.replace("[classes]\n", '[classes]\nswap = "swapping"\n', 1),
            "must name exactly the classes",
        ),
    ],
)
def test_a_bad_catalogue_is_refused(tmp_path: Path, edit: object, message: str) -> None:
    bad = tmp_path / "gpu_faults.toml"
    bad.write_text(edit(DEFAULT_CATALOGUE.read_text()))  # type: ignore[operator]
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_catalogue(bad)


def test_collect_kernel_records_classes_and_the_catalogue_then_exports(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """End to end: `ledger collect kernel --file` records the classified events and the catalogue it used;
    `ledger export attestation` turns that entry into a bundle whose subject is the raw log (sha256 too)."""
    log = KERNEL / "xid79_fallen_off_bus.dmesg"
    args = ["--home", str(home), "collect", "kernel", "--file", str(log), "--campaign", "c1", "--json"]
    assert main(args) == 0
    recorded = json.loads(capsys.readouterr().out)
    led = Ledger.open(home)
    try:
        entry = led.get(recorded["entry"])
        payload = entry.statement.payload
        assert payload["catalogue"]["digest"] == "blake3:" + blake3_hex(DEFAULT_CATALOGUE.read_bytes())
        assert [e["fault_class"] for e in payload["events"]] == ["gpu-fault", "gpu-fault", "informational"]
        led.new_key("exporter", ["exporter"])
    finally:
        led.close()
    assert main(["--home", str(home), "export", "attestation", recorded["entry"]]) == 0
    bundle = json.loads(capsys.readouterr().out)
    statement = json.loads(base64.b64decode(bundle["dsseEnvelope"]["payload"]))
    (subject,) = statement["subject"]
    assert subject["name"] == "kernel.log"
    assert subject["digest"]["sha256"] == hashlib.sha256(log.read_bytes()).hexdigest()
    assert statement["predicate"]["payload"]["catalogue"] == payload["catalogue"]


# --- NVIDIA's Xid table (Ampere and newer), catalogue version 2 ---------------------------------------------

# every code the catalogue lists: NVIDIA's rows 1-172 minus the "Unused" ones and the DLA rows (152, 153)
LISTED = (
    {8, 11, 13, 25, 31, 32, 37, 38, 39, 40, 41, 43, 44, 45, 46, 48, 54, 60, 62, 63, 64, 66, 67, 68, 69}
    | {70, 71, 72, 74, 75, 76, 77, 78, 79, 80, 82, 83, 84, 85, 86, 88, 89, 92, 93, 94, 95}
    | set(range(96, 108))
    | {109, 110, 119, 120, 121}
    | set(range(126, 138))
    | {139, 140, 141, 142, 143}
    | set(range(144, 152))
    | set(range(154, 173))
)
UNUSED = (
    set(range(1, 8))
    | {9, 10, 12}
    | set(range(14, 25))
    | set(range(26, 31))
    | set(range(33, 37))
    | {42, 47}
    | set(range(49, 54))
    | set(range(55, 60))
    | {61, 65, 73, 81, 87, 90, 91, 108}
    | set(range(111, 119))
    | set(range(122, 126))
    | {138, 152, 153}
)


def test_the_catalogue_lists_exactly_nvidias_used_rows() -> None:
    cat = load_catalogue()
    assert cat.version == 4  # 4: the OOM killer's events, class host-memory (the Xid rows are version 3's)
    assert set(cat.xids) == LISTED
    assert not LISTED & UNUSED
    assert set(range(1, 173)) == LISTED | UNUSED


@pytest.mark.parametrize(
    ("codes", "mnemonic", "immediate", "investigatory", "cls", "linked"),
    [
        ([39, 40, 41], "ROBUST_CHANNEL_CE{n}_ERROR", "RESTART_APP", "CONTACT_SUPPORT", "application", False),
        (
            [70, 71, 72, 75, 76, 77, 85],
            "ROBUST_CHANNEL_CE{n}_ERROR",
            "RESTART_APP",
            "CONTACT_SUPPORT",
            "application",
            False,
        ),
        (
            list(range(126, 136)),
            "ROBUST_CHANNEL_CE{n}_ERROR",
            "RESTART_APP",
            "CONTACT_SUPPORT",
            "application",
            False,
        ),
        (
            [68, 83, 84, 88, 89, 96, 97, 98],
            "ROBUST_CHANNEL_NVDEC{n}_ERROR",
            "RESTART_APP",
            "CONTACT_SUPPORT",
            "application",
            False,
        ),
        (
            [82, *range(99, 106)],
            "ROBUST_CHANNEL_NVJPG{n}_ERROR",
            "RESTART_APP",
            "CONTACT_SUPPORT",
            "application",
            False,
        ),
        ([86, 139], "ROBUST_CHANNEL_OFA{n}_ERROR", "RESTART_APP", "CONTACT_SUPPORT", "application", False),
        (
            list(range(144, 151)),
            "NVLINK_{n}_ERROR",
            "WORKFLOW_NVLINK5_ERR",
            "WORKFLOW_NVLINK5_ERR",
            "interconnect",
            True,
        ),
        ([160, 161], "CHANNEL_RETIREMENT_{n}", "IGNORE", "INVESTIGATE_SW", "driver", True),
        ([163, 164, 165], "PSHC_{n}", "N/A (guidance only)", "N/A (not listed)", "thermal", False),
        ([171, 172], "UNCORRECTABLE_{n}_ERROR", "N/A (not listed)", "N/A (not listed)", "memory-ecc", False),
    ],
)
def test_added_code_ranges(
    codes: list[int], mnemonic: str, immediate: str, investigatory: str, cls: str, linked: bool
) -> None:
    cat = load_catalogue()
    prefix, _, suffix = mnemonic.partition("{n}")
    for code in codes:
        row = cat.xids[code]
        assert row.mnemonic.startswith(prefix) and row.mnemonic.endswith(suffix), (code, row.mnemonic)
        assert (row.immediate, row.investigatory, str(row.fault_class)) == (immediate, investigatory, cls), (
            code
        )
        assert bool(row.xid154) is linked, code


def test_single_added_rows_carry_nvidias_buckets() -> None:
    cat = load_catalogue()
    rows = {c: cat.xids[c] for c in (25, 60, 93, 141, 142, 151, 159, 162, 166, 167, 168, 169, 170)}
    got = {c: (r.mnemonic, r.immediate, r.investigatory, str(r.fault_class)) for c, r in rows.items()}
    assert got == {
        25: ("ROBUST_CHANNEL_GR_ILLEGAL_NOTIFY", "RESTART_APP", "CHECK_APP/CUDA", "application"),
        60: ("ROBUST_CHANNEL_SEC2_ERROR", "RESTART_APP", "INVESTIGATE_SW", "application"),
        93: ("INFOROM_ERASE_LIMIT_EXCEEDED", "IGNORE", "CONTACT_SUPPORT", "driver"),
        141: ("ROBUST_CHANNEL_FAST_PATH_ERROR", "IGNORE", "CONTACT_SUPPORT", "driver"),
        142: ("ROBUST_CHANNEL_NVENC3_ERROR", "CONTACT_SUPPORT", "N/A (not listed)", "application"),
        151: ("ROBUST_CHANNEL_KEY_ROTATION_ERROR", "RESTART_VM", "CONTACT_SUPPORT", "driver"),
        159: ("ROBUST_CHANNEL_CHI_NON_DATA_ERROR", "CHECK_UVM", "SYMPATHETIC_REPORT_SOLO", "interconnect"),
        162: ("PSHC_REENGAGED", "N/A (not listed)", "N/A (not listed)", "informational"),
        166: ("NVLINK_SECURE_CRYPTO_ERR", "N/A (guidance only)", "N/A (not listed)", "interconnect"),
        167: ("PCIE_FATAL_TIMEOUT", "N/A (not listed)", "N/A (not listed)", "interconnect"),
        168: ("REDUCED_GPU_MEMORY_CAPACITY", "N/A (guidance only)", "N/A (not listed)", "memory-ecc"),
        169: ("SEC2_HALT_ERROR", "N/A (not listed)", "N/A (not listed)", "gpu-fault"),
        170: ("NVLINK_SECURE_OTHER", "N/A (guidance only)", "N/A (not listed)", "interconnect"),
    }


@pytest.mark.parametrize("code", [1, 14, 47, 108, 138, 152, 153, 173, 999])
def test_unused_and_unlisted_codes_are_unknown_contact_support(code: int) -> None:
    """NVIDIA's "Unused" rows (bucketed CONTACT_SUPPORT), the DLA rows and codes past the table are the
    class `unknown`, kept with their code, never dropped."""
    (fact,) = classify_events([{"kind": "nvrm-xid", "xid": code, "message": "m"}], load_catalogue())
    assert fact == {
        "fault_class": "unknown",
        "code": f"xid:{code}",
        "recovery_action": None,
        "related_xid": None,
        # what an OOM-killer line names: an Xid line names none of it
        "process": None,
        "pid": None,
        "oom_scope": None,
        "summary": None,
    }


def test_xid154_follows_a_new_nvlink5_xid_and_reads_the_newer_actions() -> None:
    """Xid 145 has an Xid 154 linkage: the Xid 154 after it names it; 0x7 is NVML's SYSTEM_REBOOT."""
    events = [
        {"kind": "nvrm-xid", "xid": 145, "device": "PCI:0000:3b:00", "message": "NVLINK: RLW Error"},
        {
            "kind": "nvrm-xid",
            "xid": 154,
            "device": "PCI:0000:3b:00",
            "message": "GPU recovery action changed from 0x0 (None) to 0x7 (System Reboot)",
        },
    ]
    facts = classify_events(events, load_catalogue())
    assert [f["fault_class"] for f in facts] == ["interconnect", "informational"]
    assert (facts[1]["recovery_action"], facts[1]["related_xid"]) == ("System Reboot", 145)
