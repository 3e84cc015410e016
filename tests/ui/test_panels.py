"""The heatmap panels: what they draw equals the engine's result, and they follow the document."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import QRectF, Qt

from attnexplorer.core.inputs.session import Mask, Session
from attnexplorer.ui.document import SessionDocument
from attnexplorer.ui.panels import (PANEL_CLASSES, OutputPanel, QKVPanel, ScaledScoresPanel, ScoresPanel,
                                    WeightsPanel, make_panels)
from attnexplorer.ui.panels.base import Panel
from ui_helpers import shown

TOKENS = ("the", "dog", "chased", "a", "cat", "she")


def make_session(n=len(TOKENS), d=3, d_k=3, d_v=2, heads=2, mask=None, w_out=False, seed=0, tokens=None):
    rng = np.random.default_rng(seed)
    tokens = tokens or (TOKENS if n == len(TOKENS) else tuple(f"t{i}" for i in range(n)))
    return Session(
        tokens,
        rng.normal(size=(n, d)),
        rng.normal(size=(heads, d, d_k)),
        rng.normal(size=(heads, d, d_k)),
        rng.normal(size=(heads, d, d_v)),
        w_out=rng.normal(size=(heads * d_v, 4)) if w_out else None,
        mask=mask or Mask("causal"),
    )


@pytest.fixture
def doc(qtbot):
    document = SessionDocument(make_session())
    yield document
    document.shutdown()




def view_to_widget(panel, view, x, y):
    from PySide6.QtCore import QPointF

    scene = view.vb.mapViewToScene(QPointF(x, y))
    return panel.canvas.mapFromScene(scene)


def test_make_panels_builds_every_class_in_order(doc, qtbot):
    panels = make_panels(doc)
    for p in panels:
        qtbot.addWidget(p)
    assert [type(p) for p in panels] == list(PANEL_CLASSES)
    kinds = [p.kind for p in panels]
    assert len(set(kinds)) == len(kinds)
    assert all(isinstance(p, Panel) and p.minimumWidth() >= 300 for p in panels)


def test_weights_image_is_the_result_with_blocked_cells_hatched(doc, qtbot):
    panel = shown(qtbot, WeightsPanel(doc))
    result = doc.result
    image = panel.view.image.image
    expected = np.where(result.mask, np.nan, result.weights[0])
    np.testing.assert_array_equal(np.isnan(image), result.mask)
    np.testing.assert_allclose(image[~result.mask], expected[~result.mask])
    assert panel.view.levels == (0.0, 1.0)
    assert tuple(panel.view.image.getLevels()) == (0.0, 1.0)
    assert panel.view.hatch.isVisible()
    assert panel.view.row_axis.labels == TOKENS
    assert panel.view.col_axis.labels == TOKENS
    assert panel.view.row_axis.tickStrings([0.5, 5.5], 1, 1) == ["the", "she"]


def test_edit_redraws_with_new_data_and_keeps_levels_fixed(doc, qtbot):
    panel = shown(qtbot, ScoresPanel(doc))
    before = panel.view.image.image.copy()
    session = doc.session
    doc.edit(session.replace(embeddings=session.embeddings * 1.01), "scale embeddings")
    after = panel.view.image.image
    assert not np.array_equal(before, after)
    np.testing.assert_allclose(after, doc.result.scores[0])
    lo, hi = panel.view.levels
    assert lo == -hi and hi >= np.abs(doc.result.scores[0]).max()
    # Fixed levels: the image does not auto-level to its own min/max.
    assert tuple(panel.view.image.getLevels()) == (lo, hi)
    assert hi != float(np.abs(after).max())


def test_head_selection_switches_the_drawn_head(doc, qtbot):
    panel = shown(qtbot, ScoresPanel(doc))
    doc.selection.set(head=1)
    np.testing.assert_allclose(panel.view.image.image, doc.result.scores[1])
    assert "head 1" in panel.heading.text


def test_scaled_scores_hover_names_tokens_and_says_blocked(doc, qtbot):
    panel = shown(qtbot, ScaledScoresPanel(doc))
    result = doc.result
    assert "dog" in panel.view.describe_cell(2, 1) and "chased" in panel.view.describe_cell(2, 1)
    value = result.scaled_scores[0, 2, 1]
    assert f"{value:.4g}"[:4] in panel.view.describe_cell(2, 1)
    assert "blocked" in panel.view.describe_cell(1, 4)
    # A real mouse move over a cell writes the read-out line.
    qtbot.mouseMove(panel.canvas.viewport(), view_to_widget(panel, panel.view, 1.5, 2.5))
    qtbot.waitUntil(lambda: "chased" in panel.readout.text(), timeout=2000)
    assert "√3" in panel.heading.text and "causal" in panel.heading.text


def test_clicking_a_cell_selects_query_and_key_everywhere(doc, qtbot):
    weights = shown(qtbot, WeightsPanel(doc))
    scores = shown(qtbot, ScoresPanel(doc))
    qtbot.mouseClick(weights.canvas.viewport(), Qt.MouseButton.LeftButton,
                     pos=view_to_widget(weights, weights.view, 2.5, 4.5))
    assert (doc.selection.current.query, doc.selection.current.key) == (4, 2)
    # The selection frame moved in both panels.
    for panel in (weights, scores):
        assert panel.view.row_frame.isVisible() and panel.view.row_frame.rect().top() == 4
        assert panel.view.col_frame.rect().left() == 2
    doc.selection.set(query=1, key=None)
    assert scores.view.row_frame.rect().top() == 1 and not scores.view.col_frame.isVisible()


def test_with_a_custom_mask_clicking_a_masked_panel_toggles_the_cell(doc, qtbot):
    doc.edit(doc.session.replace(mask=Mask("custom", blocked=np.zeros((6, 6), dtype=bool))), "custom")
    scaled = shown(qtbot, ScaledScoresPanel(doc))
    scores = shown(qtbot, ScoresPanel(doc))
    qtbot.mouseClick(scaled.canvas.viewport(), Qt.MouseButton.LeftButton,
                     pos=view_to_widget(scaled, scaled.view, 3.5, 1.5))
    assert doc.session.mask.blocked[1, 3] and doc.session.mask.blocked.sum() == 1
    assert doc.result.mask[1, 3] and doc.result.weights[0, 1, 3] == 0.0
    assert (doc.selection.current.query, doc.selection.current.key) == (1, 3)
    # the raw scores are not masked: a click there only selects
    qtbot.mouseClick(scores.canvas.viewport(), Qt.MouseButton.LeftButton,
                     pos=view_to_widget(scores, scores.view, 0.5, 0.5))
    assert doc.session.mask.blocked.sum() == 1
    doc.undo_stack.undo()
    assert not doc.session.mask.blocked.any()


def test_small_matrices_have_numbers_in_cells_with_readable_colours(doc, qtbot):
    panel = shown(qtbot, WeightsPanel(doc), size=(600, 500))
    texts = panel.view.cell_texts()
    result = doc.result
    visible = int((~result.mask).sum())
    assert len(texts) == visible  # one number per unblocked cell, none on blocked cells
    for (r, c), text in texts.items():
        assert not result.mask[r, c]
        assert abs(float(text) - result.weights[0, r, c]) <= 0.051 * max(1.0, abs(result.weights[0, r, c]))
    # Dark cells (low weights on viridis) get white text, bright ones black.
    dark = {(r, c): is_dark for r, c, _text, is_dark in panel.view.numbers.cells}
    low = min(texts, key=lambda rc: result.weights[0][rc])
    high = max(texts, key=lambda rc: result.weights[0][rc])
    assert dark[low] is False and dark[high] is True
    # They are painted: a cell's number puts text-coloured pixels in its middle.
    picture = panel.canvas.grab().toImage()
    p = view_to_widget(panel, panel.view, high[1] + 0.5, high[0] + 0.5)
    window = [picture.pixelColor(p.x() + dx, p.y() + dy).value() for dx in range(-8, 9) for dy in range(-3, 4)]
    assert min(window) < 80  # black text on the bright cell


def test_cell_numbers_sit_in_the_middle_of_their_cells(doc, qtbot):
    # Numbers are measured by the font's metrics and drawn at their baseline: the ink of a
    # number is centred on its cell, across and down, to a pixel or two.
    panel = shown(qtbot, WeightsPanel(doc), size=(600, 500))
    weights = doc.result.weights[0]
    texts = panel.view.cell_texts()
    picture = panel.canvas.grab().toImage()
    dark = {(r, c): is_dark for r, c, _text, is_dark in panel.view.numbers.cells}
    checked = 0
    for (r, c), text in texts.items():
        if not dark[(r, c)]:
            continue  # white text: the bright cells' black ink is the easier to find
        top_left, bottom_right = view_to_widget(panel, panel.view, c, r), view_to_widget(panel, panel.view, c + 1, r + 1)
        xs, ys = [], []
        for x in range(top_left.x() + 2, bottom_right.x() - 1):
            for y in range(top_left.y() + 2, bottom_right.y() - 1):
                if picture.pixelColor(x, y).value() < 80:
                    xs.append(x)
                    ys.append(y)
        assert xs, (r, c, text)
        centre = view_to_widget(panel, panel.view, c + 0.5, r + 0.5)
        assert abs((min(xs) + max(xs)) / 2 - centre.x()) <= 2.0, (r, c, text)
        assert abs((min(ys) + max(ys)) / 2 - centre.y()) <= 2.5, (r, c, text)
        checked += 1
    assert checked >= 1 and weights.size


def test_fully_blocked_row_is_hatched_and_labelled_not_coloured(qtbot):
    blocked = np.zeros((6, 6), dtype=bool)
    blocked[3, :] = True  # query 3 sees no key
    document = SessionDocument(make_session(mask=Mask("custom", blocked=blocked)))
    try:
        panel = shown(qtbot, WeightsPanel(document), size=(500, 400))
        image = panel.view.image.image
        assert np.isnan(image[3]).all() and not np.isnan(np.delete(image, 3, axis=0)).any()
        assert panel.view.row_notes() == ["all keys blocked"]
        assert "sees no key" in panel.view.describe_cell(3, 0)
        picture = panel.canvas.grab().toImage()
        # Pixels across the blocked row are the grey hatch, never a colour-map colour.
        for x in (0.3, 0.7, 5.3, 5.7):
            p = view_to_widget(panel, panel.view, x, 3.15)
            color = picture.pixelColor(p.x(), p.y())
            assert abs(color.red() - color.green()) < 8 and abs(color.green() - color.blue()) < 8, color.name()
        p = view_to_widget(panel, panel.view, 0.3, 2.15)
        color = picture.pixelColor(p.x(), p.y())
        assert not (abs(color.red() - color.green()) < 8 and abs(color.green() - color.blue()) < 8)
    finally:
        document.shutdown()


def test_qkv_panel_shows_the_selected_heads_projections(doc, qtbot):
    panel = shown(qtbot, QKVPanel(doc), size=(600, 320))
    doc.selection.set(head=1, query=2, key=4)
    result = doc.result
    np.testing.assert_allclose(panel.q_view.image.image, result.Q[1])
    np.testing.assert_allclose(panel.k_view.image.image, result.K[1])
    np.testing.assert_allclose(panel.v_view.image.image, result.V[1])
    levels = {v.levels for v in panel.views()}
    assert len(levels) == 1  # one shared colour scale
    assert panel.q_view.col_axis.labels == ("q0", "q1", "q2")
    assert panel.q_view.row_frame.rect().top() == 2 and panel.k_view.row_frame.rect().top() == 4
    qtbot.mouseClick(panel.canvas.viewport(), Qt.MouseButton.LeftButton,
                     pos=view_to_widget(panel, panel.k_view, 0.5, 0.5))
    assert doc.selection.current.key == 0 and doc.selection.current.query == 2


def test_output_panel_shows_head_output_concat_and_w_out(qtbot):
    document = SessionDocument(make_session(w_out=True))
    try:
        panel = shown(qtbot, OutputPanel(document), size=(700, 320))
        result = document.result
        assert panel.views() == [panel.head_view, panel.concat_view, panel.out_view]
        np.testing.assert_allclose(panel.head_view.image.image, result.head_outputs[0])
        np.testing.assert_allclose(panel.concat_view.image.image, result.concat)
        np.testing.assert_allclose(panel.out_view.image.image, result.output)
        assert panel.concat_view.col_axis.labels[:3] == ("h0v0", "h0v1", "h1v0")
        # One head, no W_o: only the head's output is shown.
        document.set_session(make_session(heads=1))
        assert panel.views() == [panel.head_view]
        np.testing.assert_allclose(panel.head_view.image.image, document.result.head_outputs[0])
    finally:
        document.shutdown()


def test_hidden_panels_wait_and_catch_up_when_shown(doc, qtbot):
    panel = WeightsPanel(doc)
    qtbot.addWidget(panel)
    panel.resize(400, 300)
    panel.show()
    qtbot.waitExposed(panel)
    panel.hide()
    session = doc.session
    doc.edit(session.replace(embeddings=session.embeddings * 2.0), "double")
    assert panel.is_stale
    assert not np.allclose(np.nan_to_num(panel.view.image.image), np.nan_to_num(doc.result.weights[0]))
    panel.show()
    assert not panel.is_stale
    np.testing.assert_allclose(np.nan_to_num(panel.view.image.image), doc.result.weights[0])


def test_export_item_renders_a_non_blank_figure_with_title_and_colorbar(doc, qtbot):
    from pyqtgraph.exporters import ImageExporter

    for cls in (WeightsPanel, ScaledScoresPanel, QKVPanel, OutputPanel):
        panel = shown(qtbot, cls(doc))
        item = panel.export_item()
        assert item is panel.figure
        image = ImageExporter(item).export(toBytes=True)
        assert image.width() > 100 and image.height() > 100
        pixels = np.array([[image.pixelColor(x, y).value() for x in range(0, image.width(), 4)]
                           for y in range(0, image.height(), 4)])
        assert (pixels < 200).mean() > 0.05, cls.__name__  # plenty of ink, not a blank page
        assert panel.heading.scene() is item.scene()


def test_large_sessions_draw_without_cell_items_and_thin_their_labels(qtbot):
    document = SessionDocument(make_session(n=512, d=8, d_k=8, d_v=8, heads=1, mask=Mask("none")))
    try:
        document.compute.wait_idle()
        panel = shown(qtbot, WeightsPanel(document), size=(500, 400))
        weights = document.result.weights[0]
        view = panel.view
        # More cells than pixels: the image is the block maxima, once, at about the pixel size.
        fy, fx = view.image_factor
        assert fy > 1 and fx > 1
        rows, cols = view.image.image.shape
        assert rows * fy >= 512 and rows <= view.vb.height() + 1 and cols <= view.vb.width() + 1
        np.testing.assert_array_equal(view.image.image[1, 2], weights[fy:2 * fy, 2 * fx:3 * fx].max())
        assert view.image_rect == QRectF(0, 0, 512, 512)
        np.testing.assert_array_equal(view.data, weights)
        assert view.cell_texts() == {}
        ticks = view.row_axis.tickValues(0, 512, view.vb.height())[0][1]
        assert 2 <= len(ticks) <= view.vb.height() / 14 + 1
        # Zoomed in to a few cells: every label in view, exact values and the numbers come back.
        view.vb.setRange(xRange=(100, 106), yRange=(200, 206), padding=0)
        ticks = view.row_axis.tickValues(200, 206, view.vb.height())[0][1]
        assert [view.row_axis.tickStrings([t], 1, 1)[0] for t in ticks] == [f"t{i}" for i in range(200, 206)]
        assert view.image_factor == (1, 1)
        r = view.image_rect
        assert r.left() <= 100 and r.right() >= 106 and r.top() <= 200 and r.bottom() >= 206
        np.testing.assert_array_equal(view.image.image,
                                      weights[int(r.top()):int(r.bottom()), int(r.left()):int(r.right())])
        assert len(view.cell_texts()) == 36
        # The hover reads the matrix cell under the mouse, whatever image is shown.
        qtbot.mouseMove(panel.canvas.viewport(), view_to_widget(panel, view, 103.5, 204.5))
        qtbot.waitUntil(lambda: "t204" in panel.readout.text() and "t103" in panel.readout.text(), timeout=2000)
        # Back out: the overview again.
        view.reset_zoom()
        assert view.image_factor == (fy, fx) and view.image_rect == QRectF(0, 0, 512, 512)
    finally:
        document.shutdown()
