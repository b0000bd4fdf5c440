"""The one JSON shape of a list: the CLI's ``--json`` list reads and every list endpoint of the API.

``{"items": [...], "next": CURSOR}`` — ``next`` is the cursor of the next page (for the log: the seq to
pass as ``--after`` / ``?after=``), or null when there is none. Both sides build it here.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["LIST_FIELDS", "list_json"]

LIST_FIELDS = ("items", "next")


def list_json(items: Iterable[Any], next_cursor: Any = None) -> dict[str, Any]:
    """A list as the CLI prints it under ``--json`` and the API answers it."""
    return {"items": list(items), "next": next_cursor}
