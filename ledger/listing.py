"""The one JSON shape of a list: the CLI's ``--json`` list reads and every list endpoint of the API.

``{"items": [...], "next": CURSOR}`` — ``next`` is the cursor of the next page (for the log: the seq to
pass as ``--after`` / ``?after=``), or null when there is none. Both sides build it here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

__all__ = ["LIST_FIELDS", "SUBJECT_FIELDS", "list_json", "page_of"]

# Subject fields the collectors, the policies and the README use — the one list: the CLI accepts others with a
# warning, the API's subject list refuses a field neither this list nor the log knows (`commit`: the code
# revision a gate.result measured, which the review rule reads — docs/POLICY.md).
SUBJECT_FIELDS = ("campaign", "backend", "backend_version", "model", "host", "deployment", "job", "commit")

LIST_FIELDS = ("items", "next")


def list_json(items: Iterable[Any], next_cursor: Any = None) -> dict[str, Any]:
    """A list as the CLI prints it under ``--json`` and the API answers it."""
    return {"items": list(items), "next": next_cursor}


_T = TypeVar("_T")


def page_of(rows: Sequence[_T], limit: int, cursor: Callable[[_T], Any]) -> tuple[list[_T], Any]:
    """One page of a list read ``limit + 1`` rows long: its first ``limit`` rows and the cursor of the next
    page (``cursor`` of the page's last row), None when no row is left over (the last page)."""
    return list(rows[:limit]), cursor(rows[limit - 1]) if len(rows) > limit else None
