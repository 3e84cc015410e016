"""The Fit dock in the real main window: a live fit, one undo step, pause/stop, drawing, refusals."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import QEvent, QPointF, Qt
from PySide6.QtGui import QMouseEvent
from PySide6.QtWidgets import QApplication

from attnexplorer.core.inputs.presets import build_preset, parse_assignments
from attnexplorer.core.inputs.session import Mask
from attnexplorer.core.inputs.stages import Positions
from attnexplorer.ui.document import SessionDocument
from attnexplorer.ui.window import MainWindow
from attnexplorer.ui.settings import AppSettings


@pytest.fixture
def make_window(qtbot, isolated):
    made = []

    def make(n=8, d=8, d_k=4, heads=1, mask="causal", seed=0, session=None):
        s = session or build_preset("random", parse_assignments([f"n={n}", f"d={d}", f"d_k={d_k}", f"heads={heads}",
                                                                 f"seed={seed}"])).session.replace(mask=Mask(mask))
        doc = SessionDocument(s)
        window = MainWindow(doc, AppSettings())
        window.ask_unsaved = lambda: "discard"
        qtbot.addWidget(window)
        window.resize(1280, 800)
        window.show()
        qtbot.waitExposed(window)
        window.docks["fit"].raise_()
        made.append(window)
        return window

    yield make
    for window in made:
        window.fit.runner.shutdown()
        window.actions.autosaver.discard()
        window.document.shutdown()


def previous_token(n):
    t = np.zeros((n, n))
    t[np.arange(n), np.maximum(np.arange(n) - 1, 0)] = 1.0
    return t


def test_a_fit_in_the_window_matches_the_target_and_is_one_undo_step(make_window, isolated):
    window = make_window()
    doc, fit = window.document, window.fit
    start = doc.session
    frames = []
    doc.result_changed.connect(lambda r: frames.append(r))
    assert fit.editor.target_kind == "previous-token"
    assert fit.controls.start()
    assert fit.runner.wait(120)
    assert fit.runner.last.status == "converged"
    assert "matched the target" in fit.report
    shown = doc.result.weights[0]
    assert np.abs(shown - previous_token(8)).max() < 0.01
    # The panels followed: more than the final result was drawn, and the weights panel shows it.
    assert len(frames) >= 2
    weights_panel = next(p for p in window.panels if p.kind == "weights")
    np.testing.assert_array_equal(weights_panel.view.data, shown)
    # The loss curve holds every step, falling, on a log axis.
    xs, ys = fit.controls.loss_curve.getData()
    assert len(fit.runner.history) == fit.runner.last.step + 1
    assert fit.runner.history[-1][1] < fit.runner.history[0][1] / 100
    assert fit.controls.loss_plot.getPlotItem().ctrl.logYCheck.isChecked()
    assert "max |w − t|" in fit.controls.status_label.text()
    # One undo step, back to the exact start, and redo to the fit.
    assert doc.undo_stack.count() == 1 and doc.undo_stack.text(0).startswith("Fit head 0")
    fitted = doc.session
    doc.undo_stack.undo()
    # Undo rebuilds the session from what the step recorded: the same values, a new object.
    assert doc.session == start and doc.session.extra == start.extra
    doc.undo_stack.redo()
    assert doc.session == fitted
    isolated.joinpath("shots").mkdir(exist_ok=True)
    assert window.grab().save(str(isolated / "shots" / "fit.png"))


def _slow_fit(fit, steps=100000):
    """A fit that cannot finish soon: SGD with a small step toward the first token."""
    fit.editor.target_combo.setCurrentIndex(fit.editor.target_combo.findData("first-token"))
    fit.controls.optimizer_combo.setCurrentIndex(fit.controls.optimizer_combo.findData("sgd"))
    fit.controls.lr_spin.setValue(0.0001)
    fit.controls.steps_spin.setValue(steps)


def _wait_for_steps(qtbot, fit, count):
    qtbot.waitUntil(lambda: fit.runner.last is not None and fit.runner.last.step >= count, timeout=60000)


def test_pause_resume_and_stop_keep_the_weights_reached(make_window, qtbot):
    window = make_window()
    doc, fit = window.document, window.fit
    start = doc.session
    _slow_fit(fit)
    assert fit.controls.start()
    assert not fit.controls.start_button.isEnabled() and fit.controls.stop_button.isEnabled()
    assert not fit.controls.lr_spin.isEnabled()  # settings are fixed while it runs
    _wait_for_steps(qtbot, fit, 5)
    with qtbot.waitSignal(fit.runner.parked, timeout=30000):  # the step in flight has landed
        fit.controls.pause_button.click()
        assert fit.runner.state == "paused" and fit.controls.pause_button.text() == "Resume"
    paused_at = fit.runner.last.step
    assert fit.runner.history[-1][0] == paused_at  # the worker stopped after the step shown last
    fit.controls.pause_button.click()
    assert fit.runner.state == "running"
    _wait_for_steps(qtbot, fit, paused_at + 5)
    steps = [point[0] for point in fit.runner.history]
    assert steps == list(range(steps[0], steps[0] + len(steps)))  # none lost across the pause
    fit.controls.stop_button.click()
    assert fit.runner.wait(30)
    assert fit.runner.state == "idle" and fit.controls.start_button.isEnabled()
    assert "stopped at step" in fit.report
    reached = fit.runner.fitter.session()
    np.testing.assert_array_equal(doc.session.w_query, reached.w_query)
    assert not np.array_equal(doc.session.w_query, start.w_query)
    assert doc.undo_stack.count() == 1
    doc.undo_stack.undo()
    assert doc.session == start  # the same values (undo rebuilds the session from its record)


def test_an_edit_during_a_fit_stops_it_and_keeps_both_undo_steps(make_window, qtbot):
    window = make_window()
    doc, fit = window.document, window.fit
    start = doc.session
    _slow_fit(fit)
    assert fit.controls.start()
    _wait_for_steps(qtbot, fit, 3)
    qtbot.waitUntil(lambda: doc.session is not start, timeout=10000)  # a frame was shown
    x = doc.session.embeddings.copy()
    x[0, 0] = 5.0
    doc.edit(doc.session.replace(embeddings=x), "Edit X")
    assert fit.runner.wait(30)
    assert "changed while it ran" in fit.report
    assert doc.session.embeddings[0, 0] == 5.0  # the edit stays; the fit did not overwrite it
    assert doc.undo_stack.count() == 2
    doc.undo_stack.undo()
    doc.undo_stack.undo()
    assert doc.session == start  # the same values (undo rebuilds the session from its record)


def _press_move_release(canvas, points):
    """A real left-button drag through ``points`` (viewport coordinates)."""
    viewport = canvas.viewport()
    first = points[0]

    def send(kind, pos, button, buttons):
        p = QPointF(pos)
        event = QMouseEvent(kind, p, viewport.mapToGlobal(p), button, buttons, Qt.KeyboardModifier.NoModifier)
        QApplication.sendEvent(viewport, event)

    send(QEvent.Type.MouseButtonPress, first, Qt.MouseButton.LeftButton, Qt.MouseButton.LeftButton)
    for p in points[1:]:
        send(QEvent.Type.MouseMove, p, Qt.MouseButton.NoButton, Qt.MouseButton.LeftButton)
    send(QEvent.Type.MouseButtonRelease, points[-1], Qt.MouseButton.LeftButton, Qt.MouseButton.NoButton)


def _cell_centre(fit, row, col):
    scene = fit.editor.view.vb.mapViewToScene(QPointF(col + 0.5, row + 0.5))
    return fit.editor.canvas.mapFromScene(scene)


def test_drawing_a_target_by_dragging_then_fitting_it(make_window, qtbot):
    window = make_window(n=6, d=6, d_k=3)
    doc, fit = window.document, window.fit
    QApplication.processEvents()
    # A stroke along row 5 over keys 1..3 (moves may skip a cell; the line between them counts):
    # that row becomes uniform over them.
    _press_move_release(fit.editor.canvas, [_cell_centre(fit, 5, c) for c in (1, 1.5, 3)])
    assert fit.editor.target_kind == "custom"
    target = fit.editor.shown_target.matrix
    np.testing.assert_allclose(target[5], [0, 1 / 3, 1 / 3, 1 / 3, 0, 0])
    np.testing.assert_allclose(target[:5], previous_token(6)[:5])  # the rest is the target drawn from
    np.testing.assert_allclose(target.sum(axis=1), 1.0)
    # A masked cell cannot be drawn on.
    assert not fit.editor.paint_cell(1, 4, new_stroke=True)
    assert "masked" in fit.report
    np.testing.assert_array_equal(fit.editor.shown_target.matrix, target)
    fit.controls.steps_spin.setValue(2000)
    assert fit.controls.start()
    assert fit.runner.wait(120)
    assert fit.runner.last.status == "converged", fit.report
    assert np.abs(doc.result.weights[0] - target).max() < 0.01


def test_refusals_are_one_line_and_start_nothing(make_window, tmp_path):
    window = make_window(heads=2)
    doc, fit = window.document, window.fit
    fit.editor.target_combo.setCurrentIndex(fit.editor.target_combo.findData("head"))
    fit.editor.param_spin.setValue(0)  # the selected head itself
    assert "is the head being fitted" in fit.report and fit.editor.shown_target is None
    assert not fit.controls.start()
    assert doc.undo_stack.count() == 0 and not fit.runner.running
    fit.editor.param_spin.setValue(1)
    assert fit.editor.shown_target is not None and fit.report == ""
    fit.controls.train_q.setChecked(False)
    fit.controls.train_k.setChecked(False)
    assert not fit.controls.start() and fit.report == "nothing to train: choose q, k and/or biases"
    np.save(tmp_path / "small.npy", np.eye(3))
    assert not fit.editor.import_file(tmp_path / "small.npy")
    assert "must be 8×8" in fit.report
    np.save(tmp_path / "t.npy", np.tril(np.ones((8, 8))))
    assert fit.editor.import_file(tmp_path / "t.npy")
    assert fit.editor.target_kind == "custom"
    np.testing.assert_allclose(fit.editor.shown_target.matrix[3], [0.25] * 4 + [0] * 4)
    assert doc.undo_stack.count() == 0


def test_one_target_per_head(make_window):
    window = make_window(heads=2, seed=4)
    doc, fit = window.document, window.fit
    fit.editor.target_combo.setCurrentIndex(fit.editor.target_combo.findData("self"))
    fit.editor.scope_combo.setCurrentIndex(fit.editor.scope_combo.findData("all"))
    assert fit.controls.start()
    assert fit.runner.wait(120)
    assert fit.runner.last.status == "converged", fit.report
    assert np.abs(doc.result.weights - np.eye(8)).max() < 0.01
    assert doc.undo_stack.count() == 1 and doc.undo_stack.text(0).startswith("Fit heads 0, 1")


def test_the_target_follows_the_session_only_while_the_dock_is_on_screen(make_window, qtbot):
    window = make_window()
    doc, fit = window.document, window.fit
    before = fit.editor.shown_target
    fit.hide()  # as when its tab is behind Controls
    doc.edit(doc.session.replace(mask=Mask("none")), "No mask")
    QApplication.processEvents()
    assert fit.editor.shown_target is before  # an edit costs the hidden dock nothing
    fit.show()
    assert fit.editor.shown_target is not before
    np.testing.assert_array_equal(fit.editor.view.hatch.isVisible(), False)  # no mask: nothing hatched


def test_rope_with_biases_trained_adds_them_in_the_fit_s_one_undo_step(make_window):
    start = build_preset("random", parse_assignments(["n=6", "d=6", "d_k=4", "heads=1"])).session.replace(
        mask=Mask("causal"), positions=Positions("rope", theta=100.0))
    window = make_window(session=start)
    doc, fit = window.document, window.fit
    assert fit.controls.train_b.isEnabled()
    fit.controls.train_b.setChecked(True)
    assert fit.controls.train() == ("q", "k", "biases")
    assert fit.controls.start()
    assert fit.runner.wait(120)
    assert fit.runner.last.status == "converged", fit.report
    assert np.abs(doc.result.weights[0] - previous_token(6)).max() < 0.01
    fitted = doc.session
    assert fitted.b_query.shape == (1, 4) and fitted.b_key.shape == (1, 4) and fitted.positions == start.positions
    assert doc.undo_stack.count() == 1
    doc.undo_stack.undo()
    assert doc.session == start and doc.session.b_query is None and doc.session.b_key is None
    doc.undo_stack.redo()
    assert doc.session == fitted


def test_cross_attention_target_is_queries_by_source_tokens(make_window):
    window = make_window(session=build_preset("translate", {}).session)
    doc, fit = window.document, window.fit
    assert "previous-token needs one sequence" in fit.report and fit.editor.shown_target is None
    assert not fit.controls.start() and doc.undo_stack.count() == 0
    fit.editor.target_combo.setCurrentIndex(fit.editor.target_combo.findData("custom"))
    assert fit.editor.shown_target.matrix.shape == (3, 3)
    assert fit.editor.view.data.shape == (3, 3)
    assert fit.editor.paint_cell(2, 2, new_stroke=True)  # "noir" to "cat"
    np.testing.assert_array_equal(fit.editor.shown_target.matrix[2], [0, 0, 1])
    assert fit.controls.start()
    assert fit.runner.wait(120)
    assert fit.runner.last.status == "converged", fit.report
    assert np.abs(doc.result.weights[0] - fit.editor.shown_target.matrix).max() < 0.01


def test_grouped_query_fit_says_which_other_heads_change(make_window):
    s = build_preset("random", parse_assignments(["n=6", "d=6", "d_k=3", "heads=2"])).session
    s = s.replace(w_key=s.w_key[:1], w_value=s.w_value[:1], mask=Mask("causal"))  # one K/V head for both
    window = make_window(session=s)
    doc, fit = window.document, window.fit
    assert fit.controls.start()
    assert "share K/V head 0" in fit.report and "head 1 change too" in fit.report
    assert fit.runner.wait(120)
    assert "share K/V head 0" in fit.report  # still said when the fit ends
    np.testing.assert_array_equal(doc.session.w_query[1], s.w_query[1])
    assert not np.array_equal(doc.session.w_key, s.w_key)


def test_a_long_input_is_refused_by_the_fit_dock_without_building_a_target(make_window, monkeypatch):
    from attnexplorer.core.compute.long import result as long_result

    monkeypatch.setattr(long_result, "DENSE_BUDGET", 1000)  # every session is a long input
    window = make_window(n=12)
    doc, fit = window.document, window.fit
    assert fit.editor.shown_target is None and "12 tokens × 1 heads is a long input" in fit.report
    assert not fit.controls.start() and not fit.runner.running and doc.undo_stack.count() == 0


def test_what_a_fit_shows_is_computed_on_the_worker_thread(make_window, qtbot):
    # A fit keeps a core busy, so even a small session's result is computed off the GUI
    # thread while it is shown live (an ordinary edit of it is computed inline).
    window = make_window()
    doc = window.document
    live = doc.live_edit("Fit")
    shown = doc.session.replace(w_query=doc.session.w_query * 2.0)
    assert live.show(shown)
    assert doc.session is shown and doc.compute.computing
    assert doc.result.session is not shown  # not computed on the spot
    qtbot.waitUntil(lambda: doc.result.session is shown, timeout=10000)
    edited = shown.replace(w_key=shown.w_key * 2.0)
    doc.edit(edited, "Edit W_k")
    assert not doc.compute.computing and doc.result.session is edited


def test_start_hands_the_fit_the_weights_already_shown_instead_of_computing_them_again(make_window, monkeypatch):
    # Start used to compute the whole attention twice on the GUI thread to check the fit's
    # inputs (80 ms at n = 512); it now passes the weights on screen, checked on the fit thread.
    window = make_window()
    doc, fit = window.document, window.fit
    assert doc.compute.wait_idle(30) and doc.result.session is doc.session
    handed = []
    import attnexplorer.ui.fit.dock as fit_dock

    real = fit_dock.Fitter
    monkeypatch.setattr(fit_dock, "Fitter", lambda *a, **k: handed.append(k.get("shown_weights")) or real(*a, **k))
    on_screen = doc.result.weights
    assert fit.controls.start()
    assert len(handed) == 1 and handed[0] is on_screen
    assert fit.runner.wait(120) and fit.runner.last.status == "converged"
    # While a compute is pending (an edit not yet computed), the fit computes them itself.
    import attnexplorer.app.compute as compute_module

    monkeypatch.setattr(compute_module, "INLINE_CELLS", 0)  # every compute on the worker thread
    doc.edit(doc.session.replace(mask=Mask("none")), "No mask")
    assert doc.result.session is not doc.session
    assert fit.controls.start()
    assert len(handed) == 2 and handed[1] is None
    fit.runner.stop()
    assert fit.runner.wait(120)


def test_a_weight_edit_keeps_a_built_in_target_but_head_h_and_a_token_edit_redraw_it(make_window):
    from attnexplorer.core.fit.targets import target_for
    from attnexplorer.ui import user_actions

    window = make_window(heads=2, seed=5)
    doc, fit = window.document, window.fit
    QApplication.processEvents()
    kept = fit.editor.shown_target
    assert user_actions.set_cell(doc, "W_q", 0, 0, "3")
    QApplication.processEvents()
    assert fit.editor.shown_target is kept  # previous-token reads tokens and mask, not weights: not redrawn
    np.testing.assert_array_equal(kept.matrix, target_for(doc.session, fit.editor.target_spec()).matrix)
    assert user_actions.rename_token(doc, 1, "dog")
    QApplication.processEvents()
    assert fit.editor.shown_target is not kept  # the tokens changed: drawn again
    fit.editor.target_combo.setCurrentIndex(fit.editor.target_combo.findData("head"))
    fit.editor.param_spin.setValue(1)
    QApplication.processEvents()
    before = fit.editor.shown_target
    assert user_actions.set_cell(doc, "W_q", 0, 0, "-3", head=1)
    QApplication.processEvents()
    # head:1's weights changed with its W_q: the target shown is head 1's new weights.
    assert fit.editor.shown_target is not before
    np.testing.assert_allclose(fit.editor.shown_target.matrix, target_for(doc.session, "head:1").matrix)


def test_the_loss_plot_moves_its_ranges_in_steps_not_every_frame(make_window, qtbot):
    # Auto-range moved both axes on every frame of a fit, and each move re-labelled and
    # repainted them: the steps axis now grows to the next nice number, the loss axis by decades.
    window = make_window()
    fit = window.fit
    moves, frames = [], []
    fit.controls.loss_plot.getPlotItem().vb.sigRangeChanged.connect(lambda *_: moves.append(1))
    fit.runner.progressed.connect(lambda p: frames.append(p.step))
    fit.controls.lr_spin.setValue(fit.controls.lr_spin.minimum())  # slow: many frames before it converges
    # Progress reaches the window a few times a second at most: 400 steps on a quiet machine
    # were done in two frames (under Xvfb in CI), too few to tell steps from every frame
    fit.controls.steps_spin.setValue(fit.controls.steps_spin.maximum())
    assert fit.controls.start()
    qtbot.waitUntil(lambda: len(frames) >= 8, timeout=60000)
    fit.runner.stop()
    assert fit.runner.wait(120)
    assert len(frames) >= 8, frames
    assert len(moves) <= 2 + len(frames) // 3, (len(moves), len(frames))
    x_range, y_range = fit.controls.loss_plot.getPlotItem().vb.viewRange()
    losses = np.array([h[1] for h in fit.runner.history])
    assert x_range[0] <= 0 and x_range[1] >= fit.runner.history[-1][0]  # the whole curve in view
    assert y_range[0] <= np.log10(losses.min()) and y_range[1] >= np.log10(losses.max())


def test_a_fit_shows_a_new_snapshot_only_once_the_last_one_is_drawn(make_window, monkeypatch):
    # What keeps the window responsive at n = 512: the worker's snapshots are coalesced to the
    # frames the window draws. A snapshot is shown only while the compute is idle (never queued
    # behind one it is still computing), so the GUI handles at most one result per snapshot.
    from attnexplorer.app.document import LiveEdit

    window = make_window()
    doc, fit = window.document, window.fit
    shows, busy = [], []
    real = LiveEdit.show

    def show(self, session):
        shows.append(session)
        busy.append(doc.compute.computing)
        return real(self, session)

    monkeypatch.setattr(LiveEdit, "show", show)
    results = []
    doc.result_changed.connect(results.append)
    _slow_fit(fit, steps=400)
    assert fit.controls.start()
    assert fit.runner.wait(120)
    assert fit.runner.last.step == 400
    assert shows and not any(busy)
    assert len(results) <= len(shows) + 1          # one result drawn per snapshot shown
    assert doc.result.session is doc.session
