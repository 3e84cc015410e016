"""The heatmaps' token axes and their shrinking titles (``MatrixView``'s parts, also used by
the query and RoPE panels)."""

from __future__ import annotations

import math
from typing import Sequence

import pyqtgraph as pg
from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QFontMetricsF

from ...core.numbers import display
from . import theme


class TokenAxis(pg.AxisItem):
    """An axis whose ticks are the cells' labels (tokens or feature names).

    Ticks sit at cell centres. Which labels are written, at what font size and whether they
    stand upright is ``core.numbers.display.label_plan``: up to 32 labels in view every one is
    written (shrunk, and upright along the bottom, as needed); beyond that every k-th, plus
    the selected query or key (``set_marked``). Only the labels in view are generated, so at
    4,096 tokens the axis stays cheap, and zooming in brings every label back.
    """

    def __init__(self, orientation: str, **kwargs):
        super().__init__(orientation, **kwargs)
        self._labels: tuple[str, ...] = ()
        self._given: tuple[str, ...] = ()
        self._label_px = 10.0
        self._marked: tuple[int, ...] = ()
        self._plan = display.LabelPlan(1, display.LABEL_FONT_PX, False)
        self._fixed_for: float | None = None
        self.setTickFont(theme.tick_font())
        # Cell positions never want an SI prefix, and pyqtgraph would rebuild the axis title's
        # HTML on every range change to decide that.
        self.enableAutoSIPrefix(False)
        # Ticks point outward, toward the labels: pyqtgraph's default points them into the
        # plot, where a tick touching a cell's number reads as a minus sign ("-0.49").
        self.setStyle(tickLength=4)
        if orientation in ("top", "bottom"):
            # A label centred on the first or last cell may overhang the axis a little.
            self.setStyle(hideOverlappingLabels=30)

    @property
    def labels(self) -> tuple[str, ...]:
        return self._labels

    @property
    def plan(self) -> display.LabelPlan:
        """How the labels were last laid out (step, font size, upright)."""
        return self._plan

    def set_labels(self, labels: Sequence[str]) -> None:
        given = tuple(labels)
        if given == self._given:  # every redraw passes the tokens again; usually the same ones
            return
        self._given = given
        labels = tuple(theme.short_label(t) for t in given)
        if labels != self._labels:
            self._labels = labels
            metrics = QFontMetricsF(theme.tick_font())
            self._label_px = max((metrics.horizontalAdvance(t) for t in set(labels)), default=10.0)
            self._fixed_for = None
            self.picture = None
            self.update()

    def set_marked(self, *indices: int | None) -> None:
        """Labels written even when the axis thins its labels out (the selected query, key)."""
        marked = tuple(i for i in indices if i is not None)
        if marked != self._marked:
            self._marked = marked
            self.picture = None
            self.update()

    def visible_labels(self) -> list[str]:
        """The labels the axis writes now, at its present range and size."""
        view = self.linkedView()
        if view is None:
            return []
        lo, hi = view.viewRange()[1 if self.orientation in ("left", "right") else 0]
        size = self.height() if self.orientation in ("left", "right") else self.width()
        ticks = self.tickValues(lo, hi, size)
        return self.tickStrings(ticks[0][1], 1.0, 1.0) if ticks else []

    def _plan_for(self, minVal, maxVal, size) -> tuple[display.LabelPlan, int, int]:
        n = len(self._labels)
        first = max(0, math.floor(minVal))
        last = min(n - 1, math.ceil(maxVal) - 1)
        plan = display.label_plan(last - first + 1, size / (maxVal - minVal), self._label_px,
                                  along_bottom=self.orientation in ("top", "bottom"))
        return plan, first, last

    def generateDrawSpecs(self, p):
        # Decide the font and orientation before pyqtgraph measures the labels with it.
        view = self.linkedView()
        if view is not None and self._labels:
            horizontal = self.orientation in ("top", "bottom")
            lo, hi = sorted(view.viewRange()[0 if horizontal else 1])
            size = self.width() if horizontal else self.height()
            if hi > lo and size > 0:
                plan, _first, _last = self._plan_for(lo, hi, size)
                if plan.font_px != self._plan.font_px or plan.rotated != self._plan.rotated:
                    font = theme.tick_font()
                    font.setPixelSize(plan.font_px)
                    self.style["tickFont"] = font
                    self.style["hideOverlappingLabels"] = 10_000 if plan.rotated else (30 if horizontal else False)
                self._plan = plan
                self._fit_height(plan)
                p.setFont(self.style["tickFont"])
        return super().generateDrawSpecs(p)

    def _fit_height(self, plan: display.LabelPlan) -> None:
        """Upright labels need the axis as tall as the longest label is wide."""
        if self.orientation not in ("top", "bottom"):
            return
        wanted = None
        if plan.rotated:
            label = self.label.boundingRect().height() * 0.8 if self.label.isVisible() else 0.0
            wanted = math.ceil(self._label_px * plan.font_px / display.LABEL_FONT_PX + 4 + 9 + label)
        if wanted != self._fixed_for:
            self._fixed_for = wanted
            self.setHeight(wanted)

    def drawPicture(self, p, axisSpec, tickSpecs, textSpecs):
        if not self._plan.rotated or self.orientation not in ("top", "bottom"):
            super().drawPicture(p, axisSpec, tickSpecs, textSpecs)
            return
        super().drawPicture(p, axisSpec, tickSpecs, [])
        p.save()
        p.setClipping(False)
        for rect, _flags, text in textSpecs:
            # Upright, reading upward, its end against the tick: centred on the cell.
            p.save()
            p.translate(rect.center().x(), rect.top() + 3)  # a gap: the tick must not read as a dash
            p.rotate(-90)
            width = p.fontMetrics().horizontalAdvance(text) + 2
            height = p.fontMetrics().height()
            p.drawText(QRectF(-width, -height / 2, width, height),
                       int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter), text)
            p.restore()
        p.restore()

    def tickValues(self, minVal, maxVal, size):
        minVal, maxVal = min(minVal, maxVal), max(minVal, maxVal)  # an inverted axis gives them swapped
        n = len(self._labels)
        if n == 0 or maxVal <= minVal or size <= 0:
            return []
        plan, first, last = self._plan_for(minVal, maxVal, size)
        chosen = display.label_indices(first, last, plan.step, self._marked)
        values = [i + 0.5 for i in chosen if minVal <= i + 0.5 <= maxVal]
        return [(float(plan.step), values)]

    def tickStrings(self, values, scale, spacing):
        out = []
        for v in values:
            i = int(math.floor(v))
            out.append(self._labels[i] if 0 <= i < len(self._labels) else "")
        return out


class ShrinkingLabel(pg.LabelItem):
    """A title that shrinks its text (down to ``SMALLEST`` of its size), then wraps it onto more
    lines, rather than widen its layout.

    A plain ``LabelItem`` makes its text width the layout's minimum width, so a long title
    would push plots and colour bars out of a narrow dock. Shrinking alone (it went down to
    half size) left a long heading ("Attention weights (softmax with a sink per head; …)",
    a long session's "… max-pooled, 15×19 cells a pixel") at 6 or 7 px, unreadable.
    """

    SMALLEST = 0.8

    def _natural(self):
        """The text's size on one line at full size."""
        self.item.setTextWidth(-1)
        return self.item.boundingRect()

    def _fit(self, width: float) -> None:
        natural = self._natural().width()
        room = width - 4
        if natural <= 0 or room <= 0:
            return
        scale = min(1.0, room / natural)
        if scale < self.SMALLEST:
            scale = self.SMALLEST
            self.item.setTextWidth(room / scale)   # wraps at the room it has, at the smallest size
            option = self.item.document().defaultTextOption()
            option.setAlignment({"left": Qt.AlignmentFlag.AlignLeft, "right": Qt.AlignmentFlag.AlignRight}.get(
                self.opts.get("justify"), Qt.AlignmentFlag.AlignHCenter))
            self.item.document().setDefaultTextOption(option)
        self.item.setScale(scale)
        height = self.item.boundingRect().height() * scale
        if abs(self.minimumHeight() - height) > 0.5:
            self.setMinimumHeight(height)
            self.updateGeometry()

    def resizeEvent(self, ev):
        if self.rect().width() > 0:
            self._fit(self.rect().width())
        super().resizeEvent(ev)

    def updateMin(self):
        natural = self._natural()
        if self.rect().width() > 0:
            self._fit(self.rect().width())
        height = self.item.boundingRect().height() * self.item.scale()
        self.setMinimumWidth(natural.width() * 0.5)
        self.setMinimumHeight(height)
        self._sizeHint = {
            Qt.SizeHint.MinimumSize: (natural.width() * 0.5, height),
            Qt.SizeHint.PreferredSize: (natural.width(), natural.height()),
            Qt.SizeHint.MaximumSize: (1e6, 1e6),
            Qt.SizeHint.MinimumDescent: (0, 0),
        }
        self.updateGeometry()


def shrinking_title(plot: pg.PlotItem):
    """Put a ``ShrinkingLabel`` in place of PlotItem's own title label, whose width would be
    the plot's minimum width; return the old one. It is kept (hidden, zero-sized) rather than
    deleted: a deleted item can linger in the scene's index and crash a later hover."""
    plot.layout.removeItem(plot.titleLabel)
    plain = plot.titleLabel
    plain.setVisible(False)
    plain.setMaximumSize(0, 0)
    plot.titleLabel = ShrinkingLabel("", size="10pt", parent=plot)
    # Across the whole plot (axis, cells, colour bar), not the cells' column alone: over a
    # narrow heatmap of a few columns the title shrank to half size, past reading.
    plot.layout.addItem(plot.titleLabel, 0, 0, 1, 6)
    return plain
