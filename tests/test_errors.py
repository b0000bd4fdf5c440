"""The error registry: stable kebab-case codes, one per class, and categories that agree with the classes."""

from __future__ import annotations

import re

import ledger.errors as errors
from ledger.api.errors import _BY_CATEGORY, status_for
from ledger.errors import REFINES, Category, LedgerError

KEBAB = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")


def _all_errors() -> list[type[LedgerError]]:
    out: list[type[LedgerError]] = []
    todo: list[type[LedgerError]] = [LedgerError]
    while todo:
        cls = todo.pop()
        out.append(cls)
        todo.extend(cls.__subclasses__())
    return out


def test_every_exported_error_is_a_ledger_error_and_registered() -> None:
    exported = {getattr(errors, n) for n in errors.__all__ if n.endswith("Error")}
    assert exported == set(_all_errors())


def test_codes_are_unique_and_kebab_case() -> None:
    codes: dict[str, str] = {}
    for cls in _all_errors():
        assert KEBAB.match(cls.code), f"{cls.__name__}.code {cls.code!r} is not kebab-case"
        assert cls.code not in codes, f"{cls.__name__} and {codes[cls.code]} share the code {cls.code!r}"
        codes[cls.code] = cls.__name__


def test_category_is_typed_and_agrees_with_the_class() -> None:
    for cls in _all_errors():
        assert isinstance(cls.category, Category), f"{cls.__name__}.category is {cls.category!r}"
        parents = [b for b in cls.__bases__ if issubclass(b, LedgerError)]
        for parent in parents:
            if parent is LedgerError:
                continue  # a direct subclass founds its category
            ok = cls.category == parent.category or REFINES.get(cls.category) == parent.category
            assert ok, f"{cls.__name__} is a {parent.__name__} ({parent.category}) but says {cls.category}"


def test_a_dangling_ref_is_bad_input_and_keeps_its_code() -> None:
    assert issubclass(errors.DanglingRefError, errors.InputError)
    assert errors.DanglingRefError.code == "dangling-ref"
    assert errors.DanglingRefError("x").category is Category.INPUT
    assert status_for(errors.DanglingRefError("x")) == 422


def test_every_category_has_an_http_status() -> None:
    assert set(_BY_CATEGORY) == set(Category)
