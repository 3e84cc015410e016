"""Qt-free arithmetic of what the panels write: numbers in cells and which tick labels fit.

The widgets call these and draw what they return; the tests check them without Qt.

Numbers: a panel writes every cell in one format, always with a leading zero ("0.043",
never ".043"). ``auto`` is the most precise style that fits the cells (4 or 3 significant
digits, falling back to fixed decimals where significant digits would need an exponent);
``fixed2``/``fixed3``/``fixed4`` always write that many decimals (the walkthroughs print 4:
3.4707, 0.6870), at a smaller font if needed, or nothing (the hover still reads the cell).

Tick labels: up to ``EVERY_LABEL_UP_TO`` labels in view every one is written (the axis along
the bottom turns its labels upright, and both shrink their font, before leaving one out);
beyond that, evenly spaced labels, always including the selected query and key.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

NUMBER_FORMATS = {
    "auto": "significant digits (as many as fit)",
    "fixed2": "2 decimals",
    "fixed3": "3 decimals",
    "fixed4": "4 decimals",
}
DEFAULT_NUMBER_FORMAT = "auto"

EVERY_LABEL_UP_TO = 32
LABEL_FONT_PX = 11  # the tick font's natural size
MIN_LABEL_FONT_PX = 7  # smaller is unreadable on a slide


def counted(count: int, noun: str) -> str:
    """"1 row", "2 rows": a count and its noun, singular for one."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


# A block whose largest magnitude is under this shows significant digits, not decimals.
SMALL_BLOCK = 0.01


def _short_exponent(text: str) -> str:
    """'5.1e-05' → '5.1e-5' (the exponent without its padding zero or plus sign)."""
    if "e" not in text:
        return text
    mantissa, exponent = text.split("e")
    return f"{mantissa}e{int(exponent)}"


def _significant(numbers: list[float], digits: int) -> list[str]:
    """``numbers`` to ``digits`` significant digits, all plain ("0.00012") or all with a short
    exponent ("1.2e-4"), whichever makes the longest text shorter (one style per block)."""
    plain = ["0" if x == 0 else np.format_float_positional(x, precision=digits, unique=False, fractional=False,
                                                           trim="-") for x in numbers]
    exponent = ["0" if x == 0 else _short_exponent(format(x, f".{digits - 1}e")) for x in numbers]
    longest = lambda texts: max(map(len, texts), default=0)  # noqa: E731
    return exponent if longest(exponent) < longest(plain) else plain


def _no_negative_zero(text: str) -> str:
    return text[1:] if text.startswith("-") and not text.strip("-0.") else text


def format_number(value: float, number_format: str = DEFAULT_NUMBER_FORMAT, digits: int = 4) -> str:
    """One number for a read-out or a cell: ``auto`` gives up to ``digits`` significant digits."""
    if value is None or not math.isfinite(value):
        return "—"
    if number_format.startswith("fixed"):
        return _no_negative_zero(f"{value:.{int(number_format[5:])}f}")
    if value == 0:
        return "0"
    return _short_exponent(f"{value:.{digits}g}")


def cell_texts(values: np.ndarray, max_chars: Sequence[int],
               number_format: str = DEFAULT_NUMBER_FORMAT) -> tuple[list[str | None], int] | None:
    """Texts for a block of cells, all in one style, and which of ``max_chars`` they fit.

    ``max_chars`` lists how many characters fit a cell at each candidate font size, largest
    font first. Non-finite cells (blocked) get None. Returns ``(texts, index into max_chars)``,
    or None when the format does not fit at any size.

    ``auto``: precision comes first: 4 (the walkthroughs print 4 decimals) or 3 significant
    digits, then 3 and 2 decimals, 2 significant digits, then 1 decimal (a tiny value next to
    big ones reads as "0.000" rather than "1.2e-5"). A block whose numbers are all small
    (under ``SMALL_BLOCK``) tries 3, 2 and 1 significant digits first, with a short exponent
    ("5.1e-5"), rather than "0.000" in every cell. A fixed format is only that format.
    """
    if number_format not in NUMBER_FORMATS:
        raise ValueError(f"unknown number format {number_format!r}; use one of {', '.join(NUMBER_FORMATS)}")
    flat = np.asarray(values, dtype=float).ravel()
    finite = np.isfinite(flat)
    numbers = flat[finite].tolist()
    widest = max(max_chars, default=0)
    if number_format == "auto":
        specs = [".4g", ".3g", ".3f", ".2f", ".2g", ".1f"]
        if widest < 5:
            # A number that needs 4 significant digits takes 5 characters at least; one that
            # needs fewer reads the same at 3, so the 3-digit style decides alone.
            specs.remove(".4g")
        largest = max(map(abs, numbers), default=0.0)
        if 0 < largest < SMALL_BLOCK:
            # Every number of the block is small (a long sentence's weights, about 5e-5):
            # decimals would write "0.000" in every cell, so significant digits come first,
            # with a short exponent where needed ("5.1e-5").
            specs = ["~.3g", "~.2g", "~.1g"] + specs
    else:
        specs = [f".{number_format[5:]}f"]
    # This runs on every redraw of a small heatmap, so each style is one tight comprehension.
    for spec in specs:
        if spec[0] == "~":
            texts = _significant(numbers, int(spec[2]))
        elif spec[-1] == "g":
            texts = ["0" if x == 0 else format(x, spec) for x in numbers]
            if any("e" in t for t in texts):
                continue  # "4.416e-07" in a cell is noise: fixed decimals read better
        else:
            texts = [_no_negative_zero(format(x, spec)) for x in numbers]
        longest = max(map(len, texts), default=0)
        for index, limit in enumerate(max_chars):
            if longest <= limit:
                out: list[str | None] = [None] * len(flat)
                for k, text in zip(np.flatnonzero(finite).tolist(), texts):
                    out[k] = text
                return out, index
    return None


# -- tick labels -------------------------------------------------------------------------------
@dataclass(frozen=True)
class LabelPlan:
    """How an axis writes its labels: every ``step``-th (plus the ``always`` ones), at
    ``font_px``, upright (``rotated``: reading upward) or along the axis."""

    step: int
    font_px: int
    rotated: bool


def label_plan(in_view: int, pixels_per_cell: float, widest_px: float, *, along_bottom: bool) -> LabelPlan:
    """The plan for ``in_view`` labels, ``pixels_per_cell`` apart, the widest ``widest_px`` wide
    at ``LABEL_FONT_PX``. A left axis stacks its labels (one text line per cell); a bottom
    axis writes them side by side while they fit, upright when they do not."""
    line = 1.3  # a text line's height per pixel of font size
    if pixels_per_cell <= 0 or in_view <= 0:
        return LabelPlan(max(1, in_view), LABEL_FONT_PX, False)
    if along_bottom and widest_px + 8 <= pixels_per_cell:
        return LabelPlan(1, LABEL_FONT_PX, False)
    # Stacked or upright: each label needs one text line across the axis.
    font = int(min(LABEL_FONT_PX, max(MIN_LABEL_FONT_PX, math.floor(pixels_per_cell / line))))
    if in_view <= EVERY_LABEL_UP_TO:
        return LabelPlan(1, font, along_bottom)
    return LabelPlan(max(1, math.ceil(LABEL_FONT_PX * line / pixels_per_cell)), LABEL_FONT_PX, along_bottom)


def label_indices(first: int, last: int, step: int, always: Iterable[int | None] = ()) -> list[int]:
    """The labels to write among cells ``first..last``: every ``step``-th (on multiples of
    ``step``, so the same labels stay while the view pans), plus each of ``always`` in range;
    a regular label closer than ``step`` to one of those gives way to it."""
    if last < first:
        return []
    step = max(1, int(step))
    chosen = sorted({int(a) for a in always if a is not None and first <= a <= last})
    regular = range(first + (-first) % step, last + 1, step)
    if step == 1:
        return list(range(first, last + 1))
    keep = [i for i in regular if all(abs(i - a) >= step for a in chosen)]
    return sorted(keep + chosen)
