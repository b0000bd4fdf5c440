"""The append-only log tables, checkpoints and API tokens, with triggers refusing UPDATE/DELETE.

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

LOG_TABLES = ("log_entries", "entry_subjects", "entry_refs", "entry_artifacts", "checkpoints")


def upgrade() -> None:
    op.create_table(
        "log_entries",
        sa.Column("seq", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("entry_id", sa.String(64), nullable=False, unique=True),
        sa.Column("kind", sa.String(64), nullable=False, index=True),
        sa.Column("signer", sa.String(64), nullable=False, index=True),
        sa.Column("collected_at", sa.String(40), nullable=False),
        sa.Column("logged_at", sa.String(40), nullable=False, index=True),
        sa.Column("envelope", sa.LargeBinary, nullable=False),
        sa.Column("leaf_hash", sa.String(64), nullable=False),
        sa.Column("prev_hash", sa.String(64), nullable=False),
        sa.Column("chain_hash", sa.String(64), nullable=False),
    )
    op.create_table(
        "entry_subjects",
        sa.Column("seq", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("field", sa.String(64), primary_key=True),
        sa.Column("value", sa.String(512), nullable=False),
    )
    op.create_index("ix_entry_subjects_field_value_seq", "entry_subjects", ["field", "value", "seq"])
    op.create_table(
        "entry_refs",
        sa.Column("seq", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("rel", sa.String(40), primary_key=True),
        sa.Column("target_id", sa.String(64), primary_key=True),
    )
    op.create_index("ix_entry_refs_target_id", "entry_refs", ["target_id"])
    op.create_table(
        "entry_artifacts",
        sa.Column("seq", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("name", sa.String(200), primary_key=True),
        sa.Column("digest", sa.String(71), nullable=False, index=True),
        sa.Column("stored", sa.Boolean, nullable=False),
    )
    op.create_table(
        "checkpoints",
        sa.Column("size", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("root", sa.String(64), nullable=False),
        sa.Column("note", sa.Text, nullable=False),
        sa.Column("created_at", sa.String(40), nullable=False),
    )
    op.create_table(
        "api_tokens",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("name", sa.String(100), nullable=False, index=True),
        sa.Column("role", sa.String(20), nullable=False),
        sa.Column("token_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("created_at", sa.String(40), nullable=False),
        sa.Column("revoked_at", sa.String(40), nullable=True),
    )

    dialect = op.get_bind().dialect.name
    if dialect == "sqlite":
        for table in LOG_TABLES:
            for action in ("UPDATE", "DELETE"):
                op.execute(
                    f"CREATE TRIGGER {table}_no_{action.lower()} BEFORE {action} ON {table} "
                    f"BEGIN SELECT RAISE(ABORT, '{table} is append-only: {action} refused'); END"
                )
    elif dialect == "postgresql":
        op.execute(
            "CREATE FUNCTION ledger_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$ "
            "BEGIN RAISE EXCEPTION '% is append-only: % refused', TG_TABLE_NAME, TG_OP; END $$"
        )
        for table in LOG_TABLES:
            op.execute(
                f"CREATE TRIGGER {table}_append_only BEFORE UPDATE OR DELETE ON {table} "
                "FOR EACH ROW EXECUTE FUNCTION ledger_refuse_change()"
            )
            op.execute(
                f"CREATE TRIGGER {table}_no_truncate BEFORE TRUNCATE ON {table} "
                "FOR EACH STATEMENT EXECUTE FUNCTION ledger_refuse_change()"
            )
    else:
        raise RuntimeError(f"unsupported database dialect {dialect}")


def downgrade() -> None:
    raise RuntimeError("the ledger schema is append-only; downgrading would drop evidence")
