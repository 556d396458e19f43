"""How values read in labels (table rows, legends, recipe names) and how labels sort."""

from __future__ import annotations

import math
import re
from typing import Any


def short_number(value: Any) -> str:
    """A number as a reader wants it in a label: three significant digits, exponents without padding
    (``1.02e-3``, ``0.25``, ``60000``, ``5e-5``); whole numbers whole. Anything else as ``str``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int):
        return str(value)
    if not math.isfinite(value):
        return str(value)
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    if 1e-2 <= abs(value) < 1e5:
        return f"{value:.3g}"
    mantissa, _, exponent = f"{value:.2e}".partition("e")
    mantissa = mantissa.rstrip("0").rstrip(".")
    return f"{mantissa}e{int(exponent)}"


def natural_key(text: str) -> tuple[tuple[int, Any], ...]:
    """``text`` as a sort key whose runs of digits compare as numbers (``epochs 5`` < ``epochs 20``)."""
    return tuple((0, int(part)) if part.isdigit() else (1, part) for part in re.split(r"(\d+)", text) if part)
