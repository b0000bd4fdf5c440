"""Log format 2: each Merkle leaf commits the log's record; 64-bit sequence numbers on PostgreSQL.

Format 1 hashed the bare envelope into each leaf, so nothing signed committed an entry's ``logged_at`` or
its position. This revision gives every row its ``LogRecord`` bytes (index, logged_at, entry id, kind,
signer) and sets its leaf hash to SHA-256(0x00 || record). Checkpoints signed before it keep their rows and
are marked ``format = 1``: ``ledger verify`` checks them against the format-1 tree (the envelopes' leaves),
which the stored envelopes still give. The append-only triggers are dropped for the rewrite of the leaf
column alone and created again in the same transaction. Run it with ``ledger migrate``.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from ledger.log import LogRecord

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

_SEQ_COLUMNS = (
    ("log_entries", "seq"),
    ("entry_subjects", "seq"),
    ("entry_refs", "seq"),
    ("entry_artifacts", "seq"),
    ("checkpoints", "size"),
)
_PAGE = 5000


def _drop_update_trigger(dialect: str) -> None:
    if dialect == "sqlite":
        op.execute("DROP TRIGGER IF EXISTS log_entries_no_update")
    else:
        op.execute("DROP TRIGGER IF EXISTS log_entries_append_only ON log_entries")


def _create_update_trigger(dialect: str) -> None:
    if dialect == "sqlite":
        op.execute(
            "CREATE TRIGGER log_entries_no_update BEFORE UPDATE ON log_entries "
            "BEGIN SELECT RAISE(ABORT, 'log_entries is append-only: UPDATE refused'); END"
        )
    else:
        op.execute(
            "CREATE TRIGGER log_entries_append_only BEFORE UPDATE OR DELETE ON log_entries "
            "FOR EACH ROW EXECUTE FUNCTION ledger_refuse_change()"
        )


def upgrade() -> None:
    bind = op.get_bind()
    dialect = bind.dialect.name
    op.add_column("log_entries", sa.Column("record", sa.LargeBinary, nullable=True))
    op.add_column("checkpoints", sa.Column("format", sa.Integer, nullable=False, server_default="1"))
    if dialect == "postgresql":
        for table, column in _SEQ_COLUMNS:
            op.alter_column(table, column, type_=sa.BigInteger, existing_nullable=False)

    _drop_update_trigger(dialect)
    entries = sa.table(
        "log_entries",
        sa.column("seq", sa.BigInteger),
        sa.column("entry_id", sa.String),
        sa.column("kind", sa.String),
        sa.column("signer", sa.String),
        sa.column("logged_at", sa.String),
        sa.column("record", sa.LargeBinary),
        sa.column("leaf_hash", sa.String),
    )
    update = (
        sa.update(entries)
        .where(entries.c.seq == sa.bindparam("s"))
        .values(record=sa.bindparam("r"), leaf_hash=sa.bindparam("h"))
    )
    last = -1
    while True:
        rows = bind.execute(
            sa.select(
                entries.c.seq, entries.c.entry_id, entries.c.kind, entries.c.signer, entries.c.logged_at
            )
            .where(entries.c.seq > last)
            .order_by(entries.c.seq)
            .limit(_PAGE)
        ).all()
        if not rows:
            break
        params = []
        for seq, entry_id, kind, signer, logged_at in rows:
            rec = LogRecord(int(seq), str(logged_at), str(entry_id), str(kind), str(signer))
            data = rec.to_bytes()
            params.append({"s": seq, "r": data, "h": rec.leaf().hex()})
        bind.execute(update, params)
        last = rows[-1][0]
    _create_update_trigger(dialect)


def downgrade() -> None:
    raise RuntimeError("the ledger schema is append-only; downgrading would drop evidence")
