"""Prometheus metrics of one API process."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

__all__ = ["Metrics"]


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "ledger_http_requests",
            "HTTP requests by route and status",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "ledger_http_request_seconds", "Request latency by route", ["route"], registry=self.registry
        )
        self.appended = Counter(
            "ledger_entries_appended", "Entries appended through the API", registry=self.registry
        )
        self.duplicates = Counter(
            "ledger_entries_duplicate", "Re-sent entries recognised by id", registry=self.registry
        )
        self.artifact_bytes = Counter(
            "ledger_artifact_bytes_uploaded", "Artifact bytes stored via the API", registry=self.registry
        )
        self.size = Gauge("ledger_log_size", "Entries in the log", registry=self.registry)

    def track_size(self, ledger: Any) -> None:
        self.size.set_function(lambda: float(ledger.size()))

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        self.requests.labels(method, route, str(status)).inc()
        self.latency.labels(route).observe(seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)
