"""The import-linter contracts in pyproject.toml cover the whole package: no core module escapes them."""

from __future__ import annotations

import pkgutil
import tomllib
from pathlib import Path

import ledger

REPO = Path(__file__).resolve().parents[1]
ADAPTERS = {"ledger.cli", "ledger.api", "ledger.collectors"}


def _contracts() -> dict[str, dict[str, object]]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]
    assert config["root_package"] == "ledger"
    return {str(c.get("id", c["name"])): c for c in config["contracts"]}


def test_the_core_contract_names_every_module_but_the_adapters() -> None:
    children = {f"ledger.{m.name}" for m in pkgutil.iter_modules(ledger.__path__)}
    assert children >= ADAPTERS
    sources = _contracts()["core-frameworks"]["source_modules"]
    assert isinstance(sources, list)
    assert set(sources) == children - ADAPTERS, "add new core modules to the contract in pyproject.toml"
    assert len(sources) == len(set(sources))


def test_the_core_contract_forbids_every_adapter_framework() -> None:
    forbidden = _contracts()["core-frameworks"]["forbidden_modules"]
    assert isinstance(forbidden, list)
    assert {"typer", "rich", "fastapi", "starlette", "uvicorn", "httpx", "jinja2"} <= set(forbidden)
