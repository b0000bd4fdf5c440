"""Alembic environment: runs migrations online against the URL the ledger passes in."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context

from ledger.db import METADATA

config = context.config
target_metadata = METADATA


def run_migrations_online() -> None:
    url = config.get_main_option("sqlalchemy.url")
    assert url is not None
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    with engine.connect() as connection:
        context.configure(connection=connection, target_metadata=target_metadata, render_as_batch=True)
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


if context.is_offline_mode():
    raise SystemExit("offline migrations are not supported; run `ledger init`")
run_migrations_online()
