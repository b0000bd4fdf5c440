"""A number a person types is finite.

Regression: a TOML deployment with `gpu_memory_utilization = nan` was refused with "nan has more digits than
can be kept exactly … state it with at most 15 significant digits" (`Decimal('nan')` never equals itself):
advice that cannot be followed. TOML's `nan` and `inf`, in any sign, are now refused as not finite, by the
one rule for typed numbers (`float_as_stated`), in a deployment file and anywhere else it reads.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ledger.canonical import float_as_stated
from ledger.errors import InputError
from ledger.policy.routing import load_deployment


@pytest.mark.parametrize("text", ["nan", "+nan", "-nan", "inf", "+inf", "-inf"])
def test_toml_nan_and_inf_are_refused_as_not_finite(tmp_path: Path, text: str) -> None:
    p = tmp_path / "d.toml"
    p.write_text(f'host = "h"\n[[services]]\nname = "a"\ngpus = [0]\ngpu_memory_utilization = {text}\n')
    with pytest.raises(InputError) as ei:
        load_deployment(p)
    assert f"{text} is not a finite number" in ei.value.message
    assert "significant digits" not in ei.value.message


@pytest.mark.parametrize("text", ["0.5", "5e-1", "1e308", "-0.0"])
def test_finite_numbers_are_read_as_stated(text: str) -> None:
    assert float_as_stated(text) == float(text)
