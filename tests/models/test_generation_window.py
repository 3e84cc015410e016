"""The model window's Generate tab, driven through its buttons on the tiny random Llama with an LM
head (4 query heads sharing 2 K/V heads): Step, Run, Back, the KV cache panel, an ablation made
in the window taking effect; every token and number is the one ``models.generation`` gives."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import QPoint, Qt

from attnexplorer.models import load_model
from attnexplorer.models.generation import Generation
from attnexplorer.models.interventions import Behaviour, Interventions

TEXT = "The dog fetched the ball"


@pytest.fixture
def opened(model_in_window, tiny_llama_lm):
    _window, controller = model_in_window(tiny_llama_lm, TEXT)
    loaded = load_model(str(tiny_llama_lm))
    return controller, controller.generation, Behaviour(loaded, loaded.run(TEXT))


def _click_and_wait(qtbot, control, button, check):
    control.last = None
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: (control.last is not None and check(control.last)) or control.last_error is not None,
                    timeout=60000)
    assert control.last_error is None, control.last_error
    return control.last


def test_step_run_back_and_the_kv_cache_panel(opened, qtbot):
    controller, control, reference = opened
    panel = controller.window.generation
    expected = Generation(reference, stop=())
    expected.run(6)
    n = len(reference.run.ids)
    snap = _click_and_wait(qtbot, control, panel.step_button, lambda s: s["steps"] == 1)
    assert snap["ids"] == expected.ids[:n + 1]
    panel.run_count.setValue(5)
    snap = _click_and_wait(qtbot, control, panel.run_button, lambda s: s["steps"] == 6 and s["ended"] is None)
    assert snap["ids"] == expected.ids
    loaded = reference.loaded
    per_token = loaded.num_layers * 2 * loaded.num_kv_heads * loaded.head_dim
    assert (snap["numbers"], snap["bytes"]) == (per_token * (n + 6), per_token * (n + 6) * 4)
    # the panel: the K and V heatmaps hold the cache of layer 0's K/V head 0, a row per position,
    # the newest marked; the attention strip a row per generated token
    keys = panel.keys.image.image
    assert keys.shape == (n + 6, loaded.head_dim)
    assert np.array_equal(keys, expected.cache.layer(0, 0)[0])
    assert panel.keys.marker.isVisible() and tuple(panel.keys.marker.getRegion()) == (n + 5, n + 6)
    assert panel.attention.image.image.shape == (6, n + 6)
    assert np.allclose(panel.attention.image.image[-1], expected.steps[-1].attention[0, 0], atol=1e-6)
    assert f"{per_token * (n + 6):,} numbers" in panel.state.text() and "read by query heads 0–1" in panel.state.text()
    assert panel.text.toPlainText() == TEXT + expected.generated_text()
    # another layer and a head of the second K/V head: the panel follows
    control.last = None
    panel.layer_spin.setValue(1)
    panel.head_spin.setValue(3)
    qtbot.waitUntil(lambda: control.last is not None and control.last["head"] == 3 and control.last["layer"] == 1,
                    timeout=60000)
    assert np.array_equal(panel.values.image.image, expected.cache.layer(1, 1)[1])
    assert "read by query heads 2–3" in panel.state.text()
    snap = _click_and_wait(qtbot, control, panel.back_button, lambda s: s["steps"] == 5)
    assert snap["ids"] == expected.ids[:-1] and panel.keys.image.image.shape[0] == n + 5


def test_an_ablation_in_the_window_is_in_force(opened, qtbot):
    controller, control, reference = opened
    panel = controller.window.generation
    panel.run_count.setValue(4)
    _click_and_wait(qtbot, control, panel.run_button, lambda s: s["steps"] == 4)
    controller.behaviour.set_ablation(0, 1, "zero")
    controller.behaviour.set_ablation(1, 2, "zero")
    snap = _click_and_wait(qtbot, control, panel.step_button, lambda s: s["steps"] == 5)
    # the four tokens are replayed under the ablations, the fifth picked with them in force
    plain = Generation(reference, stop=())
    plain.run(4)
    ablated = Generation(reference, Interventions().with_ablation(0, 1, "zero").with_ablation(1, 2, "zero"), stop=())
    for token in plain.ids[len(reference.run.ids):]:
        ablated.step(token)
    ablated.step()
    assert snap["ids"] == ablated.ids
    assert np.allclose(panel.attention.image.image[-1], ablated.steps[-1].attention[0, 0], atol=1e-6)


def test_a_typed_token_is_appended_and_a_bad_one_refused(opened, qtbot):
    controller, control, reference = opened
    panel = controller.window.generation
    token = reference.target_id(" dog")
    panel.token_edit.setText(" dog")
    snap = _click_and_wait(qtbot, control, panel.append_button, lambda s: s["steps"] == 1)
    assert snap["ids"][-1] == token and snap["last"] == reference.token(token)
    panel.token_edit.setText(" dog fetched")
    control.last = None
    qtbot.mouseClick(panel.append_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: control.last_error is not None, timeout=60000)
    assert "not one" in control.last_error and control.last_error in panel.state.text()
    # nothing was appended: the next step is the second token
    control.last_error = None
    snap = _click_and_wait(qtbot, control, panel.step_button, lambda s: s["steps"] == 2)
    assert snap["ids"][-2] == token


def _click_row(qtbot, bars, row, x):
    qtbot.mouseClick(bars.viewport(), Qt.MouseButton.LeftButton, pos=bars.row_point(row, x))


def test_a_token_clicked_in_the_next_token_bars_is_appended(opened, qtbot):
    controller, control, reference = opened
    mw, panel = controller.window, controller.window.generation
    mw.show()
    mw.side_tabs.setCurrentWidget(panel)
    qtbot.waitExposed(mw)
    snap = _click_and_wait(qtbot, control, panel.step_button, lambda s: s["steps"] == 1)
    # the bars: the prediction the next step picks from, the model's own
    expected = Generation(reference, stop=())
    expected.step()
    bars = panel.next_tokens
    assert bars.ids == [e["id"] for e in snap["next"][:len(bars.ids)]] and len(bars.ids) == 5
    assert snap["next"][0]["id"] == expected.sampling.pick(expected.logits, expected.length)
    # a click on the third bar appends the third most likely token, not the first
    third = bars.ids[2]
    control.last = None
    _click_row(qtbot, bars, 2, snap["next"][2]["prob"] / 2)
    qtbot.waitUntil(lambda: control.last is not None and control.last["steps"] == 2, timeout=60000)
    assert control.last["ids"][-1] == third
    expected.step(third)
    assert control.last["ids"] == expected.ids
    # a click on a token's label (left of the bars) appends that one
    label_x = bars.mapFromScene(bars.plot.getAxis("left").sceneBoundingRect().center()).x()
    fourth = bars.ids[3]
    control.last = None
    point = bars.row_point(3)
    qtbot.mouseClick(bars.viewport(), Qt.MouseButton.LeftButton, pos=QPoint(label_x, point.y()))
    qtbot.waitUntil(lambda: control.last is not None and control.last["steps"] == 3, timeout=60000)
    assert control.last["ids"][-1] == fourth
    # a click on the title, above every row, appends nothing
    control.last = None
    qtbot.mouseClick(bars.viewport(), Qt.MouseButton.LeftButton, pos=QPoint(point.x(), 3))
    qtbot.wait(200)
    assert control.last is None and len(control.jobs.state["generation"].ids) == len(expected.ids) + 1


def test_the_tables_follow_the_generated_text_one_undo_step_each(opened, qtbot):
    controller, control, reference = opened
    panel = controller.window.generation
    window = controller.main_window
    doc = window.document
    layer = controller.tables_layer
    prompt_session = doc.session
    n = len(reference.run.ids)
    _click_and_wait(qtbot, control, panel.step_button, lambda s: s["steps"] == 1)
    assert doc.session is prompt_session and not doc.undo_stack.canUndo()   # nothing follows until asked
    # one click: the tables take the layer on the text as it is now
    qtbot.mouseClick(panel.follow_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: len(doc.session.tokens) == n + 1, timeout=60000)
    generation = control.jobs.state["generation"]
    grown = reference.loaded.run_ids(list(generation.ids), [reference.loaded.tokenizer.piece(i)
                                                            for i in generation.ids], generation.text())
    from attnexplorer.io.session_file import session_from_dict

    want = session_from_dict(reference.loaded.layer_parts(grown, layer), "x")
    assert np.allclose(doc.session.w_query, want.w_query) and np.allclose(doc.session.embeddings, want.embeddings)
    assert tuple(doc.session.tokens) == grown.tokens
    # and after each step
    panel.run_count.setValue(2)
    _click_and_wait(qtbot, control, panel.run_button, lambda s: s["steps"] == 3)
    qtbot.waitUntil(lambda: len(doc.session.tokens) == n + 3, timeout=60000)
    qtbot.waitUntil(lambda: "on the generated text" in controller.window.badge.text(), timeout=60000)
    # Edit ▸ Undo in the main window: the text one step back, then the prompt's layer
    window.undo_action.trigger()
    assert len(doc.session.tokens) == n + 1
    window.undo_action.trigger()
    assert doc.session.tokens == prompt_session.tokens
    assert np.array_equal(doc.session.embeddings, prompt_session.embeddings)
    # off again: a step leaves the tables alone
    qtbot.mouseClick(panel.follow_button, Qt.MouseButton.LeftButton)
    held = doc.session
    _click_and_wait(qtbot, control, panel.step_button, lambda s: s["steps"] == 4)
    qtbot.wait(200)
    assert doc.session is held


def test_following_asks_about_unsaved_work_and_stops_when_it_is_kept(opened, qtbot):
    controller, control, reference = opened
    panel = controller.window.generation
    window = controller.main_window
    doc = window.document
    from attnexplorer.core.inputs.presets import build_preset

    window.actions.adopt_session(build_preset("pronoun").session)   # the tables hold a preset …
    preset = doc.session
    w = np.array(preset.w_query)
    w[0, 0, 0] += 1.0
    doc.edit(preset.replace(w_query=w), "Edit W_q")                 # … edited, unsaved
    edited = doc.session
    window.ask_unsaved = lambda: "cancel"
    _click_and_wait(qtbot, control, panel.step_button, lambda s: s["steps"] == 1)
    qtbot.mouseClick(panel.follow_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not panel.follow_button.isChecked(), timeout=60000)
    assert doc.session is edited
    # "discard": the tables take the layer, then the grown text, one undo step back to the layer
    window.ask_unsaved = lambda: "discard"
    qtbot.mouseClick(panel.follow_button, Qt.MouseButton.LeftButton)
    n = len(reference.run.ids)
    qtbot.waitUntil(lambda: len(doc.session.tokens) == n + 1, timeout=60000)
    assert controller.tables_layer == controller.window.layer and panel.follow_button.isChecked()
    window.undo_action.trigger()
    assert tuple(doc.session.tokens) == reference.run.tokens


def grown_attention(generation) -> np.ndarray:
    """The thumbnails' weights made afresh: the prompt's weights, then each generated token's
    row over every key (0 past its keys)."""
    run, steps = generation.behaviour.run, generation.steps
    n, total = len(run.ids), generation.length
    out = np.zeros(run.attentions.shape[:2] + (total, total), dtype=np.float32)
    out[:, :, :n, :n] = run.attentions
    for i, step in enumerate(steps):
        out[:, :, n + i, :step.attention.shape[-1]] = step.attention
    return out


def test_the_model_view_grows_with_the_text(opened, qtbot):
    from attnexplorer.ui.model.views import thumbnail_rgb

    controller, control, reference = opened
    mw, panel, grid = controller.window, controller.window.generation, controller.window.grid
    mw.show()
    qtbot.waitExposed(mw)
    n = len(reference.run.ids)
    panel.run_count.setValue(3)
    _click_and_wait(qtbot, control, panel.run_button, lambda s: s["steps"] == 3 and s["ended"] is None)
    assert grid.generated == (n, n + 3)
    # every thumbnail: the prompt's weights, then each new token's row over every key
    expected = Generation(reference, stop=())
    expected.run(3)
    grown = grown_attention(expected)
    assert grown.shape[2:] == (n + 3, n + 3)
    assert np.array_equal(grown[:, :, :n, :n], reference.run.attentions)
    assert np.allclose(grown[1, 2, n + 2, :], expected.steps[2].attention[1, 2], atol=1e-6)
    assert np.allclose(grown_attention(control.jobs.state["generation"]), grown, atol=1e-6)
    # coloured on the worker
    assert np.array_equal(control.last["grown"], thumbnail_rgb(grown_attention(control.jobs.state["generation"])))
    # the generated rows are marked beside each thumbnail, in orange
    r = grid.cell_rect(1, 2)
    pixel = grid.grab().toImage().pixelColor(int(r.left()) - 2, int(r.bottom()) - 1)
    assert (pixel.red(), pixel.green(), pixel.blue()) == (235, 130, 40)
    # Back to the prompt: the prompt's thumbnails, unmarked
    panel.run_count.setValue(1)
    for steps in (2, 1, 0):
        _click_and_wait(qtbot, control, panel.back_button, lambda s, k=steps: s["steps"] == k)
    assert grid.generated is None and control.last["grown"] is None


def test_a_run_draws_only_the_newest_snapshot_and_paints_each_plot_once(opened, qtbot):
    """The GUI thread behind a Run: the snapshots that came meanwhile are drawn once, the newest;
    drawing one makes no graphics item and paints each of the tab's plots once (a changed range
    settled in the paint, or the names' column refitted, painted them twice or three times)."""
    from PySide6.QtCore import QEvent, QObject

    from attnexplorer.ui.model.generation_panel import snapshot

    controller, control, reference = opened
    mw, panel = controller.window, controller.window.generation
    mw.side_tabs.setCurrentWidget(panel)
    mw.show()
    qtbot.waitExposed(mw)
    _click_and_wait(qtbot, control, panel.step_button, lambda s: s["steps"] == 1)
    generation = Generation(reference, stop=())
    snaps = []
    for _ in range(3):
        generation.step()
        snaps.append(snapshot(generation, 0, 0))
    plots = (panel.attention, panel.next_tokens, panel.keys, panel.values)
    items = [len(plot.scene().items()) for plot in plots]

    class Paints(QObject):
        def __init__(self):
            super().__init__()
            self.count = {plot: 0 for plot in plots}
            for plot in plots:
                plot.viewport().installEventFilter(self)

        def eventFilter(self, watched, event):
            if event.type() == QEvent.Type.Paint:
                for plot in plots:
                    if plot.viewport() is watched:
                        self.count[plot] += 1
            return False

    paints = Paints()
    for snap in snaps[::-1]:   # the axes and the names' column made as wide as these steps need
        paints.count = dict.fromkeys(plots, 0)
        control.show_step(snap)
        qtbot.waitUntil(lambda: control.last is snap and all(paints.count.values()), timeout=10000)
        qtbot.wait(300)
    paints.count, drawn = dict.fromkeys(plots, 0), control.drawn
    for snap in snaps:   # three steps came while the GUI thread was busy
        control.show_step(snap)
    qtbot.waitUntil(lambda: control.drawn > drawn and all(paints.count.values()), timeout=10000)
    qtbot.wait(300)   # time for a second paint, were one coming
    assert control.drawn == drawn + 1 and control.last is snaps[-1]
    assert panel.keys.image.image.shape[0] == snaps[-1]["length"]
    assert list(paints.count.values()) == [1, 1, 1, 1], [type(p).__name__ for p in plots]
    assert [len(plot.scene().items()) for plot in plots] == items


def test_the_thumbnails_colour_only_the_new_rows(opened):
    """The worker's thumbnails of the grown text are coloured a row per step: after steps, a
    Back and another token in its place, they are the whole grown text's coloured afresh."""
    from attnexplorer.ui.model.generation_panel import GrownThumbnails
    from attnexplorer.ui.model.views import thumbnail_rgb

    _controller, _control, reference = opened
    generation, thumbnails = Generation(reference, stop=()), GrownThumbnails()
    assert thumbnails.update(generation) is None   # nothing generated: the prompt's own
    generation.run(3)
    assert np.array_equal(thumbnails.update(generation), thumbnail_rgb(grown_attention(generation)))
    assert thumbnails.coloured == 3
    generation.step()
    assert np.array_equal(thumbnails.update(generation), thumbnail_rgb(grown_attention(generation)))
    assert thumbnails.coloured == 4   # one row more, the others kept
    taken = generation.back()
    generation.back()
    generation.step((taken.token_id + 1) % generation.logits.shape[0])   # another token where one was
    assert np.array_equal(thumbnails.update(generation), thumbnail_rgb(grown_attention(generation)))
    assert thumbnails.coloured == 5


def test_a_run_makes_no_snapshot_the_window_skips(opened, qtbot, monkeypatch):
    """A Run's worker makes a step's snapshot only when the window has drawn the last: every one
    made is drawn, but for one the run's final answer may replace."""
    from attnexplorer.ui.model import generation_panel

    controller, control, _reference = opened
    mw, panel = controller.window, controller.window.generation
    mw.side_tabs.setCurrentWidget(panel)
    mw.show()
    qtbot.waitExposed(mw)
    made = []
    real = generation_panel.snapshot
    monkeypatch.setattr(generation_panel, "snapshot", lambda *a, **k: made.append(1) or real(*a, **k))
    control.jobs.progress_s = 0.0   # no throttle: the steps of the tiny model come far faster than draws
    drawn = control.drawn
    panel.run_count.setValue(24)
    _click_and_wait(qtbot, control, panel.run_button, lambda s: s["steps"] == 24 or s["ended"] is not None)
    assert control.last["steps"] == 24
    assert len(made) <= control.drawn - drawn + 1, (len(made), control.drawn - drawn)


def _axis_labels(plot_item, side: str) -> list[str]:
    """The tick labels an axis draws (those pyqtgraph hides past the plot's edge left out)."""
    from PySide6.QtGui import QImage, QPainter

    image = QImage(10, 10, QImage.Format.Format_ARGB32)
    painter = QPainter(image)
    try:
        specs = plot_item.getAxis(side).generateDrawSpecs(painter)
    finally:
        painter.end()
    return [] if specs is None else [text for _rect, _flags, text in specs[2]]


def test_the_charts_label_their_origin_and_count_rows(opened, qtbot):
    """The Next token chart's probability axis reads from a labelled 0; the heatmaps' axes
    count rows and keys from 0, unscaled (the first rows were once written ×1000)."""
    controller, control, reference = opened
    panel = controller.window.generation
    controller.window.resize(1280, 800)
    controller.window.side_tabs.setCurrentWidget(panel)
    controller.window.show()
    qtbot.waitExposed(controller.window)
    panel.run_count.setValue(3)
    snap = _click_and_wait(qtbot, control, panel.run_button, lambda s: s["steps"] == 3)
    assert "0" in _axis_labels(panel.next_tokens.plot, "bottom")
    for heatmap, rows in ((panel.attention, 3), (panel.keys, snap["length"])):
        plot = heatmap.getPlotItem()
        assert "0" in _axis_labels(plot, "bottom")
        assert max(float(t) for t in _axis_labels(plot, "left")) <= rows


def test_a_new_run_frees_the_old_generation(opened, qtbot):
    """Opening another run lets the old generation go, with the copies of the weights its steps
    read (as large as the model's matrices) and its thumbnails."""
    controller, control, reference = opened
    panel = controller.window.generation
    _click_and_wait(qtbot, control, panel.step_button, lambda s: s["steps"] == 1)
    assert control.jobs.state["generation"].layout.copied > 0
    control.start(reference.loaded)
    qtbot.waitUntil(lambda: not control.jobs.state, timeout=30000)


def test_the_heatmaps_count_rows_in_whole_numbers_on_a_tall_window(opened, qtbot):
    """At 1920×1080 the new tokens' attention of 3 generated tokens was ticked 0, 0.5, 1, 1.5,
    2, 2.5, 3: rows and keys are whole numbers."""
    controller, control, _reference = opened
    panel = controller.window.generation
    controller.window.resize(1920, 1080)
    controller.window.side_tabs.setCurrentWidget(panel)
    controller.window.show()
    qtbot.waitExposed(controller.window)
    panel.run_count.setValue(3)
    _click_and_wait(qtbot, control, panel.run_button, lambda s: s["steps"] == 3)
    for heatmap in (panel.attention, panel.keys, panel.values):
        for side in ("left", "bottom"):
            labels = _axis_labels(heatmap.getPlotItem(), side)
            assert labels and all(float(t) == int(float(t)) for t in labels), (side, labels)
