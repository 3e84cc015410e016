"""How the explanations write numbers: a few significant digits, short vectors.

Below ``explain`` and ``explain_stages`` (both write with them) and the panels that quote a
number the way the explanation does, so that none of them imports another for it.
"""

from __future__ import annotations

import math

import numpy as np

MAX_VECTOR_SHOWN = 8


def fmt(x: float) -> str:
    """A number with 3–4 significant digits, trailing zeros dropped: 13.85, 7.99, 0.883."""
    x = float(x)
    if x == 0 or not math.isfinite(x):
        return "0" if x == 0 else str(x)
    ax = abs(x)
    if ax >= 1e4 or ax < 1e-3:
        text = f"{x:.3g}"
    elif ax >= 1000:
        text = f"{x:.0f}"
    elif ax >= 100:
        text = f"{x:.1f}"
    elif ax >= 1:
        text = f"{x:.2f}"
    else:
        text = f"{x:.3g}"
    if "e" not in text and "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def fmt_vector(v) -> str:
    """``[1.2, -0.5, 3]``, cut after MAX_VECTOR_SHOWN entries."""
    v = np.asarray(v, dtype=np.float64).ravel()
    parts = [fmt(a) for a in v[:MAX_VECTOR_SHOWN]]
    if len(v) > MAX_VECTOR_SHOWN:
        parts.append(f"… ({len(v) - MAX_VECTOR_SHOWN} more)")
    return "[" + ", ".join(parts) + "]"
