"""The close-up panels (query bars, signal, embeddings, explain) and the shared formatting."""

from __future__ import annotations

import functools
from functools import partial

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PySide6.QtCore import QPointF, Qt
from PySide6.QtGui import QImage, QPainter
from PySide6.QtWidgets import QGraphicsItem

from attnexplorer.core.inputs.presets import build_preset, reference_curves
from attnexplorer.ui.document import SessionDocument
from attnexplorer.ui.panels import EmbeddingPanel, ExplainPanel, QueryPanel, SignalPanel
from attnexplorer.ui.panels import theme
from ui_helpers import drawn, legend_entries
from ui_helpers import shown as _shown

shown = partial(_shown, size=(460, 340))  # these charts need a little more room


def preset_doc(name, **params):
    built = build_preset(name, params)
    return SessionDocument(built.session)


@pytest.fixture
def pronoun(qtbot):
    document = preset_doc("pronoun")
    yield document
    document.shutdown()


@pytest.fixture
def sine(qtbot):
    document = preset_doc("sine")
    yield document
    document.shutdown()




def test_query_bars_equal_the_score_and_weight_rows(pronoun, qtbot):
    panel = shown(qtbot, QueryPanel(pronoun))
    pronoun.selection.set(query=6, key=1)
    result = pronoun.result
    np.testing.assert_allclose(panel.score_heights(), result.scaled_scores[0, 6])
    np.testing.assert_allclose(panel.weight_heights(), result.weights[0, 6])
    assert panel.score_chart.token_axis.labels == result.tokens
    assert repr(result.tokens[6]) in panel.heading.text
    # Blocked keys (causal: after the query) keep their score bar, drawn hatched.
    blocked_x = np.asarray(panel.score_chart.blocked.opts["x"])
    np.testing.assert_allclose(blocked_x, np.flatnonzero(result.mask[6]) + 0.5)
    np.testing.assert_allclose(panel.score_chart.blocked.opts["height"], result.scaled_scores[0, 6][result.mask[6]])
    assert panel.score_chart.blocked.opts["brush"].style() == Qt.BrushStyle.BDiagPattern
    # The selected key's bar is outlined, and the largest weight has its own colour.
    assert list(panel.weight_chart.marked.opts["x"]) == [1.5]
    best = int(np.argmax(result.weights[0, 6]))
    assert best + 0.5 in list(panel.weight_chart.highlight.opts["x"])


def test_weight_bars_keep_0_to_1_unless_every_weight_is_small(pronoun, qtbot):
    panel = shown(qtbot, QueryPanel(pronoun))
    pronoun.selection.set(query=6)
    assert pronoun.result.weights[0, 6].max() > 0.1
    low, high = panel.weight_chart.vb.viewRange()[1]
    assert low <= 0 < 0.99 < high < 1.1
    # 600 keys: every weight is small, so the axis goes up to a nice bound over the largest.
    document = preset_doc("random", n=600, d=8, d_k=8, d_v=8, heads=1, seed=1)
    try:
        panel = shown(qtbot, QueryPanel(document))
        document.selection.set(query=599)
        row = document.result.weights[0, 599]
        assert row.max() < 0.1
        low, high = panel.weight_chart.vb.viewRange()[1]
        assert row.max() <= high <= 1.1 * theme.nice_bound(row.max()) and high < 0.1
    finally:
        document.shutdown()


def test_query_output_is_the_sum_of_its_contributions(pronoun, qtbot):
    panel = shown(qtbot, QueryPanel(pronoun))
    pronoun.selection.set(query=6)
    result = pronoun.result
    parts = panel.contributions()
    total = parts.pop("total")
    np.testing.assert_allclose(total, result.head_outputs[0, 6], rtol=1e-5)
    np.testing.assert_allclose(np.sum(list(parts.values()), axis=0), total, rtol=1e-4, atol=1e-6)
    # The largest part belongs to the key with the largest weight.
    best = int(np.argmax(result.weights[0, 6]))
    assert next(iter(parts)).startswith(repr(result.tokens[best]))


def test_query_contributions_group_the_rest_beyond_the_palette(sine, qtbot):
    panel = shown(qtbot, QueryPanel(sine))
    sine.selection.set(query=10)
    parts = panel.contributions()
    total = parts.pop("total")
    assert any(name.startswith("other keys") for name in parts)
    np.testing.assert_allclose(np.sum(list(parts.values()), axis=0), total, rtol=1e-4, atol=1e-6)


def test_the_other_keys_sum_gathers_no_copy_of_the_values(qtbot):
    # At 16,384 keys, gathering the other keys' value rows as float64 copied ~8 MB on the GUI
    # thread at each redraw (most of its block when a long result arrived): the sum is one
    # product of the weights with the values as they are.
    import tracemalloc

    document = preset_doc("random", n=4096, d=64, d_k=16, d_v=64, heads=1, seed=0)
    try:
        document.compute.wait_idle(60.0)
        panel = shown(qtbot, QueryPanel(document))
        document.selection.set(query=100)
        values = document.result.V
        panel.refresh()
        tracemalloc.start()
        try:
            panel.refresh()
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        parts = panel.contributions()
        total = parts.pop("total")
        assert any(name.startswith("other keys (") for name in parts)
        np.testing.assert_allclose(np.sum(list(parts.values()), axis=0), total, rtol=1e-4, atol=1e-6)
        assert peak < values[0].nbytes / 2, peak  # under half of one head's values (1 MB)
    finally:
        document.shutdown()


def test_clicking_a_weight_bar_selects_its_key(pronoun, qtbot):
    panel = shown(qtbot, QueryPanel(pronoun))
    chart = panel.weight_chart
    scene = chart.vb.mapViewToScene(QPointF(3.5, 0.01))
    qtbot.mouseClick(panel.canvas.viewport(), Qt.MouseButton.LeftButton, pos=panel.canvas.mapFromScene(scene))
    assert pronoun.selection.current.key == 3


def test_signal_plot_draws_clean_noisy_and_output(sine, qtbot):
    panel = shown(qtbot, SignalPanel(sine))
    assert panel.applies_to(sine.session)
    curves = {name: drawn(getattr(panel, name)) for name in ("clean", "noisy", "output")}
    reference = reference_curves(sine.session)
    position = reference["position"]
    np.testing.assert_allclose(curves["clean"][0], position)
    np.testing.assert_allclose(curves["clean"][1], reference["clean"])
    np.testing.assert_allclose(curves["noisy"][1], sine.session.embeddings[:, 0])
    np.testing.assert_allclose(curves["output"][1], sine.result.output[:, 0])
    assert panel.clean.opts["pen"].style() == Qt.PenStyle.DashLine
    assert panel.noisy.opts["pen"] is None and panel.noisy.opts["symbol"] == "o"
    # Editing a sample moves its dot and the output follows.
    x = np.array(sine.session.embeddings)
    x[5, 0] += 3.0
    sine.edit(sine.session.replace(embeddings=x), "move a sample")
    curves = {name: drawn(getattr(panel, name)) for name in ("noisy", "output")}
    assert curves["noisy"][1][5] == pytest.approx(x[5, 0])
    np.testing.assert_allclose(curves["output"][1], sine.result.output[:, 0])
    sine.selection.set(query=7)
    assert panel.marker.value() == pytest.approx(position[7])


def test_signal_and_embedding_apply_only_where_they_mean_something(pronoun, sine, qtbot):
    signal = SignalPanel(pronoun)
    scatter = EmbeddingPanel(sine)
    qtbot.addWidget(signal)
    qtbot.addWidget(scatter)
    assert not signal.applies_to(pronoun.session)
    assert EmbeddingPanel(pronoun).applies_to(pronoun.session)
    assert not scatter.applies_to(sine.session)


def test_embedding_scatter_and_arrows(pronoun, qtbot):
    panel = shown(qtbot, EmbeddingPanel(pronoun))
    pronoun.selection.set(query=6, key=1)
    result = pronoun.result
    np.testing.assert_allclose(np.column_stack(drawn(panel.points)), pronoun.session.embeddings)
    x, y = panel.query_arrow.getData()
    assert (x[1], y[1]) == pytest.approx(tuple(result.Q[0, 6, :2]), rel=1e-6)
    assert [t.toPlainText() for t in panel.labels if t.isVisible()] == list(result.tokens)
    assert panel.tip_labels[1].toPlainText() == f"k: {result.tokens[1]}"
    x, y = panel.key_arrow.getData()
    assert (x[1], y[1]) == pytest.approx(tuple(result.K[0, 1, :2]), rel=1e-6)
    assert "first two" in panel.toolTip()


def test_embedding_labels_do_not_overlap_and_sit_by_their_points(pronoun, qtbot):
    """The pronoun preset has "The" and "the" almost on one spot and "happy" beside "fetched"."""
    panel = shown(qtbot, EmbeddingPanel(pronoun))
    labels = [t for t in panel.labels if t.isVisible()]
    rects = [t.sceneBoundingRect() for t in labels]
    for a in range(len(rects)):
        for b in range(a + 1, len(rects)):
            assert not rects[a].intersects(rects[b]), (labels[a].toPlainText(), labels[b].toPlainText())
    # each label is nearer its own point than any other point, on screen
    vb = panel.plot.vb
    points = [vb.mapViewToScene(QPointF(*p)) for p in np.column_stack(drawn(panel.points))]

    def gap(rect, p):
        return np.hypot(max(rect.left() - p.x(), 0, p.x() - rect.right()), max(rect.top() - p.y(), 0, p.y() - rect.bottom()))

    for i, rect in enumerate(rects):
        own = gap(rect, points[i])
        assert own < 12, labels[i].toPlainText()
        assert all(gap(rect, p) >= own for k, p in enumerate(points) if k != i), labels[i].toPlainText()


def test_place_labels_puts_coincident_points_labels_apart():
    from attnexplorer.ui.panels.embedding_panel import place_labels

    points = np.array([[100.0, 100.0], [101.0, 100.0], [300.0, 300.0]])
    sizes = np.array([[30.0, 12.0], [30.0, 12.0], [30.0, 12.0]])
    offsets = place_labels(points, sizes)
    boxes = [(x + dx, y + dy, w, h) for (x, y), (dx, dy), (w, h) in zip(points, offsets, sizes)]
    a, b = boxes[0], boxes[1]
    assert a[0] + a[2] <= b[0] or b[0] + b[2] <= a[0] or a[1] + a[3] <= b[1] or b[1] + b[3] <= a[1]
    assert tuple(offsets[2]) == (7.0, -6.0)  # a lone point keeps the first place: to the right


def test_explain_shows_the_engines_numbers(pronoun, qtbot):
    panel = shown(qtbot, ExplainPanel(pronoun))
    pronoun.selection.set(query=6, key=None)
    result = pronoun.result
    text = panel.text()
    best = int(np.argmax(result.weights[0, 6]))
    assert f"score({result.tokens[6]}, {result.tokens[best]})" in text
    assert "weight" in text and f"{result.weights[0, 6, best]:.3f}"[:4] in text
    assert "most" in panel.caption.text()
    pronoun.selection.set(key=0)
    assert f"score({result.tokens[6]}, {result.tokens[0]})" in panel.text()
    assert panel.text_view.isReadOnly()


def test_panels_render_non_blank_pictures(pronoun, sine, qtbot):
    for panel in (QueryPanel(pronoun), EmbeddingPanel(pronoun), SignalPanel(sine)):
        shown(qtbot, panel)
        image = panel.grab().toImage()
        values = np.array([[image.pixelColor(x, y).value() for x in range(0, image.width(), 5)]
                           for y in range(0, image.height(), 5)])
        assert (values < 200).mean() > 0.03, type(panel).__name__


def test_nice_bounds_and_symmetric_levels():
    assert theme.nice_bound(0.9) == 1.0
    assert theme.nice_bound(1.1) == 1.5
    assert theme.nice_bound(13.85) == 15.0
    assert theme.nice_bound(7.0) == 8.0
    assert theme.nice_bound(0.0031) == pytest.approx(0.004)
    assert theme.symmetric_levels(np.array([[-2.7, 1.0]])) == (-3.0, 3.0)
    assert theme.symmetric_levels(np.array([[np.nan, 0.45]])) == (-0.5, 0.5)
    assert theme.symmetric_levels(np.full((2, 2), np.nan)) == (-1.0, 1.0)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(-1e4, 1e4, allow_nan=False), min_size=1, max_size=16), st.integers(3, 9))
def test_cell_texts_fit_and_stay_close_to_the_value(values, width):
    found = theme.cell_texts(np.array(values), [width])
    if found is None:
        return
    texts, index = found
    assert index == 0
    for value, text in zip(values, texts):
        assert len(text) <= width
        shown_value = float(text)
        # 2 significant digits or 1 decimal at worst.
        assert abs(shown_value - value) <= max(0.051 * abs(value), 0.05 + 1e-9)


def test_cell_texts_keep_one_style_per_block():
    # never ".25": the precision gives way before the leading zero does
    texts, _ = theme.cell_texts(np.array([0.5, 0.25, -0.125]), [5])
    assert texts == ["0.50", "0.25", "-0.12"]
    texts, _ = theme.cell_texts(np.array([0.5, np.nan]), [4])
    assert texts == ["0.5", None]


def test_readout_hint_fits_and_long_readouts_are_elided_not_clipped(pronoun, qtbot):
    from attnexplorer.ui.panels import WeightsPanel
    from attnexplorer.ui.panels.common import HOVER_HINT

    panel = shown(qtbot, WeightsPanel(pronoun), size=(360, 300))
    metrics = panel.readout.fontMetrics()
    assert metrics.horizontalAdvance(HOVER_HINT) <= panel.readout.contentsRect().width()
    long = "query 'she' (#6), key 'dog' (#1) = 0.88312 " * 3
    panel.show_readout(long)
    assert panel.readout.text() == long and panel.readout.toolTip() == long
    assert panel.readout.sizeHint().width() <= 360 or panel.width() == 360  # the layout does not grow


def test_explain_wraps_long_lines_and_stays_selectable(pronoun, qtbot):
    from PySide6.QtWidgets import QPlainTextEdit

    panel = shown(qtbot, ExplainPanel(pronoun), size=(320, 300))
    assert panel.text_view.lineWrapMode() == QPlainTextEdit.LineWrapMode.WidgetWidth
    assert panel.text_view.horizontalScrollBar().maximum() == 0  # nothing cut off to the right
    assert panel.text_view.isReadOnly() and panel.text_view.textInteractionFlags() & Qt.TextInteractionFlag.TextSelectableByMouse


def test_signal_legend_sits_below_the_plot(sine, qtbot):
    panel = shown(qtbot, SignalPanel(sine))
    legend = panel.legend.sceneBoundingRect()
    plot = panel.plot.vb.sceneBoundingRect()
    assert legend.top() >= plot.bottom()
    labels = [label.text for _sample, label in panel.legend.items]
    assert labels == ["clean", "noisy input", "attention output", "query's weights (peak = 1)"]


def test_stacked_output_bars_have_a_legend_of_their_keys(pronoun, qtbot):
    panel = shown(qtbot, QueryPanel(pronoun))
    pronoun.compute.wait_idle(60)
    pronoun.selection.set(query=6)
    entries = legend_entries(panel.legend)
    names = [name for name, _ in entries]
    assert names[:2] == ["'dog'", "'ball'"]  # she's largest weights, largest first
    colours = dict(entries)
    # the legend's colour is the colour of that key's stacked part and of its weight bar
    assert colours["'dog'"] == theme.CATEGORY_COLORS[0].name() and colours["'ball'"] == theme.CATEGORY_COLORS[1].name()
    assert set(panel.contributions()) - {"total"} and len(names) == len(panel.contributions()) - 1


def test_cell_numbers_never_need_an_exponent():
    from attnexplorer.ui.panels import theme

    texts, _ = theme.cell_texts(np.array([[0.883, 4.416e-7], [0.0254, 1.0]]), [8, 6])
    assert texts == ["0.883", "0.000", "0.025", "1.000"]
    texts, _ = theme.cell_texts(np.array([0.0386, 0.687, 3.4707, -0.6004]), [8])
    assert texts == ["0.0386", "0.687", "3.471", "-0.6004"]


def test_grids_are_opaque_and_lie_behind_the_data(pronoun, sine, qtbot):
    """Translucent grid lines cost milliseconds a frame; opaque ones must not cover the data."""
    query = shown(qtbot, QueryPanel(pronoun))
    signal = shown(qtbot, SignalPanel(sine))
    embedding = shown(qtbot, EmbeddingPanel(pronoun))
    grids = [(query.score_chart, "left"), (query.sum_chart, "left"), (signal.plot, "left"),
             (signal.plot, "bottom"), (embedding.plot, "left"), (embedding.plot, "bottom")]
    for plot, side in grids:
        axis = plot.getAxis(side)
        assert axis.grid == 255 and axis.tickPen().color().alpha() == 255
        behind = QGraphicsItem.GraphicsItemFlag.ItemStacksBehindParent
        assert axis.flags() & behind and not plot.vb.flags() & behind  # drawn before the data
        # the lines' pens as drawn: pyqtgraph keeps the alpha we asked for on every level
        image = QImage(10, 10, QImage.Format.Format_ARGB32)
        painter = QPainter(image)
        specs = axis.generateDrawSpecs(painter)
        painter.end()
        assert specs and all(pen.color().alpha() == 255 for pen, _p1, _p2 in specs[1])


def test_weights_can_be_coloured_up_to_the_largest_weight(qtbot):
    from attnexplorer.ui.panels import WeightsPanel

    built = build_preset("sine", {"N": 300, "tau": 0.5})
    doc = SessionDocument(built.session)
    assert doc.compute.wait_idle(60)
    panel = shown(qtbot, WeightsPanel(doc))
    assert panel.view.levels == (0.0, 1.0) and "(auto)" not in panel.heading.text
    panel.set_color_range("auto")
    top = float(doc.result.weights[0].max())
    assert top < 0.5 and panel.view.levels[0] == 0.0 and top <= panel.view.levels[1] <= 2 * top
    assert "colours 0 to" in panel.heading.text and "(auto)" in panel.heading.text
    panel.set_color_range("unit")
    assert panel.view.levels == (0.0, 1.0)
    with pytest.raises(ValueError):
        panel.set_color_range("rows")
    doc.shutdown()


def test_explain_after_an_edit_reads_as_a_fresh_panel_and_keeps_its_scroll(pronoun, qtbot):
    from attnexplorer.ui import user_actions

    panel = shown(qtbot, ExplainPanel(pronoun), size=(320, 200))
    pronoun.selection.set(query=6, key=1)
    bar = panel.text_view.verticalScrollBar()
    assert bar.maximum() > 0  # the text is longer than the view: there is something to keep
    bar.setValue(bar.maximum())
    scrolled = bar.value()
    before = panel.text()
    assert user_actions.set_cell(pronoun, "W_q", 0, 0, "2.5")
    pronoun.compute.wait_idle()
    after = panel.text()
    assert after != before  # the numbers changed in place ...
    fresh = shown(qtbot, ExplainPanel(pronoun), size=(320, 200))
    assert after == fresh.text()  # ... to exactly what a new panel shows for the new result
    # ... and the reader is not sent back to the top (lines wrapped anew may add a line or two).
    assert bar.value() >= scrolled > 0


def test_explain_text_replaces_changed_lines_across_emoji():
    from PySide6.QtWidgets import QPlainTextEdit

    from attnexplorer.ui.panels.explain_panel import replace_changed_span

    view = QPlainTextEdit()
    old = "score('🙂', 'b') = 1.25\nweight 0.5\nsame"
    view.setPlainText(old)
    for new in ("score('🙂', 'b') = 1.75\nweight 0.625\nsame",  # several lines, after an emoji
                "score('🙂🙂', 'b') = 1\nweight 0.6\nsame",  # shorter and longer
                "one line now"):  # other lines: set whole
        replace_changed_span(view, view.toPlainText(), new)
        assert view.toPlainText() == new
    view.deleteLater()


def test_explain_text_tells_its_layout_of_an_edit_once(pronoun, qtbot):
    # An edit changes a dozen lines of numbers: told line by line, the document laid out and
    # the view updated once a line (about half the panel's redraw of a W_q edit).
    from attnexplorer.ui import user_actions

    panel = shown(qtbot, ExplainPanel(pronoun), size=(320, 400))
    pronoun.selection.set(query=6, key=1)
    before = panel.text().split("\n")
    told = []
    panel.text_view.document().contentsChange.connect(lambda *a: told.append(a))
    assert user_actions.set_cell(pronoun, "W_q", 0, 0, "2.5")
    pronoun.compute.wait_idle()
    after = panel.text().split("\n")
    assert len(after) == len(before) and sum(a != b for a, b in zip(after, before)) > 3
    assert len(told) == 1, told


def test_bars_paint_the_same_pixels_by_rectangles_and_by_arrays(qtbot):
    import pyqtgraph as pg

    from attnexplorer.ui.panels import bars as bars_module
    from attnexplorer.ui.panels.bars import Bars

    heights = np.array([0.5, -0.25, 1.0, 0.0, 0.75, -1.0, 0.3, 0.9])

    def picture(few: int) -> QImage:
        bars_module._FEW_BARS, kept = few, bars_module._FEW_BARS
        try:
            widget = pg.PlotWidget()
            item = Bars(width=0.8, brush="b", pen=None)
            item.setOpts(x=np.arange(8) + 0.5, height=heights)
            widget.addItem(item)
            shown(qtbot, widget, size=(200, 150))
            return widget.grab().toImage()
        finally:
            bars_module._FEW_BARS = kept

    by_rectangles = picture(64)
    assert by_rectangles == picture(0)  # 8 rectangles one by one, or one path from arrays
    blue = [by_rectangles.pixelColor(x, y).blue() > 200 and by_rectangles.pixelColor(x, y).red() < 60
            for x in range(0, by_rectangles.width(), 4) for y in range(0, by_rectangles.height(), 4)]
    assert sum(blue) > 20  # and the bars are there


def test_empty_bars_set_empty_again_are_left_alone(qtbot):
    from attnexplorer.ui.panels.bars import Bars

    item = Bars(width=0.8)
    updates = []
    item.update = lambda *a: updates.append(a)  # what a change asks for: a repaint
    item.setOpts(x=[], height=[])
    assert updates == [] and list(item.opts["x"]) == []
    item.setOpts(x=[0.5], height=[2.0])
    assert len(updates) == 1
    item.setOpts(x=[], height=[])
    assert len(updates) == 2 and item.boundingRect().isNull()  # emptied: repainted once, no bars left


def test_more_bars_than_pixels_are_drawn_one_column_per_pixel(qtbot):
    import pyqtgraph as pg

    from attnexplorer.ui.panels.bars import Bars

    n = 16384
    heights = np.random.default_rng(3).normal(size=n)
    heights[9000] = 7.5  # one tall bar: a column must still reach it
    widget = pg.PlotWidget()
    item = Bars(width=0.8, brush="b", pen=None)
    item.setOpts(x=np.arange(n) + 0.5, height=heights)
    widget.addItem(item)
    widget.setXRange(0, n, padding=0)
    shown(qtbot, widget, size=(300, 150))
    widget.grab()  # a paint: the view's scale is settled at paint time
    rects = item.drawn_rects()
    assert len(rects) <= 400  # a few hundred columns, not 16,384 rectangles
    box = functools.reduce(lambda a, b: a.united(b), rects)
    assert box.top() == pytest.approx(heights.min()) and box.bottom() == pytest.approx(7.5)
    assert box.left() == pytest.approx(0.1) and box.right() == pytest.approx(n, abs=n / 250)
    # Zoomed in to 40 keys, every bar is its own rectangle again.
    widget.setXRange(9000, 9040, padding=0)
    widget.grab()
    assert len(item.drawn_rects()) == n


def test_bars_are_painted_as_rectangles_not_as_one_path():
    # Qt's raster engine fills one path of a few hundred rectangles through its general path
    # rasteriser: 3-5 ms a chart at 16,384 keys on the GUI thread while a long session
    # computed, where drawing the same rectangles as rectangles takes well under one.
    from unittest import mock

    from attnexplorer.ui.panels.bars import Bars

    item = Bars(width=0.8, brush="b", pen="k")
    item.setOpts(x=np.arange(200) + 0.5, height=np.linspace(-1, 1, 200))
    painter = mock.MagicMock()
    item.paint(painter, None)
    # One drawRects of the 200 rectangles, handed over as one array (no QRectF made per bar).
    assert painter.drawRects.call_count == 1 and painter.drawRects.call_args[0][1] == 200
    assert not painter.drawPath.called and not painter.fillPath.called


def test_stacked_bars_stack_each_sign_away_from_zero_one_array_a_colour():
    # The query panel's contributions: one item for every key's layer (ten Bars items cost ten
    # updates and ten paints an edit), each layer one drawRects of its rectangles in place.
    from unittest import mock

    from PySide6.QtGui import QColor

    from attnexplorer.ui.panels.bars import StackedBars

    parts = np.array([[1.0, -0.5, 0.25], [0.5, -0.25, -1.0], [-0.2, 0.75, 0.5]])
    item = StackedBars(width=0.7)
    item.set_stack(np.arange(3) + 0.5, parts, ["#ff0000", "#00ff00", "#0000ff"])
    layers = item.layers()
    assert [color.name() for color, _ in layers] == ["#ff0000", "#00ff00", "#0000ff"]
    # (top, height) of each layer's bar at each position: positives stacked up from 0, negatives down
    drawn = [[(round(r.top(), 6), round(r.height(), 6)) for r in rects] for _, rects in layers]
    assert drawn == [[(0.0, 1.0), (-0.5, 0.5), (0.0, 0.25)],
                     [(1.0, 0.5), (-0.75, 0.25), (-1.0, 1.0)],
                     [(-0.2, 0.2), (0.0, 0.75), (0.25, 0.5)]]
    assert all(r.width() == pytest.approx(0.7) and r.left() == pytest.approx(k + 0.15)
               for _, rects in layers for k, r in enumerate(rects))
    np.testing.assert_allclose(item.tops, [1.5, 0.75, 0.75])
    np.testing.assert_allclose(item.bottoms, [-0.2, -0.75, -1.0])
    box = item.boundingRect()
    assert (box.top(), box.bottom()) == pytest.approx((-1.0, 1.5))
    painter = mock.MagicMock()
    item.paint(painter, None)
    assert painter.drawRects.call_count == 3 and [c[0][1] for c in painter.drawRects.call_args_list] == [3, 3, 3]
    assert [c[0][0].color() for c in painter.setBrush.call_args_list] == [QColor("#ff0000"), QColor("#00ff00"), QColor("#0000ff")]
    item.clear()
    assert item.layers() == [] and item.boundingRect().isNull()
    painter = mock.MagicMock()
    item.paint(painter, None)
    assert not painter.drawRects.called


def test_the_query_panel_stacks_each_keys_contribution_in_its_colour(pronoun, qtbot):
    panel = shown(qtbot, QueryPanel(pronoun))
    pronoun.selection.set(query=6)
    parts = panel.contributions()
    parts.pop("total")
    layers = panel.parts.layers()
    legend = legend_entries(panel.legend)
    assert len(layers) == len(parts) == len(legend)
    for (color, rects), contribution, (_, legend_color) in zip(layers, parts.values(), legend):
        assert color.name() == legend_color
        np.testing.assert_allclose([r.height() for r in rects], np.abs(contribution), atol=1e-12)


def test_a_resized_panel_draws_its_axes_at_the_new_size(qtbot):
    # A dock made wider (the Explain dock closed): the token axes' cached pictures kept their
    # ticks and labels at the old width, squeezed into the axis's left part.
    from ui_helpers import close_window, open_window

    document, window = open_window(build_preset("random", {"n": 2048}).session)
    try:
        assert document.compute.wait_idle(30)
        panel = next(p for p in window.panels if isinstance(p, QueryPanel))
        qtbot.wait(50)
        before = panel.width()
        window.docks["explain"].close()
        qtbot.waitUntil(lambda: panel.width() > before + 100)
        qtbot.wait(50)
        image = panel.grab().toImage()
        for chart in (panel.score_chart, panel.weight_chart):
            axis = chart.token_axis
            box = axis.mapRectToScene(axis.rect())
            left = panel.canvas.viewport().mapTo(panel, panel.canvas.mapFromScene(box.topLeft()))
            right = panel.canvas.viewport().mapTo(panel, panel.canvas.mapFromScene(box.bottomRight()))
            # Labels reach the axis's last quarter (below its ticks, away from the bars).
            quarter = range(left.x() + 3 * (right.x() - left.x()) // 4, right.x() - 2)
            dark = sum(image.pixelColor(x, y).lightness() < 110 for x in quarter for y in range(left.y() + 8, right.y() - 2))
            assert dark > 20
    finally:
        window.docks["explain"].show()  # the window remembers its layout: leave it as found
        close_window(document, window)


def test_query_score_axis_stays_still_while_an_edit_redraws_the_same_row(sine, qtbot):
    # A τ drag redraws the same row on every step: its y axis keeps its range (no new tick
    # labels, no new cached axis picture) while the bars fit it and fill at least half of it;
    # it moves when they leave it or shrink below half, and a click on another row refits.
    from attnexplorer.core.inputs.session import Scale
    from attnexplorer.ui.panels.query_panel import nice_y_range

    panel = shown(qtbot, QueryPanel(sine))
    sine.selection.set(query=30)
    chart = panel.score_chart

    def set_tau(tau):
        sine.edit(sine.session.replace(scale=Scale("temperature", tau)), f"τ = {tau}", merge_key=("test", "tau"))
        assert sine.compute.wait_idle(60)

    def lowest_bar():
        return float(np.min(chart.heights))

    def fitted():  # the range a fresh fit gives these bars (nice ends, 3 % padding)
        low, high = nice_y_range(chart.heights)
        return round(low - 0.03 * (high - low), 6), round(high + 0.03 * (high - low), 6)

    def y_range():
        low, high = chart.vb.viewRange()[1]
        return round(low, 6), round(high, 6)

    relabelled = []
    axis = chart.getAxis("left")
    original = axis.generateDrawSpecs
    axis.generateDrawSpecs = lambda *a: relabelled.append(1) or original(*a)
    panel.grab()  # the row as clicked, painted
    relabelled.clear()
    start_range, start_low = y_range(), lowest_bar()
    assert start_range[0] <= start_low < 0
    for step in (1.05, 1.1, 1.15):  # scores shrink by up to 13 %: the axis stays
        set_tau(0.004 * step)
        panel.grab()  # painted
        assert y_range() == start_range and start_range[0] <= lowest_bar()
    assert relabelled == []
    set_tau(0.004 / 3)  # scores three times as large: the axis grows to hold them
    panel.grab()  # painted
    assert y_range()[0] <= lowest_bar() < start_range[0] and relabelled
    grown = y_range()
    set_tau(0.004 * 4)  # a twelfth of that: under half the range, the axis shrinks to fit
    panel.grab()  # painted
    assert grown[0] < y_range()[0] and y_range() == fitted()
    # Another row: a range fitted to its own bars, whatever was shown before.
    set_tau(0.004 * 1.15)
    sine.selection.set(query=5)
    panel.grab()  # painted
    assert y_range() == fitted()
