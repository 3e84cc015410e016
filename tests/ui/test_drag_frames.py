"""What one frame of a slider drag costs, counted rather than timed: each panel's canvas paints
once a frame, and what the frame did not change is not set again (issue 28: the sine τ drag at
N = 512 fell from 46 to 22 frames a second)."""

from __future__ import annotations

import collections

import pyqtgraph as pg
import pytest

from attnexplorer.bench.harness import settle
from attnexplorer.core.inputs.presets import build_preset
from ui_helpers import close_window, open_window


def _kind(widget) -> str:
    while widget is not None and not hasattr(widget, "kind"):
        widget = widget.parentWidget()
    return getattr(widget, "kind", "?")


@pytest.fixture
def sine_drag(monkeypatch, qapp):
    """The sine preset's window with its τ slider held down, and ``step(k)``: one frame."""
    paints = collections.Counter()
    real = pg.GraphicsView.paintEvent
    # Patched before the window is made: Qt finds the Python override when a view is built.
    monkeypatch.setattr(pg.GraphicsView, "paintEvent", lambda view, ev: (paints.update([_kind(view)]), real(view, ev))[1])
    document, window = open_window(build_preset("sine", {"N": 96}).session)
    slider = window.controls.param_widgets["tau"].slider
    slider.setSliderDown(True)
    lo, hi = slider.minimum(), slider.maximum()

    def step(k: int) -> None:
        slider.setValue(lo + (hi - lo) * (k % 40 + 10) // 60)
        document.compute.wait_idle(60.0)
        settle()

    for k in range(3):
        step(k)
    yield window, step, paints
    slider.setSliderDown(False)
    close_window(document, window)


def test_each_panel_paints_once_a_frame(sine_drag):
    # The plots' new ranges are applied with the redraw (FigurePanel.settle_views): applied at
    # the paint, as pyqtgraph does by default, they moved the items mid-paint and the Query
    # panel painted twice a frame.
    window, step, paints = sine_drag
    paints.clear()
    frames = 8
    for k in range(3, 3 + frames):
        step(k)
    on_screen = {p.kind for p in window.panels if p.is_on_screen}
    assert {"query", "signal", "weights"} <= on_screen
    for kind in ("query", "signal", "weights"):
        assert paints[kind] <= frames, (kind, paints)


def test_a_frame_sets_only_what_it_changed(sine_drag):
    # τ changes the output, not the noisy samples or the clean signal: setting the dots again
    # rebuilt the scatter's points on every frame.
    window, step, _ = sine_drag
    signal = next(p for p in window.panels if p.kind == "signal")
    calls = collections.Counter()
    for name in ("noisy", "clean", "output"):
        item = getattr(signal, name)
        real = item.setData
        setattr(item, "setData", lambda *a, _real=real, _name=name, **k: (calls.update([_name]), _real(*a, **k))[1])
    for k in range(3, 7):
        step(k)
    assert calls["output"] == 4 and calls["noisy"] == 0 and calls["clean"] == 0


def test_a_frame_lays_no_plot_out_again(sine_drag):
    # A redraw that changes only numbers leaves every title, heading and axis as wide as it was:
    # the query panel set its unchanged weights title each frame, and pyqtgraph's setTitle
    # asks the plot's whole layout to be laid out again even for the same text.
    from PySide6.QtCore import QEvent, QObject
    from PySide6.QtWidgets import QApplication, QGraphicsWidget

    window, step, _ = sine_drag
    laid_out = collections.Counter()

    class Count(QObject):
        def eventFilter(self, obj, event):
            if event.type() == QEvent.Type.LayoutRequest and isinstance(obj, QGraphicsWidget):
                laid_out.update([type(obj).__name__])
            return False

    counter = Count()
    QApplication.instance().installEventFilter(counter)
    try:
        for k in range(3, 9):
            step(k)
    finally:
        QApplication.instance().removeEventFilter(counter)
    assert not laid_out, laid_out


def test_a_frame_shares_every_input_it_did_not_change(sine_drag):
    # τ is the scale alone: the rebuilt preset's embeddings and weights are the same numbers,
    # and the session keeps the very arrays it had, so no table is read again, no input is
    # converted for the engine again, and the panels that draw only inputs keep their picture.
    from PySide6.QtCore import QAbstractItemModel

    window, step, _ = sine_drag
    document = window.document
    before = document.session
    models = window.findChildren(QAbstractItemModel)
    assert models
    changed = collections.Counter()
    for model in models:
        model.dataChanged.connect(lambda *a, _m=model: changed.update([type(_m).__name__]))
        model.modelReset.connect(lambda _m=model: changed.update([type(_m).__name__]))
    for k in range(3, 7):
        step(k)
    after = document.session
    assert after.scale != before.scale
    for name in ("embeddings", "w_query", "w_key", "w_value"):
        assert getattr(after, name) is getattr(before, name), name
    assert after.tokens is before.tokens
    assert not changed, changed


def test_a_frame_makes_no_brush(sine_drag, monkeypatch):
    # The query panel sets its bars' colours on every frame, always the same few theme
    # colours: made into brushes once, not parsed again for each of its 19 bar items.
    window, step, _ = sine_drag
    made = collections.Counter()
    real = pg.mkBrush
    monkeypatch.setattr(pg, "mkBrush", lambda *a, **k: (made.update(["brush"]), real(*a, **k))[1])
    for k in range(3, 7):
        step(k)
    assert not made, made


def test_a_frame_repaints_the_unchanged_curves_from_pixels(sine_drag, monkeypatch):
    # The clean signal and the noisy samples do not change with τ: painted once into a pixmap
    # and copied on each frame, not stroked again (a dashed 512-point curve and 512 dots).
    # New samples (another noise level) paint the dots again.
    window, step, _ = sine_drag
    signal = next(p for p in window.panels if p.kind == "signal")
    painted = collections.Counter()
    for name, part in (("clean", signal.clean.curve), ("noisy", signal.noisy.scatter)):
        real = type(part).paint
        monkeypatch.setattr(part, "paint", lambda *a, _real=real, _part=part, _name=name: (painted.update([_name]),
                                                                                           _real(_part, *a))[1])
    for k in range(3, 7):
        step(k)
    assert not painted, painted
    widget = window.controls.param_widgets["sigma"]
    widget.slider.setValue(widget.slider.value() + 5)
    window.document.compute.wait_idle(60.0)
    settle()
    assert painted["noisy"] >= 1, painted


def test_a_drag_relabels_the_query_charts_y_axes_only_when_the_bars_leave_them(sine_drag):
    # The query panel's y axes follow the bars with nice ends; relabelling them (new tick texts,
    # a new cached picture) on every step was the largest part of a τ drag's frame: two to
    # three axes a frame. While the same row is redrawn an axis now stays as long as the bars
    # fit it and fill at least half of it (query_panel.still_fits).
    from pyqtgraph.graphicsItems.AxisItem import AxisItem

    window, step, _ = sine_drag
    query = next(p for p in window.panels if p.kind == "query")
    axes = {query.score_chart.getAxis("left"), query.weight_chart.getAxis("left"), query.sum_chart.getAxis("left")}
    relabels = collections.Counter()
    real = AxisItem.generateDrawSpecs

    def counted(axis, *args):
        if axis in axes:
            relabels.update([id(axis)])
        return real(axis, *args)

    AxisItem.generateDrawSpecs = counted
    try:
        frames = 12
        for k in range(3, 3 + frames):
            step(k)
    finally:
        AxisItem.generateDrawSpecs = real
    assert max(relabels.values(), default=0) <= frames // 2, relabels
    assert sum(relabels.values()) <= frames, relabels


def test_a_frame_makes_no_graphics_item(sine_drag):
    # A redraw that changes only numbers reuses its items: the same items in every canvas
    # (issue 28: the query legend was rebuilt, item by item, on every redraw).
    window, step, _ = sine_drag
    canvases = [p.canvas for p in window.panels if p.is_on_screen and hasattr(p, "canvas")]
    assert canvases

    def items():
        return [frozenset(id(item) for item in canvas.scene().items()) for canvas in canvases]

    before = items()
    for k in range(3, 7):
        step(k)
    assert items() == before
