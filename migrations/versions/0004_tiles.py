"""The Merkle tree persisted as full C2SP hash tiles, so no process holds the whole tree.

A ``tiles`` row is the full hash tile ``level``/``idx`` (256 hashes of the height-``8 * level`` subtrees) of
the log whose entry at ``last_seq`` (the tile's last leaf) has ``chain_hash``; ``root`` is the hash of the
subtree the tile spans (a hash of the tile one level up). Reads join ``log_entries`` on (last_seq,
chain_hash), so a tile of a log a rollback lost is never read. The table is append-only like the log.
This revision writes the tiles of the entries already logged, streaming the leaves in pages (bounded
memory). Run it with ``ledger migrate``.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from ledger.tiles import TileBuilder

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

_PAGE = 5000


def upgrade() -> None:
    bind = op.get_bind()
    dialect = bind.dialect.name
    op.create_table(
        "tiles",
        sa.Column("level", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("idx", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("chain_hash", sa.String(64), primary_key=True),
        sa.Column("last_seq", sa.BigInteger, nullable=False, index=True),
        sa.Column("hashes", sa.LargeBinary, nullable=False),
        sa.Column("root", sa.LargeBinary, nullable=False),
    )
    if dialect == "sqlite":
        for action in ("UPDATE", "DELETE"):
            op.execute(
                f"CREATE TRIGGER tiles_no_{action.lower()} BEFORE {action} ON tiles "
                f"BEGIN SELECT RAISE(ABORT, 'tiles is append-only: {action} refused'); END"
            )
    else:
        op.execute(
            "CREATE TRIGGER tiles_append_only BEFORE UPDATE OR DELETE ON tiles "
            "FOR EACH ROW EXECUTE FUNCTION ledger_refuse_change()"
        )
        op.execute(
            "CREATE TRIGGER tiles_no_truncate BEFORE TRUNCATE ON tiles "
            "FOR EACH STATEMENT EXECUTE FUNCTION ledger_refuse_change()"
        )

    entries = sa.table(
        "log_entries", sa.column("seq", sa.BigInteger), sa.column("leaf_hash"), sa.column("chain_hash")
    )
    tiles = sa.table(
        "tiles",
        sa.column("level", sa.Integer),
        sa.column("idx", sa.BigInteger),
        sa.column("chain_hash", sa.String),
        sa.column("last_seq", sa.BigInteger),
        sa.column("hashes", sa.LargeBinary),
        sa.column("root", sa.LargeBinary),
    )
    builder = TileBuilder()
    last = -1
    while True:
        rows = bind.execute(
            sa.select(entries.c.seq, entries.c.leaf_hash, entries.c.chain_hash)
            .where(entries.c.seq > last)
            .order_by(entries.c.seq)
            .limit(_PAGE)
        ).all()
        if not rows:
            break
        out = []
        for seq, leaf, chain in rows:
            if int(seq) != len(builder):
                return  # a gap in the log: `ledger verify` names it; tiles stop where the log breaks
            for t in builder.append(bytes.fromhex(str(leaf))):
                out.append(
                    {
                        "level": t.level,
                        "idx": t.index,
                        "chain_hash": str(chain),
                        "last_seq": t.last_seq,
                        "hashes": t.hashes,
                        "root": t.root,
                    }
                )
        if out:
            bind.execute(sa.insert(tiles), out)
        last = rows[-1][0]


def downgrade() -> None:
    raise RuntimeError("the ledger schema is append-only; downgrading would drop evidence")
