"""CEL conditions: compiled once when a policy loads, evaluated against plain JSON-like contexts.

The expression language is CEL through ``common-expression-language`` (import name ``cel``, a Rust
implementation); ``docs/POLICY.md`` says why it was chosen over ``cel-python``. Every condition knows where
it was written (policy file and line) so that compile and evaluation errors name that place.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import cel

from ledger.errors import PolicyError

__all__ = ["Condition", "compile_condition", "shared_context"]


def shared_context(variables: Mapping[str, Any]) -> cel.Context:
    """A CEL context whose variables are converted once and reused by every condition evaluated on it."""
    return cel.Context(variables=dict(variables))


@dataclass(frozen=True)
class Condition:
    """One compiled CEL expression and the place in a policy file where it was written."""

    source: str
    where: str
    program: Any

    def value(self, context: Mapping[str, Any] | cel.Context) -> Any:
        """Evaluate; evaluation errors are policy errors that name the expression's place.

        A ``cel.Context`` keeps its converted variables between evaluations: pass one when several
        conditions read the same large list.
        """
        try:
            return self.program.execute(context if isinstance(context, cel.Context) else dict(context))
        except (RuntimeError, TypeError, ValueError, KeyError) as e:
            detail = str(e).splitlines()[0] if str(e) else type(e).__name__
            if isinstance(e, KeyError):
                detail = f"no field {detail} (test with `'name' in map` first)"
            raise PolicyError(f"{self.where}: CEL `{self.source}` failed: {detail}") from e

    def holds(self, context: Mapping[str, Any] | cel.Context) -> bool:
        """Evaluate a condition that must yield a boolean."""
        result = self.value(context)
        if not isinstance(result, bool):
            raise PolicyError(
                f"{self.where}: CEL `{self.source}` gave {type(result).__name__} {result!r}, not a boolean"
            )
        return result


def compile_condition(source: str, where: str) -> Condition:
    """Compile ``source``; a syntax error becomes a PolicyError naming ``where`` (file:line)."""
    text = source.strip()
    if not text:
        raise PolicyError(f"{where}: empty CEL expression")
    try:
        program = cel.compile(text)
    except (ValueError, RuntimeError) as e:
        lines = [ln for ln in str(e).splitlines() if ln.strip()]
        detail = lines[1] if len(lines) > 1 else (lines[0] if lines else "syntax error")
        raise PolicyError(f"{where}: CEL syntax error in `{text}`: {detail.strip()}") from e
    return Condition(text, where, program)
