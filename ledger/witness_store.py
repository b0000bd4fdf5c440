"""A witness's own state: its Ed25519 key, its name, the logs it knows and the latest checkpoint it
cosigned for each (SQLite through SQLAlchemy), and the tlog-witness ``add-checkpoint`` decision.

``ledger witness init|add-log|serve`` (the CLI) and the witness HTTP app (``ledger.api.witness``) call this.
"""

from __future__ import annotations

import json
import threading
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from ledger.atomic import write_atomic
from ledger.db import make_engine, write_transaction
from ledger.entries import format_time, now_utc
from ledger.errors import ConfigError, InputError, LedgerError, ProofError
from ledger.log import parse_checkpoint, parse_verifier_key, verify_consistency
from ledger.signing import SigningKey
from ledger.witness import SIZE_MEDIA_TYPE, MalformedRequest, cosign, parse_add_checkpoint, witness_vkey

__all__ = ["WitnessHome", "WitnessReplyOut"]

CONFIG = "witness.toml"
KEY_FILE = "witness.key"

_meta = sa.MetaData()
T_LOGS = sa.Table(
    "witness_logs",
    _meta,
    sa.Column("origin", sa.String(512), primary_key=True),
    sa.Column("vkey", sa.Text, nullable=False),
    sa.Column("size", sa.BigInteger, nullable=False),  # the latest cosigned size (0: none yet)
    sa.Column("root", sa.String(64), nullable=True),  # its root, hex (NULL: none yet)
    sa.Column("updated_at", sa.String(40), nullable=False),
)


@dataclass(frozen=True)
class WitnessReplyOut:
    """What the HTTP app answers: status, body, media type."""

    status: int
    body: str
    media_type: str = "text/plain; charset=utf-8"


class WitnessHome:
    """A witness directory: ``witness.toml`` (name, database), ``witness.key`` (PEM), ``witness.db``."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        cfg = self.path / CONFIG
        if not cfg.is_file():
            raise ConfigError(f"no witness at {self.path}", hint="make one with `ledger witness init DIR`")
        try:
            data = tomllib.loads(cfg.read_text())
            self.name = str(data["name"])
            url = str(data["database_url"])
        except (tomllib.TOMLDecodeError, KeyError) as e:
            raise ConfigError(f"{cfg}: {e}") from e
        if url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).is_absolute():
            url = "sqlite:///" + str(self.path / url.removeprefix("sqlite:///"))
        self.key = SigningKey.load(self.name, self.path / KEY_FILE)
        self.engine: Engine = make_engine(url)
        _meta.create_all(self.engine)
        self._lock = threading.Lock()

    @classmethod
    def init(cls, path: Path, name: str) -> WitnessHome:
        path = Path(path)
        if (path / CONFIG).exists():
            raise InputError(f"a witness already exists at {path}")
        witness_vkey(name, SigningKey.generate(name).public)  # the name must be a key name
        path.mkdir(parents=True, exist_ok=True)
        SigningKey.generate(name).save(path / KEY_FILE)
        text = f"name = {json.dumps(name)}\ndatabase_url = {json.dumps('sqlite:///witness.db')}\n"
        write_atomic(path / CONFIG, text.encode())
        return cls(path)

    def close(self) -> None:
        self.engine.dispose()

    @property
    def vkey(self) -> str:
        return witness_vkey(self.name, self.key.public)

    def add_log(self, vkey: str) -> str:
        """Know the log whose checkpoints ``vkey`` (its C2SP verifier key; name = origin) signs."""
        origin, _ = parse_verifier_key(vkey)
        with write_transaction(self.engine) as conn:
            row = conn.execute(sa.select(T_LOGS.c.vkey).where(T_LOGS.c.origin == origin)).first()
            if row is not None and row.vkey != vkey.strip():
                raise InputError(f"the witness already knows log {origin!r} with another key")
            if row is None:
                conn.execute(
                    sa.insert(T_LOGS).values(
                        origin=origin, vkey=vkey.strip(), size=0, root=None, updated_at=format_time(now_utc())
                    )
                )
        return origin

    def logs(self) -> list[dict[str, object]]:
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(T_LOGS).order_by(T_LOGS.c.origin)).all()
        return [{"origin": r.origin, "vkey": r.vkey, "size": r.size, "root": r.root} for r in rows]

    def add_checkpoint(self, body: bytes, *, now: int | None = None) -> WitnessReplyOut:
        """tlog-witness add-checkpoint: 200 and the cosignature line; 400 malformed (or old size beyond
        the checkpoint); 404 unknown origin; 403 no trusted signature; 409 (``text/x.tlog.size``) when
        the old size is not the latest cosigned one, or the same size has another root; 422 when the
        consistency proof does not verify. The check and the update are one transaction."""
        try:
            req = parse_add_checkpoint(body)
        except MalformedRequest as e:
            return WitnessReplyOut(400, f"malformed request: {e}\n")
        if req.old_size > req.size:
            return WitnessReplyOut(400, f"old size {req.old_size} is beyond the checkpoint size {req.size}\n")
        with self._lock, write_transaction(self.engine) as conn:
            row = conn.execute(sa.select(T_LOGS).where(T_LOGS.c.origin == req.origin)).first()
            if row is None:
                return WitnessReplyOut(404, f"unknown log origin {req.origin!r}\n")
            try:
                name, pub = parse_verifier_key(row.vkey)
                parse_checkpoint(req.note, name, pub)
            except LedgerError as e:
                return WitnessReplyOut(403, f"no valid signature by the log key: {e.message}\n")
            size, root = int(row.size), bytes.fromhex(row.root) if row.root else None
            if req.old_size != size:
                return WitnessReplyOut(409, f"{size}\n", SIZE_MEDIA_TYPE)
            if req.old_size == req.size and size and root != req.root:
                return WitnessReplyOut(409, f"{size}\n", SIZE_MEDIA_TYPE)
            if req.old_size == 0 and req.proof:
                return WitnessReplyOut(422, "the consistency proof from size 0 must be empty\n")
            if req.old_size:
                try:
                    verify_consistency(req.old_size, req.size, root or b"", req.root, req.proof)
                except ProofError as e:
                    return WitnessReplyOut(422, f"consistency proof does not verify: {e.message}\n")
            conn.execute(
                sa.update(T_LOGS)
                .where(T_LOGS.c.origin == req.origin)
                .values(size=req.size, root=req.root.hex(), updated_at=format_time(now_utc()))
            )
        stamp = int(time.time()) if now is None else now
        return WitnessReplyOut(200, cosign(req.note, self.key, self.name, stamp))
