"""The log's own record: signed checkpoints, inclusion and consistency proofs."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query

from ledger.api.auth import Reader
from ledger.api.deps import LedgerDep
from ledger.api.models import ErrorOut
from ledger.log import Checkpoint
from ledger.service import Ledger

__all__ = ["router"]

EntryIdPath = Annotated[str, Path(pattern=r"^[0-9a-f]{8,64}$", description="entry id or unique prefix")]

router = APIRouter(
    prefix="/v1",
    tags=["log"],
    responses={401: {"model": ErrorOut}, 404: {"model": ErrorOut}, 422: {"model": ErrorOut}},
)


def checkpoint_at(ledger: Ledger, size: int | None) -> Checkpoint:
    """A checkpoint signed over the log as the database holds it now: a read, so nothing is written and
    no lock is taken (the sequencer publishes the kept ones after appends)."""
    return ledger.signed_checkpoint(size=size)


@router.get("/checkpoint", summary="A signed checkpoint (C2SP signed note) of the log")
def get_checkpoint(
    ledger: LedgerDep,
    _who: Reader,
    size: Annotated[int | None, Query(ge=0, description="tree size (default: whole log)")] = None,
) -> dict[str, Any]:
    cp = checkpoint_at(ledger, size)
    return {
        **cp.to_json(),
        "log_key_name": ledger.note_key_name,
        "log_public_key": ledger.log_public_key().b64,
        "log_vkey": ledger.verifier_key(),
    }


@router.get("/proofs/inclusion/{entry_id}", summary="Inclusion proof of an entry against a signed checkpoint")
def proof_inclusion(
    ledger: LedgerDep, _who: Reader, entry_id: EntryIdPath, size: Annotated[int | None, Query(ge=1)] = None
) -> dict[str, Any]:
    return ledger.inclusion(entry_id, size=size)


@router.get("/proofs/consistency", summary="Consistency proof between two tree sizes, with both checkpoints")
def proof_consistency(
    ledger: LedgerDep,
    _who: Reader,
    old: Annotated[int, Query(ge=0)],
    new: Annotated[int | None, Query(ge=0)] = None,
) -> dict[str, Any]:
    return ledger.consistency(old, new)
