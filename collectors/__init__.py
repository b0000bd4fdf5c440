"""Collectors that run on GPU hosts and record what they saw (installed as ledger.collectors)."""
