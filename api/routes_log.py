"""The log's own record: signed checkpoints, inclusion and consistency proofs."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query

from ledger.api.auth import Reader
from ledger.api.deps import LedgerDep
from ledger.api.models import PROBLEM
from ledger.errors import EntryNotFoundError
from ledger.log import Checkpoint
from ledger.service import Ledger

__all__ = ["router"]

EntryIdPath = Annotated[str, Path(pattern=r"^[0-9a-f]{8,64}$", description="entry id or unique prefix")]

router = APIRouter(
    prefix="/v1",
    tags=["log"],
    responses={401: PROBLEM, 404: PROBLEM, 422: PROBLEM},
)


def checkpoint_at(ledger: Ledger, size: int | None) -> Checkpoint:
    """Sign (and keep) a checkpoint; a concurrent request keeping the same size first is not an error.
    A size beyond the log names a tree that does not exist (yet): 404."""
    if size is not None and size > (current := ledger.size()):
        raise EntryNotFoundError(
            f"the log has {current} entries; there is no checkpoint at size {size}",
            hint=f"ask for a size from 0 to {current}, or leave size out for the whole log",
        )
    return ledger.keep_checkpoint(size)


@router.get("/checkpoint", summary="A signed checkpoint (C2SP signed note) of the log")
def get_checkpoint(
    ledger: LedgerDep,
    _who: Reader,
    size: Annotated[int | None, Query(ge=0, description="tree size (default: whole log)")] = None,
) -> dict[str, Any]:
    cp = checkpoint_at(ledger, size)
    return {
        **cp.to_json(),
        "log_key_name": ledger.log_key_name,
        "log_public_key": ledger.log_public_key().b64,
    }


@router.get("/proofs/inclusion/{entry_id}", summary="Inclusion proof of an entry against a signed checkpoint")
def proof_inclusion(
    ledger: LedgerDep, _who: Reader, entry_id: EntryIdPath, size: Annotated[int | None, Query(ge=1)] = None
) -> dict[str, Any]:
    checkpoint_at(ledger, size)
    return ledger.inclusion(entry_id, size=size)


@router.get("/proofs/consistency", summary="Consistency proof between two tree sizes, with both checkpoints")
def proof_consistency(
    ledger: LedgerDep,
    _who: Reader,
    old: Annotated[int, Query(ge=0)],
    new: Annotated[int | None, Query(ge=0)] = None,
) -> dict[str, Any]:
    checkpoint_at(ledger, new)
    checkpoint_at(ledger, old)
    return ledger.consistency(old, new)
