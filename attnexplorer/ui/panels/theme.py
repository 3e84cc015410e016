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

from ...core.numbers.display import DEFAULT_NUMBER_FORMAT, format_number
from ...core.numbers.display import cell_texts as _cell_texts

pg.setConfigOptions(antialias=True, imageAxisOrder="row-major", background="w", foreground="k")

DIVERGING = pg.colormap.get("CET-D1A")
SEQUENTIAL = pg.colormap.get("viridis")

# Lookup tables are what ImageItems use; computing them once keeps setImage cheap.
DIVERGING_LUT = DIVERGING.getLookupTable(nPts=256, alpha=False)
SEQUENTIAL_LUT = SEQUENTIAL.getLookupTable(nPts=256, alpha=False)

HATCH_BACKGROUND = QColor("#eeeeee")
HATCH_BRUSH = QBrush(QColor("#8c8c8c"), Qt.BrushStyle.BDiagPattern)
# Over the rows of a long heatmap that its compute has not reached yet: plain light grey,
# unlike the mask's hatch.
PENDING_BRUSH = QBrush(QColor(200, 200, 200, 235))
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


def axis_values(plot, shown: bool) -> None:
    """Tick values on ``plot``'s left and bottom axes, or none while it holds no data: an empty
    plot's default range (−0.5 … 0.5) was written "×0.001" by pyqtgraph's SI prefix, "−400 …
    400", which read as data. The axes count rows and columns, so they never take a prefix."""
    for name in ("left", "bottom"):
        axis = plot.getAxis(name)
        axis.enableAutoSIPrefix(False)
        axis.setStyle(showValues=shown)


def legend_below(layout, row: int, columns: int, **spacing) -> pg.LegendItem:
    """A legend in row ``row`` of graphics layout ``layout``, under its plot, where it covers no
    curve or bar; tight rows (the default spacing took 60 px of a dock's height).

    pyqtgraph makes every legend ignore its view's transformation (for a legend floating over a
    plot's corner). One laid out in a row of its own must not: presenter mode draws each scene
    zoom times larger, and such a legend stayed at 8 pt beside 25-px ticks."""
    legend = pg.LegendItem(colCount=columns, labelTextSize="8pt", verSpacing=-6, **spacing)
    legend.setFlag(legend.GraphicsItemFlag.ItemIgnoresTransformations, False)
    layout.addItem(legend, row=row, col=0)
    return legend


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
    return format_number(value, "auto", digits)


def cell_texts(values: np.ndarray, max_chars: Sequence[int],
               number_format: str = DEFAULT_NUMBER_FORMAT) -> tuple[list[str | None], int] | None:
    """Texts for a block of cells in one style (``core.numbers.display.cell_texts``)."""
    return _cell_texts(values, max_chars, number_format)


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
