"""Witness cosignatures of published checkpoints (C2SP tlog-cosignature).

The log submits each checkpoint it publishes to its configured witnesses (``[[witness]]`` in ledger.toml);
each cosignature line a witness returns is kept here, by checkpoint size and the witness's key name, and
served appended to the checkpoint note. A table of its own: the checkpoints stay as signed.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "cosignatures",
        sa.Column("size", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("witness", sa.String(512), primary_key=True),
        sa.Column("root", sa.String(64), nullable=False),
        sa.Column("line", sa.Text, nullable=False),
        sa.Column("created_at", sa.String(40), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("cosignatures")
