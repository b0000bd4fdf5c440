"""Repository-wide pytest settings: Hypothesis without wall-clock deadlines (CI machines are shared)."""

from hypothesis import HealthCheck, settings

settings.register_profile("ledger", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ledger")
