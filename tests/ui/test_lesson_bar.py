"""The lesson bar's layout on the real widgets: the question's prompt on its own row across the
bar, the answers (key buttons, number field, Reveal) in rows that wrap, and the bar exactly as
tall as its rows need (``heightForWidth``) in every step of every shipped lesson."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QPoint, QRect
from PySide6.QtWidgets import QAbstractSpinBox, QApplication, QComboBox, QPushButton, QWidget
from ui_helpers import settle_lesson as settle, teach

from attnexplorer.io.lesson_file import builtin_lesson, builtin_lessons
from attnexplorer.ui.lesson.bar import LessonBar
from attnexplorer.ui.lesson.flow import FlowLayout


@pytest.fixture
def win(lesson_window):
    return lesson_window   # tests/ui/conftest.py


def box(widget, bar) -> QRect:
    return QRect(widget.mapTo(bar, QPoint(0, 0)), widget.size())


def outside(bar) -> list[str]:
    """Every shown widget of ``bar`` that does not lie wholly inside it."""
    return [f"{type(w).__name__} {getattr(w, 'text', lambda: '')()!r} at {box(w, bar).getRect()}"
            for w in bar.findChildren(QWidget) if w.isVisibleTo(bar) and not bar.rect().contains(box(w, bar))]


def answers(bar) -> list[QWidget]:
    return [*bar.key_buttons.values(), bar.number_edit, bar.reveal_button]


def one_line(label) -> bool:
    return label.height() < 2 * label.fontMetrics().lineSpacing()


def test_the_prompt_has_its_own_row_and_the_keys_one_below_it_at_1280(win):
    bar = teach(win, "pronoun", 3).bar   # "which key will her query score highest?", nine keys
    assert win.width() == 1280
    assert bar.height() == bar.heightForWidth(bar.width())
    prompt = box(bar.prompt, bar)
    assert prompt.width() >= 0.95 * bar.width() and one_line(bar.prompt)   # it was a 396-px column of two lines
    shown = [w for w in answers(bar) if w.isVisible()]
    assert len(shown) == 10 and bar.number_edit not in shown
    assert {box(w, bar).top() for w in shown} == {box(bar.reveal_button, bar).top()}   # one row
    assert all(box(w, bar).top() >= prompt.bottom() for w in shown)   # below the prompt
    assert all(w.width() >= w.sizeHint().width() for w in shown)   # none narrowed
    assert outside(bar) == []
    # Clicking and revealing still work from the new row.
    bar.key_buttons["dog"].click()
    assert bar.key_buttons["dog"].isChecked() and win.lesson.run.guesses[3] == "dog"
    bar.reveal_button.click()
    settle(win)
    assert bar.verdict.isVisible() and bar.verdict.text().endswith("✓ right")
    assert bar.height() == bar.heightForWidth(bar.width()) and outside(bar) == []


def test_a_narrower_window_wraps_the_answers_onto_more_rows(win):
    bar = teach(win, "pronoun", 3).bar
    tall = bar.height()
    assert bar.answer_rows() == 1
    win.resize(600, 800)   # a window the bar once held at 1280 px (its width was fixed)
    settle(win)
    assert win.width() == 600 and bar.width() < 600
    assert bar.answer_rows() >= 2 and bar.height() > tall
    assert bar.height() == bar.heightForWidth(bar.width())
    assert outside(bar) == []
    assert all(w.width() >= w.sizeHint().width() for w in answers(bar) if w.isVisible())
    win.resize(1280, 800)
    settle(win)
    assert bar.answer_rows() == 1 and bar.height() == tall


def test_sixty_keys_take_a_few_rows_of_readable_buttons(win):
    bar = teach(win, "sine", 2).bar   # a key question over the sine preset's 60 samples
    assert len(bar.key_buttons) == 60
    assert bar.answer_rows() <= 4   # buttons as wide as their token: 3 rows at 1280
    for button in bar.key_buttons.values():
        assert button.width() >= button.fontMetrics().horizontalAdvance(button.text())
    assert bar.height() == bar.heightForWidth(bar.width()) and outside(bar) == []


def test_a_token_written_twice_is_one_key_button(win):
    bar = teach(win, "rope", 2).bar   # "the cat sat on the mat"
    tokens = win.document.session.tokens
    assert tokens.count("the") == 2
    assert list(bar.key_buttons) == list(dict.fromkeys(tokens))
    buttons = [b for b in bar.findChildren(QPushButton) if b.isVisibleTo(bar) and b.text() == "the"]
    assert buttons == [bar.key_buttons["the"]]   # the first one was left behind, unreachable
    win.lesson.go(3)
    settle(win)
    assert not any(b.isVisibleTo(bar) and b.text() == "the" for b in bar.findChildren(QPushButton))


def test_presenter_mode_lays_the_bar_out_at_its_zoom(win):
    bar = teach(win, "translate", 3).bar   # a number question above a slider
    win.lesson.presenter.enter(screens=[])
    win.showNormal()
    win.resize(1920, 1080)
    settle(win)
    assert bar.prompt.font().pixelSize() >= 24 and one_line(bar.prompt)
    metrics = bar.number_edit.fontMetrics()
    assert bar.number_edit.width() > metrics.horizontalAdvance(bar.number_edit.placeholderText())
    assert bar.slider.spin.font().pixelSize() >= 24   # the step's slider made after the zoom
    assert bar.height() == bar.heightForWidth(bar.width()) and outside(bar) == []
    win.lesson.presenter.leave()
    settle(win)
    assert bar.prompt.font().pixelSize() < 24
    assert bar.height() == bar.heightForWidth(bar.width())


def test_presenter_mode_enlarges_the_panels_controls_too(win):
    teach(win, "rope", 4)   # the RoPE panel, with its pair list and offset box
    rope = next(p for p in win.panels if p.kind == "rope")
    controls = rope.findChildren(QComboBox) + rope.findChildren(QAbstractSpinBox)
    assert controls
    before = [c.font().pixelSize() if c.font().pixelSize() > 0 else c.fontInfo().pixelSize() for c in controls]
    win.lesson.presenter.enter(screens=[])
    settle(win)
    assert all(c.font().pixelSize() >= 24 for c in controls)   # they stayed at 13 px beside 30-px labels
    win.lesson.presenter.leave()
    settle(win)
    assert [c.fontInfo().pixelSize() for c in controls] == before


@pytest.mark.slow
@pytest.mark.parametrize("name", builtin_lessons())
def test_every_step_of_every_lesson_fits_the_bar(win, name):
    """Each step at 1280×800, and revealed where it asks: every shown widget inside the bar,
    the bar exactly as tall as its rows, no empty row taking room, the panels not squeezed."""
    assert win.lesson.start(builtin_lesson(name))
    lesson, bar = win.lesson, win.lesson.bar
    for i in range(lesson.run.count):
        lesson.go(i)
        settle(win)
        for state in ("asked", "revealed") if lesson.run.step.ask is not None else ("shown",):
            if state == "revealed":
                lesson.reveal()
                settle(win)
            where = f"{name} step {i + 1} {state}"
            assert bar.height() == bar.heightForWidth(bar.width()), where
            assert outside(bar) == [], where
            rows = [w for w in (bar.counter, bar.formula, bar.text, bar.prompt, bar.verdict, bar.slider_label)
                    if w.isVisible()]
            assert all(w.text() for w in rows), where   # a shown row says something
            if bar.prompt.isVisible():
                assert box(bar.prompt, bar).width() >= 0.95 * bar.width(), where
            assert bar.height() <= 0.3 * win.height(), where   # the panels keep most of the window
            assert all(panel.height() >= 400 for panel in win.panels if panel.isVisible()), where
    assert win.errors == []


def test_the_flow_layout_wraps_at_its_width_and_reports_that_height(qtbot):
    holder = QWidget()
    qtbot.addWidget(holder)
    flow = FlowLayout(holder, spacing=4)
    buttons = [QPushButton(f"key {i}") for i in range(12)]
    for button in buttons:
        flow.addWidget(button)
    holder.show()
    width = sum(b.sizeHint().width() for b in buttons[:5]) + 4 * 4 + 2   # room for five a row
    height = flow.heightForWidth(width)
    assert len(flow.rows(width)) == 3
    assert height == 3 * buttons[0].sizeHint().height() + 2 * 4
    flow.setGeometry(QRect(0, 0, width, height))
    assert [b.y() for b in buttons[:6]] == [0] * 5 + [buttons[0].sizeHint().height() + 4]
    assert all(QRect(0, 0, width, height).contains(b.geometry()) for b in buttons)
    buttons[0].hide()   # a hidden widget takes no room
    assert len(flow.rows(width)) == 3 and flow.rows(width)[0][0].widget() is buttons[1]
    assert flow.heightForWidth(10_000) == buttons[1].sizeHint().height()


def test_the_bar_alone_reports_its_height_for_any_width(qtbot):
    bar = LessonBar()
    qtbot.addWidget(bar)
    bar.show_step(counter="Step 4 of 10: score(she, dog)", formula="scores = Q·Kᵀ", text="a short text",
                  first=False, last=False)
    bar.show_question("key", "Which key will her query score highest?", keys=[f"token{i}" for i in range(20)])
    bar.show()
    heights = []
    for width in (1600, 1000, 600, 400):
        bar.setFixedSize(width, bar.fitted_height(width))
        QApplication.processEvents()
        assert outside(bar) == [], width
        assert bar.height() == bar.heightForWidth(width)
        heights.append((bar.answer_rows(), bar.height()))
    assert heights == sorted(heights)   # narrower: more rows, taller, never clipped
    assert heights[0][0] < heights[-1][0]
