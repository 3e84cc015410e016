"""The look every panel shares: colour maps, fonts, pens and number formatting.

We use a **light theme** (white background, black text): figures are exported from these
same items and are read on paper and in slides, where a white background reads better.
Importing this module applies pyqtgraph's global options once (antialiasing, row-major
images, white background), so every panel and every exported figure looks the same.

Colour maps:
- ``DIVERGING`` (CET-D1A, blue - white - red, perceptually uniform) for signed matrices
  (scores, Q, K, V, outputs), always centred at 0 with symmetric levels.
- ``SEQUENTIAL`` (viridis) for weights, always 0..1.
Blocked cells are never a colour: they are drawn as a grey hatch (``HATCH_BRUSH``).
"""

from __future__ import annotations

import math
import warnings
from typing import Sequence

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QBrush, QColor, QFont, QFontDatabase, QPen

pg.setConfigOptions(antialias=True, imageAxisOrder="row-major", background="w", foreground="k")

DIVERGING = pg.colormap.get("CET-D1A")
SEQUENTIAL = pg.colormap.get("viridis")

# Lookup tables are what ImageItems use; computing them once keeps setImage cheap.
DIVERGING_LUT = DIVERGING.getLookupTable(nPts=256, alpha=False)
SEQUENTIAL_LUT = SEQUENTIAL.getLookupTable(nPts=256, alpha=False)

HATCH_BACKGROUND = QColor("#eeeeee")
HATCH_BRUSH = QBrush(QColor("#8c8c8c"), Qt.BrushStyle.BDiagPattern)
# Selection marks must stand out on both colour maps (blue/red/white and viridis).
SELECTION_COLOR = QColor("#ff8c00")
SELECTED_KEY_COLOR = QColor("#000000")
QUERY_COLOR = QColor("#d62728")
KEY_COLOR = QColor("#1f77b4")
OUTPUT_COLOR = QColor("#2ca02c")
# Distinct colours for per-key contributions (Tableau 10); the last is for "other keys".
CATEGORY_COLORS = [QColor(c) for c in (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
    "#8c564b", "#e377c2", "#bcbd22", "#17becf", "#7f7f7f",
)]


def cosmetic_pen(color, width: float = 2.0, style=Qt.PenStyle.SolidLine) -> QPen:
    """A pen whose width is in screen pixels whatever the zoom."""
    pen = QPen(QColor(color))
    pen.setWidthF(width)
    pen.setCosmetic(True)
    pen.setStyle(style)
    return pen


# Grid lines: the light grey a 20 % black line leaves on the white plot background.
GRID_COLOR = QColor("#d6d6d6")


def light_grid(plot, *, x: bool = False, y: bool = False) -> None:
    """Grid lines across ``plot`` at its major and minor ticks, in opaque light grey.

    pyqtgraph's ``showGrid`` draws them translucent, and Qt's raster engine draws a
    translucent line about 25 times slower than an opaque one: on the query and signal
    panels, whose axes change on every edit or slider step, that was several milliseconds a
    frame. Opaque lines must not cover the data, so the axis (which draws them) goes
    behind the plot's view box instead of in front of it; its labels lie outside the view.
    """
    for name, on in (("bottom", x), ("left", y)):
        if on:
            axis = plot.getAxis(name)
            axis.setTickPen(pg.mkPen(GRID_COLOR))
            axis.setStyle(tickAlpha=255, maxTickLevel=1)
            axis.setGrid(255)
            # Negative z: pyqtgraph's items then stack behind their parent, the plot, and so
            # behind the view box that holds the data.
            axis.setZValue(-1)


def monospace_font(point_size: int = 10) -> QFont:
    font = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
    font.setPointSize(point_size)
    return font


def tick_font() -> QFont:
    font = QFont()
    font.setPixelSize(11)
    return font


def cell_font(pixel_size: int) -> QFont:
    font = QFont()
    font.setPixelSize(max(6, int(pixel_size)))
    return font


def nice_bound(value: float) -> float:
    """The smallest of 1, 1.5, 2, 2.5, 3, 4, 5, 6, 8 × 10^k that is ≥ ``value`` (1.0 for 0 or non-finite).

    Levels snapped to these numbers keep the colour scale (and the colour bar's labels)
    still while small edits change the data, instead of jumping on every keystroke.
    """
    if not math.isfinite(value) or value <= 0:
        return 1.0
    exponent = math.floor(math.log10(value))
    for step in (1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0):
        bound = step * 10.0 ** exponent
        if bound >= value * (1 - 1e-12):
            return bound
    return 10.0 ** (exponent + 1)


def symmetric_levels(data: np.ndarray | None) -> tuple[float, float]:
    """(-b, b) with b a nice bound of max |data| (NaN ignored): 0 is always the middle colour."""
    if data is None or data.size == 0:
        return (-1.0, 1.0)
    # max and min are much cheaper than abs() of a copy of a big matrix; the nan-aware
    # versions (slower) only when a NaN is there.
    hi, lo = float(data.max()), float(data.min())
    if math.isnan(hi) or math.isnan(lo):
        with warnings.catch_warnings():  # an all-NaN matrix is handled just below
            warnings.simplefilter("ignore", RuntimeWarning)
            hi, lo = float(np.nanmax(data)), float(np.nanmin(data))
    if not (math.isfinite(hi) and math.isfinite(lo)):
        return (-1.0, 1.0)
    b = nice_bound(max(abs(hi), abs(lo)))
    return (-b, b)


def format_value(value: float, digits: int = 4) -> str:
    """A number for read-outs: up to ``digits`` significant digits, no trailing noise."""
    if value is None or not math.isfinite(value):
        return "—"
    if value == 0:
        return "0"
    text = f"{value:.{digits}g}"
    if "e" in text:
        mant, exp = text.split("e")
        text = f"{mant}e{int(exp)}"
    return text


def cell_texts(values: np.ndarray, max_chars: Sequence[int]) -> tuple[list[str | None], int] | None:
    """Texts for a block of cells, all in one style, and which of ``max_chars`` they fit.

    ``max_chars`` lists how many characters fit a cell at each candidate font size, largest
    font first. Precision comes before size: 4 (the walkthroughs print 4 decimals) or 3
    significant digits, then 3 and 2 decimals, 2 significant digits, then 1 decimal (a tiny
    value next to big ones reads as "0.000" rather than "1.2e-5"), each
    first as written and then without the "0" before the point (".25"); one style for the
    whole block, so columns read evenly. Non-finite cells (blocked) get None. Returns
    ``(texts, index into max_chars)``, or None when no style fits.
    """
    flat = np.asarray(values, dtype=float).ravel()
    finite = np.isfinite(flat)
    numbers = flat[finite].tolist()
    widest = max(max_chars, default=0)
    # Significant digits read best, but "4.416e-07" in a cell is noise: a style that needs an
    # exponent anywhere in the block gives way to fixed decimals ("0.000" next to "0.883").
    # This runs on every redraw of a small heatmap, so each style is one tight comprehension.
    for spec in (".4g", ".3g", ".3f", ".2f", ".2g", ".1f"):
        if spec == ".4g" and widest < 5:
            # A number that needs 4 significant digits takes 5 characters even as ".1234";
            # one that needs fewer reads the same at 3, so the 3-digit style decides alone.
            continue
        if spec[-1] == "g":
            texts = ["0" if x == 0 else format(x, spec) for x in numbers]
            if any("e" in t for t in texts):
                continue
        else:
            texts = [format(x, spec) for x in numbers]
            texts = [t[1:] if t[0] == "-" and not t.strip("-0.") else t for t in texts]  # no "-0.00"
        longest = max(map(len, texts), default=0)
        if longest - 1 > widest:
            continue  # dropping a leading zero saves one character at most
        for candidate in (texts, None):
            if candidate is None:
                candidate = [_drop_leading_zero(t) for t in texts]
                longest = max(map(len, candidate), default=0)
            for index, limit in enumerate(max_chars):
                if longest <= limit:
                    out: list[str | None] = [None] * len(flat)
                    for k, text in zip(np.flatnonzero(finite).tolist(), candidate):
                        out[k] = text
                    return out, index
    return None


def _fixed(value: float, decimals: int) -> str:
    text = f"{value:.{decimals}f}"
    return text[1:] if text.startswith("-") and float(text) == 0 else text


def _drop_leading_zero(text: str) -> str:
    if text.startswith("0."):
        return text[1:]
    if text.startswith("-0."):
        return "-" + text[2:]
    return text


def text_is_dark(values: np.ndarray, lut: np.ndarray, levels: tuple[float, float]) -> np.ndarray:
    """For each value, True when black text reads better than white on its cell colour."""
    lo, hi = levels
    span = hi - lo if hi > lo else 1.0
    idx = np.clip(((values - lo) / span * (len(lut) - 1)), 0, len(lut) - 1)
    idx = np.nan_to_num(idx, nan=0).astype(int)
    rgb = lut[idx][..., :3].astype(float) / 255.0
    # Relative luminance (Rec. 709 weights); 0.45 splits dark from light cells well for both maps.
    lum = 0.2126 * rgb[..., 0] + 0.7152 * rgb[..., 1] + 0.0722 * rgb[..., 2]
    return lum > 0.45


def short_label(text: str, limit: int = 14) -> str:
    """A token as an axis label: visible whitespace, long ones cut with an ellipsis."""
    shown = text if text.strip() else repr(text)
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"
