"""Alembic environment and versions: the only owner of the ledger schema."""
