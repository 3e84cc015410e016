"""Lesson mode in the main window, driven as a teacher drives it: the steps by keys and
buttons, predict then reveal, an edit carried to later steps, presenter mode, Save as lesson."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication
from ui_helpers import settle_lesson as settle, teach

from attnexplorer.core.compute.engine import compute
from attnexplorer.core.lessons.quotes import HIDDEN_MARK
from attnexplorer.io.lesson_file import builtin_lesson, load_lesson
from attnexplorer.ui import user_actions
from attnexplorer.ui.panels import theme


@pytest.fixture
def win(lesson_window):
    return lesson_window   # tests/ui/conftest.py


def test_the_arrow_and_page_keys_and_the_buttons_step(win, qtbot):
    lesson = teach(win)
    bar = lesson.bar
    assert bar.counter.text() == "Step 1 of 10: The dog fetched the ball and she was happy"
    assert win.document.session.tokens[6] == "she"
    qtbot.keyClick(win, Qt.Key.Key_Right)
    assert lesson.run.index == 1
    qtbot.keyClick(win, Qt.Key.Key_PageDown)   # what a presentation clicker sends
    assert lesson.run.index == 2
    qtbot.keyClick(win, Qt.Key.Key_PageUp)
    qtbot.keyClick(win, Qt.Key.Key_Left)
    assert lesson.run.index == 0 and not bar.back_button.isEnabled()
    qtbot.mouseClick(bar.next_button, Qt.MouseButton.LeftButton)
    qtbot.mouseClick(bar.next_button, Qt.MouseButton.LeftButton)
    qtbot.mouseClick(bar.next_button, Qt.MouseButton.LeftButton)
    settle(win)
    assert bar.counter.text() == "Step 4 of 10: score(she, dog) = q(she)·k(dog)"
    assert bar.formula.text() == "scores = Q·Kᵀ"
    # The step's panel large, the rest hidden; Explain waits: it would tell the hidden row.
    assert win.on_screen == {"scores"}
    assert win.document.selection.current.query == 6 and win.document.selection.current.key == 1
    lesson.go(99)
    assert lesson.run.index == 9 and not bar.next_button.isEnabled()


def test_left_and_right_in_a_table_move_the_cell_not_the_lesson(win, qtbot):
    lesson = teach(win, step=2)
    table = win.inputs.findChildren(__import__("PySide6.QtWidgets", fromlist=["QTableView"]).QTableView)[0]
    table.setFocus()
    QApplication.processEvents()
    assert QApplication.focusWidget() is table
    qtbot.keyClick(table, Qt.Key.Key_Right)
    assert lesson.run.index == 2
    qtbot.keyClick(table, Qt.Key.Key_PageDown)   # a clicker still steps
    assert lesson.run.index == 3


def test_predict_a_key_then_reveal(win, qtbot):
    lesson = teach(win, step=3)
    bar = lesson.bar
    covers = lesson.covers("scores")
    assert covers.count() == 1
    n = win.document.session.n
    assert covers.rects()[0].getRect() == (0, 6, n, 1)   # she's whole row of scores
    assert HIDDEN_MARK in bar.text.text() and "13.83" not in bar.text.text()
    scores = next(p for p in win.panels if p.kind == "scores")
    assert scores.view.describe_cell(6, 1) == "hidden until Reveal"   # the hover does not tell it
    assert scores.view.describe_cell(0, 1).endswith("= -5.5699")   # an uncovered cell still reads
    assert set(bar.key_buttons) == set(win.document.session.tokens)
    qtbot.mouseClick(bar.key_buttons["ball"], Qt.MouseButton.LeftButton)
    assert bar.key_buttons["ball"].isChecked()
    qtbot.mouseClick(bar.reveal_button, Qt.MouseButton.LeftButton)
    settle(win)
    assert bar.verdict.text() == "Your guess: ball · answer: dog (13.83) ✗"
    assert covers.count() == 0
    assert "= 13.83" in bar.text.text() and "13.83" in scores.view.describe_cell(6, 1)
    assert "explain" in win.on_screen   # revealed: Explain may tell it now
    # Back and forth keeps the guess and the reveal.
    lesson.next()
    lesson.back()
    assert bar.verdict.text().startswith("Your guess: ball") and covers.count() == 0


def test_type_a_number_then_reveal(win, qtbot):
    lesson = teach(win, step=6)
    bar = lesson.bar
    assert lesson.covers("weights").rects()[0].getRect() == (1, 6, 1, 1)   # weights(she, dog)
    assert bar.number_edit.isVisible()
    qtbot.keyClicks(bar.number_edit, "0.9")
    qtbot.keyClick(bar.number_edit, Qt.Key.Key_Return)
    qtbot.mouseClick(bar.reveal_button, Qt.MouseButton.LeftButton)
    assert bar.verdict.text() == "Your guess: 0.900 · answer: 0.883 ✓ right"
    # A guess that is not a number is refused and the status bar says why; the last guess stays.
    messages = []
    win.status.show_message = lambda text, *args: messages.append(text)
    bar.number_edit.setText("lots")
    qtbot.keyClick(bar.number_edit, Qt.Key.Key_Return)
    assert messages and "'lots'" in messages[0]
    assert lesson.run.guesses[6] == 0.9


def test_an_edit_carries_to_every_later_step(win):
    lesson = teach(win, step=1)
    assert user_actions.set_cell(win.document, "W_k", 0, 0, "0")
    settle(win)
    lesson.go(5)   # ÷√d_k
    settle(win)
    scaled = compute(win.document.session).scaled_scores[0, 6, 1]
    assert f"= {scaled:.2f}" in lesson.bar.text.text()
    assert "7.99" not in lesson.bar.text.text()
    # The tables stay editable on every step: the Inputs are on screen.
    assert win.docks["inputs"].isVisible()


def test_presenter_mode_is_readable_from_the_back(win, qtbot):
    lesson = teach(win, step=6)
    qtbot.keyClick(win, Qt.Key.Key_F5)
    assert lesson.presenter.active and lesson.presenter.notes_window is None   # one screen: no notes
    qtbot.keyClick(win, Qt.Key.Key_Escape)
    assert not lesson.presenter.active
    lesson.presenter.enter(screens=[])
    win.showNormal()
    win.resize(1920, 1080)   # a projector's size (the offscreen screen is smaller)
    settle(win)
    assert lesson.presenter.active
    assert not win.menuBar().isVisible() and not win.statusBar().isVisible()
    assert not win.docks["inputs"].isVisible()   # the editing chrome is hidden
    weights = next(p for p in win.panels if p.kind == "weights")
    view = weights.canvas if hasattr(weights, "canvas") else None
    zoom = view.transform().m11()
    assert zoom == pytest.approx(2.25, rel=0.01)   # Qt's fitInView keeps a 2-px margin
    # Every label, tick and number is at least 24 px on screen.
    assert theme.tick_font().pixelSize() * zoom >= 24
    assert weights.view.numbers.cells and weights.view.numbers.font_px * weights.view.numbers.zoom >= 24
    for label in (lesson.bar.counter, lesson.bar.text, lesson.bar.prompt, lesson.bar.formula):
        assert label.font().pixelSize() >= 24
    lesson.presenter.leave()
    settle(win)
    assert win.menuBar().isVisible() and win.docks["inputs"].isVisible()
    assert view.transform().m11() == pytest.approx(1.0)
    assert weights.view.numbers.zoom == 1.0 and weights.view.numbers.font_px <= 12


def test_presenter_mode_enlarges_a_legend_with_its_plot(win):
    # The sine lesson's last step shows the signal plot, whose legend is a row of its own:
    # pyqtgraph's legends ignore their view's zoom, and this one stayed at 8 pt beside 25-px ticks.
    lesson = teach(win, "sine", step=5)
    signal = next(p for p in win.panels if p.kind == "signal")
    assert signal.isVisible()
    label = signal.legend.items[0][1]
    assert label.text == "clean"

    def drawn_scale():
        return label.deviceTransform(signal.canvas.viewportTransform()).m22()

    assert drawn_scale() == pytest.approx(1.0, rel=0.02)
    lesson.presenter.enter(screens=[])
    win.showNormal()
    win.resize(1920, 1080)
    settle(win)
    assert drawn_scale() == pytest.approx(2.25, rel=0.02)
    lesson.presenter.leave()
    settle(win)
    assert drawn_scale() == pytest.approx(1.0, rel=0.02)


def test_the_notes_follow_the_steps(win):
    lesson = teach(win, step=3)
    notes = lesson.presenter.show_notes(win.screen())
    assert notes.step.text().startswith("Step 4 of 10")
    assert notes.answer.text() == "Answer: dog (13.83)"   # the teacher sees it, the class does not
    assert notes.next_step.text().startswith("Next: every key")
    lesson.next()
    assert notes.step.text().startswith("Step 5 of 10") and notes.answer.text() == ""
    # Shown without presenter mode, the notes still go with the lesson (they stayed open on
    # their own and took a later window's mouse moves)
    lesson.end()
    assert not notes.isVisible()


def test_a_colour_blind_safe_palette(win):
    teach(win, step=6)
    weights = next(p for p in win.panels if p.kind == "weights")
    win.palette_action.setChecked(True)
    import pyqtgraph as pg

    cividis = pg.colormap.get("cividis").getLookupTable(nPts=256, alpha=False)
    assert np.array_equal(weights.view.lut, cividis)
    scores = next(p for p in win.panels if p.kind == "scores")
    assert np.array_equal(scores.view.lut, pg.colormap.get("CET-CBD1").getLookupTable(nPts=256, alpha=False))
    win.palette_action.setChecked(False)
    assert np.array_equal(weights.view.lut, theme.SEQUENTIAL_LUT)


def test_the_sine_lesson_ends_on_a_tau_slider(win):
    lesson = teach(win, "sine", step=5)
    slider = lesson.bar.slider
    assert slider is not None and lesson.bar.slider_label.text() == "temperature τ"
    assert "signal" in win.on_screen
    slider.spin.setValue(0.02)
    settle(win)
    assert win.document.session.preset.params["tau"] == pytest.approx(0.02)
    output = compute(win.document.session).output[10, 0]
    assert f"output(x10) = {output:.3f}" in lesson.bar.text.text()
    lesson.back()
    assert lesson.bar.slider is None


def test_end_gives_the_layout_back(win):
    before = set(win.on_screen)
    teach(win, step=3)
    assert win.on_screen != before
    win.lesson.end()
    settle(win)
    assert set(win.on_screen) == before
    assert not win.lesson.dock.isVisible()


def test_save_as_lesson_keeps_the_teachers_panels_and_edits(win, tmp_path, qtbot):
    lesson = teach(win, step=0)
    win.docks["weights"].show()   # the teacher adds the weights to step 1
    user_actions.set_cell(win.document, "embeddings", 0, 0, "0.5")
    settle(win)
    lesson.next()
    path = tmp_path / "my-lesson.json"
    win.ask_lesson_path = lambda: str(path)
    win.save_lesson_action.trigger()
    saved = load_lesson(path)
    assert "weights" in saved.steps[0].panels and "embedding_scatter" in saved.steps[0].panels
    assert saved.steps[1].panels == builtin_lesson("pronoun").steps[1].panels
    assert saved.session.embeddings[0, 0] == 0.5
    # Opened like a session, it starts teaching.
    win.lesson.end()
    assert win.actions.open_path(path)
    assert win.lesson_started() and win.lesson.run.lesson.steps[0].panels == saved.steps[0].panels


def test_a_bad_lesson_file_opens_nothing_and_says_where(win, tmp_path):
    path = tmp_path / "bad.json"
    lesson = builtin_lesson("pronoun")
    from attnexplorer.io.lesson_file import dumps_lesson

    path.write_text(dumps_lesson(lesson).replace('"of": "scores[she]"', '"of": "scores[shee]"'), encoding="utf-8")
    session = win.document.session
    assert not win.actions.open_path(path)
    assert win.errors and "steps[3].ask.of {scores[shee]}: there is no token 'shee'" in win.errors[0]
    assert win.document.session is session and not win.lesson_started()


def test_a_lesson_from_this_session_and_its_handout(win, tmp_path):
    assert win.lesson_from_session_action.trigger() is None and win.lesson_started()
    assert [s.stage for s in win.lesson.run.lesson.steps] == ["tokens", "projections", "scores", "scale",
                                                              "softmax", "output"]
    win.ask_handout = lambda: ("md", str(tmp_path / "handout"))
    win.export_handout_action.trigger()
    text = (tmp_path / "handout" / "handout.md").read_text(encoding="utf-8")
    assert text.count("\n## Step ") == 6
    assert not win.errors


def test_the_command_line_opens_a_lesson(qtbot, tmp_path, monkeypatch, capsys):
    from attnexplorer.cli import build_parser
    from attnexplorer.io.lesson_file import dumps_lesson, save_lesson
    from attnexplorer.ui.app import open_window

    monkeypatch.setenv("ATTNEXPLORER_DATA_DIR", str(tmp_path / "data"))
    path = tmp_path / "my-lesson.json"
    save_lesson(builtin_lesson("rope"), path)
    for argv, name in ((["--lesson", "sine"], "sine"), ([str(path)], "my-lesson")):
        _app, window = open_window(build_parser().parse_args(argv))
        qtbot.addWidget(window)
        assert window.lesson_started() and window.lesson.run.lesson.name == name
        assert window.lesson.bar.counter.text().startswith("Step 1 of 6")
        window.lesson.end()
        window.actions.autosaver.discard()
        window.close()
        window.document.shutdown()
    # On a desktop (xcb under Xvfb in CI) a refusal is also a modal dialog: dismiss it instead
    # of waiting for a click that never comes.
    from PySide6.QtWidgets import QMessageBox

    monkeypatch.setattr(QMessageBox, "critical", staticmethod(lambda *a: None))
    bad = tmp_path / "bad.json"
    bad.write_text(dumps_lesson(builtin_lesson("rope")).replace('"slider": "offset"', '"slider": "theta"'),
                   encoding="utf-8")
    assert open_window(build_parser().parse_args([str(bad)])) is None
    err = capsys.readouterr().err
    assert "bad.json: steps[4].slider is 'theta', expected a parameter of the session's preset" in err
    assert open_window(build_parser().parse_args(["--lesson", "sine", "--preset", "rope"])) is None


def test_save_as_lesson_refuses_a_session_the_steps_no_longer_fit(win, tmp_path):
    teach(win)
    assert user_actions.rename_token(win.document, 6, "her")
    asked = []
    win.ask_lesson_path = lambda: asked.append(1) or str(tmp_path / "x.json")
    win.save_lesson_action.trigger()
    assert not asked and not (tmp_path / "x.json").exists()
    assert "no longer fits the lesson" in win.errors[0] and "there is no token 'she'" in win.errors[0]
    # The bar says ? where a quote lost its token, and the lesson goes on.
    win.lesson.go(3)
    settle(win)
    assert "= ?" in win.lesson.bar.text.text()
