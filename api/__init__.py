"""HTTP API: a FastAPI adapter over ledger.service (installed as ledger.api)."""
