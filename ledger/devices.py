"""Which GPU a ``*_VISIBLE_DEVICES`` item names on a host probe's GPU list — one rule, read by the collector's
host gate before it launches an engine and by the policy (``e.derived.launch_devices_missing``,
``_launch_devices``) when it judges what was recorded.

An item names a probed GPU by its index (ASCII digits: the driver's index, or where a GPU records none its
place in the list), by its UUID (``GPU-…``), or — for a MIG instance (``MIG-…``) — by the UUID of a MIG
device the probe lists under that GPU (``mig_devices``): the instance runs on that GPU. The legacy name of
drivers before R470, ``MIG-<GPU UUID>/<GPU instance id>/<compute instance id>``, names the instance of those
ids that the probe lists under the GPU of that UUID. Anything else names nothing the probe lists: a malformed
list, a MIG device without a ``MIG-`` UUID (or, for the legacy name, without both instance ids), a legacy
name whose ids are not ASCII digits — fail closed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = [
    "NO_DEVICE_ITEM",
    "VISIBLE_DEVICES",
    "device_of",
    "gpu_at",
    "gpu_index",
    "gpu_name",
    "gpus_gone_at",
    "gpus_not_listed",
    "index_text",
    "items_not_listed",
    "visible_device_items",
]

VISIBLE_DEVICES = (
    "CUDA_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
    "NVIDIA_VISIBLE_DEVICES",
)
# values of a *_VISIBLE_DEVICES item that name no one device (NVIDIA's "all", "none", "void"; an empty list)
NO_DEVICE_ITEM = frozenset({"", "all", "none", "void"})
MIG_PREFIX = "MIG-"


def index_text(item: str) -> bool:
    """A device index as the drivers read it: ASCII digits only (``str.isdigit`` also takes ``²``, ``١``,
    ``１``, which no driver reads as an index — and ``int`` refuses some of them)."""
    return item.isascii() and item.isdigit()


def visible_device_items(env: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Each ``(VAR, item)`` an environment's ``*_VISIBLE_DEVICES`` names one device by (stripped; a value
    that is not a string, and the items that name no one device — ``all``, ``none``, ``void``, empty —
    left out)."""
    out: list[tuple[str, str]] = []
    for var in VISIBLE_DEVICES:
        value = env.get(var)
        if isinstance(value, str):
            out += [(var, item.strip()) for item in value.split(",")]
    return [(var, item) for var, item in out if item.lower() not in NO_DEVICE_ITEM]


def _lists_mig(gpu: Mapping[str, Any], item: str) -> bool:
    """Does the probed GPU list a MIG device whose UUID is ``item``? (a ``mig_devices`` that is not a list
    of objects, or a device whose ``uuid`` is not a ``MIG-`` string, lists none)"""
    migs = gpu.get("mig_devices")
    if not isinstance(migs, list):
        return False
    return any(
        isinstance(m, dict)
        and isinstance(m.get("uuid"), str)
        and m["uuid"].startswith(MIG_PREFIX)
        and m["uuid"] == item
        for m in migs
    )


def _legacy_mig(item: str) -> tuple[str, int, int] | None:
    """``(GPU UUID, GPU instance id, compute instance id)`` of a legacy MIG name
    ``MIG-GPU-<uuid>/<gi>/<ci>``, or None where ``item`` is not one (ids of ASCII digits only)."""
    if not item.startswith(MIG_PREFIX + "GPU-"):
        return None
    parts = item[len(MIG_PREFIX) :].split("/")
    if len(parts) != 3 or not parts[0] or not all(index_text(p) for p in parts[1:]):
        return None
    return parts[0], int(parts[1]), int(parts[2])


def _lists_legacy_mig(gpu: Mapping[str, Any], name: tuple[str, int, int]) -> bool:
    """Is the probed GPU the one a legacy MIG name's UUID names, listing an instance of its two ids? (ids
    recorded as integers; a device that records neither, or not as integers, is not that instance)"""
    uuid, gi, ci = name
    migs = gpu.get("mig_devices")
    if gpu.get("uuid") != uuid or not isinstance(migs, list):
        return False
    return any(
        isinstance(m, dict)
        and type(m.get("gpu_instance_id")) is int
        and type(m.get("compute_instance_id")) is int
        and (m["gpu_instance_id"], m["compute_instance_id"]) == (gi, ci)
        for m in migs
    )


def device_of(item: str, gpus: Any) -> dict[str, Any] | None:
    """The probed GPU (an object of a host probe's ``gpus``) a ``*_VISIBLE_DEVICES`` item names — by index
    (a GPU's ``index``, or where it records none as an integer its place in the list), by its UUID, or as
    the GPU a MIG instance of that UUID runs on — or None: the probe does not list it."""
    if not isinstance(gpus, list) or not item:
        return None
    by_index = index_text(item)
    mig = item.startswith(MIG_PREFIX)
    legacy = _legacy_mig(item) if mig else None
    for place, g in enumerate(gpus):
        if not isinstance(g, dict):
            continue
        if by_index:
            if (g.get("index") if type(g.get("index")) is int else place) == int(item):
                return g
        elif legacy is not None:
            if _lists_legacy_mig(g, legacy):
                return g
        elif g.get("uuid") == item or (mig and _lists_mig(g, item)):
            return g
    return None


def items_not_listed(items: Sequence[tuple[str, str]], gpus: Any) -> list[tuple[str, str]]:
    """The ``(VAR, item)`` of ``items`` (``visible_device_items``) that name no GPU of a probe's list."""
    return [(var, item) for var, item in items if device_of(item, gpus) is None]


def _gpu_index(gpu: Any, place: int) -> int:
    """A probed GPU's index: its ``index`` where it records one as an integer, else its place in the list
    (as ``device_of`` reads an index item; an entry that is not an object, too)."""
    index = gpu.get("index") if isinstance(gpu, Mapping) else None
    return index if type(index) is int else place


gpu_index = _gpu_index  # the one rule, for the routing gate: which index a listed GPU is at


def _gpu_uuid(gpu: Mapping[str, Any]) -> str | None:
    uuid = gpu.get("uuid")
    return uuid if isinstance(uuid, str) and uuid.strip() else None


def _same_gpu(a: Mapping[str, Any], a_place: int, b: Mapping[str, Any], b_place: int) -> bool:
    """Are two probed GPUs (each with its place in its probe's list) the same GPU? By UUID where both
    record one — a GPU replaced by another at the same index is not the same GPU, and a GPU whose index
    moved (another fell off the bus before it) still is — else by index (``_gpu_index``)."""
    ua, ub = _gpu_uuid(a), _gpu_uuid(b)
    if ua is not None and ub is not None:
        return ua == ub
    return _gpu_index(a, a_place) == _gpu_index(b, b_place)


def gpu_name(gpu: Any, place: int) -> str:
    """A probed GPU as a reason names it: ``GPU2 (GPU-…)``, its index as ``_gpu_index`` reads it."""
    if not isinstance(gpu, Mapping):
        return f"GPU at place {place} (not an object)"
    uuid = _gpu_uuid(gpu)
    return f"GPU{_gpu_index(gpu, place)}" + (f" ({uuid})" if uuid is not None else "")


def gpus_not_listed(seen: Any, now: Any) -> list[tuple[int, Any]]:
    """The GPUs of one host probe's list (``seen``) that another probe's list (``now``) does not list, each
    as ``(place in seen, GPU)``: the same GPU by UUID where both record one, else by index (an ``index``
    recorded as an integer, else the GPU's place in its list). An entry of ``seen`` that is not an object
    is not found either (which GPU it is cannot be told: fail closed); ``now`` that is not a list lists
    none; ``seen`` that is not a list names none."""
    if not isinstance(seen, list):
        return []
    listed = [(p, g) for p, g in enumerate(now) if isinstance(g, Mapping)] if isinstance(now, list) else []
    out: list[tuple[int, Any]] = []
    for place, gpu in enumerate(seen):
        if not isinstance(gpu, Mapping) or not any(_same_gpu(gpu, place, g, p) for p, g in listed):
            out.append((place, gpu))
    return out


def gpu_at(gpus: Any, index: int) -> tuple[int, Any] | None:
    """The first GPU of a probe's list at ``index`` (as ``gpu_index`` reads it), with its place; None where
    the list (or what is not a list) holds none there."""
    if not isinstance(gpus, list):
        return None
    return next(((p, g) for p, g in enumerate(gpus) if _gpu_index(g, p) == index), None)


def gpus_gone_at(seen: Any, now: Any, indexes: Iterable[int]) -> list[tuple[int, Any]]:
    """The GPUs of ``seen`` at one of ``indexes`` that ``now`` does not list (``gpus_not_listed``: the same
    GPU by UUID where both record one, else by index): where one is, the GPU at that index is not the GPU
    ``seen`` showed there — gone, or replaced by another GPU (another UUID at its index)."""
    wanted = set(indexes)
    return [(p, g) for p, g in gpus_not_listed(seen, now) if _gpu_index(g, p) in wanted]
