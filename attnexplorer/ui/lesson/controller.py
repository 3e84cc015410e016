"""A lesson taught in the main window: the step's panels large, the rest hidden, the lesson
bar above them, the class's guesses and reveals, the arrow and Page keys.

``window.lesson`` is this controller. What callers and tests may rely on:

- ``start(lesson)`` opens the lesson's session (asking about unsaved work first) and shows its
  first step; ``end()`` goes back to the layout the window had before;
- ``next()``, ``back()``, ``go(i)`` step; Right / Page Down and Left / Page Up do the same
  (Left and Right only while no text field, table or slider has the keyboard: there they
  move the cursor); F5 (View ▸ Lesson ▸ Presenter mode) turns presenter mode on and off,
  Escape leaves it;
- ``run`` (core/lessons/runtime.LessonRun) holds the step, the guesses and the reveals;
- the tables stay editable on every step: an edit recomputes, and every step's quoted numbers,
  answers and covers are read from the newest result, so an edit carries to later steps;
- ``current_lesson()`` is the lesson as taught: with the panels the teacher showed on each
  step (File ▸ Save as lesson writes it with the session as edited).
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, Qt, QTimer, Signal
from PySide6.QtWidgets import (QAbstractItemView, QAbstractSlider, QAbstractSpinBox, QApplication, QLineEdit,
                               QPlainTextEdit, QTextEdit, QToolBar, QWidget)

from ...core.errors import AttnExplorerError
from ...core.lessons import Lesson, fill, quotes
from ...core.lessons.runtime import LessonRun
from .bar import LessonBar
from .covers import cover_panels
from .step_panels import StepPanels
from .step_slider import StepSlider

NEXT_KEYS = (Qt.Key.Key_Right, Qt.Key.Key_PageDown)
BACK_KEYS = (Qt.Key.Key_Left, Qt.Key.Key_PageUp)
# Where Left and Right move a cursor, a cell or a slider: they are not the lesson's there.
_EDITING = (QLineEdit, QAbstractSpinBox, QAbstractItemView, QAbstractSlider, QTextEdit, QPlainTextEdit)


class LessonController(QObject):
    """The lesson taught in ``window`` (see the module): which panels a step shows is
    ``step_panels.StepPanels``, its preset slider ``step_slider.StepSlider``."""

    step_shown = Signal(int)
    ended = Signal()

    def __init__(self, window):
        super().__init__(window)
        self.window = window
        self.document = window.document
        self.run: LessonRun | None = None
        self.bar = LessonBar()
        # A tool bar, not a dock: it is as tall as the bar's text and the panels get the rest.
        self.dock = QToolBar("Lesson", window)
        self.dock.setObjectName("toolbar-lesson")
        self.dock.setMovable(False)
        self.dock.setFloatable(False)
        self.dock.addWidget(self.bar)
        self.dock.hide()
        self._saved_state = None
        self._covers: dict = {}
        from .presenter import Presenter

        self.presenter = Presenter(window, self)
        self.step_panels = StepPanels(window, self.presenter)
        self.slider = StepSlider(self.document, self.bar)
        self.bar.back_clicked.connect(self.back)
        self.bar.next_clicked.connect(self.next)
        self.bar.exit_clicked.connect(self.end)
        self.bar.reveal_clicked.connect(self.reveal)
        self.bar.key_guessed.connect(self.guess_key)
        self.bar.number_guessed.connect(self.guess_number)

    @property
    def active(self) -> bool:
        return self.run is not None

    # -- starting and ending ---------------------------------------------------------------
    def start(self, lesson: Lesson) -> bool:
        """Teach ``lesson``: its session replaces the document's (after the unsaved-work
        question); True when it started."""
        # At start-up the window already holds the lesson's session (its first compute waits
        # for the first paint); otherwise it replaces the document's, after the question.
        if self.document.session is not lesson.session and not self.window.actions.adopt_session(lesson.session):
            return False
        if not self.active:
            self._saved_state = self.window.saveState()
            self.document.result_changed.connect(self.refresh)
            self.document.session_changed.connect(self._on_session_changed)
            QApplication.instance().installEventFilter(self)
        self.run = LessonRun(lesson)
        self.step_panels.reset()
        self.window.addToolBar(Qt.ToolBarArea.TopToolBarArea, self.dock)
        self.dock.show()
        self.show_step()
        self.window.status.show_message(f"Lesson: {lesson.title} — Right or Page Down for the next step")
        return True

    def end(self) -> None:
        """Leave the lesson: the window's layout as it was before, the session as edited."""
        if not self.active:
            return
        self.presenter.leave()
        QApplication.instance().removeEventFilter(self)
        self.document.result_changed.disconnect(self.refresh)
        self.document.session_changed.disconnect(self._on_session_changed)
        self.run = None
        self._show_covers(())
        self.slider.hide()
        self.dock.hide()
        self.window.removeToolBar(self.dock)
        if self._saved_state is not None:
            self.window.restoreState(self._saved_state)
        self.window.dock_layout.sync_applicable(self.document.session)
        self.ended.emit()

    # -- stepping --------------------------------------------------------------------------
    def go(self, index: int) -> bool:
        if not self.active:
            return False
        self.step_panels.remember(self.run)
        if not self.run.go(index):
            return False
        self.show_step()
        return True

    def next(self) -> bool:
        return self.go(self.run.index + 1) if self.active else False

    def back(self) -> bool:
        return self.go(self.run.index - 1) if self.active else False

    def panels_of(self, index: int) -> tuple[str, ...]:
        """The panels step ``index`` shows: the teacher's choice when they changed it."""
        return self.step_panels.panels_of(self.run, index)

    def show_step(self) -> None:
        step = self.run.step
        self._arrange()
        self._select(step)
        self.slider.show_for(step)
        guess = self.run.guesses.get(self.run.index)
        self.bar.set_typed_guess("" if guess is None or isinstance(guess, str) else f"{guess:g}")
        self.refresh()
        self.presenter.step_changed()
        self.step_shown.emit(self.run.index)

    def _arrange(self) -> None:
        """The step's panels side by side, large (``StepPanels.arrange``), and the bar fitted."""
        self.step_panels.arrange(self.run)
        self.fit_bar()

    def fit_bar(self) -> None:
        """The lesson bar as wide as the window and exactly as tall as its rows need at that
        width (its ``heightForWidth``: wrapped text, the answers' rows). Not the layout's
        minimum height: that is measured with every label at its narrowest, and made the bar
        two or three times taller than its text."""
        width = self.bar.width() if self.bar.isVisible() else self.window.width() - 8
        self.bar.setFixedHeight(self.bar.fitted_height(max(width, 200)))

    def _select(self, step) -> None:
        session = self.document.session
        query, key = step.select
        keys = session.tokens if session.source is None else session.source.tokens
        try:
            i = None if query is None else quotes.token_index(query, session.tokens, "token", "select")
            j = ... if key is None else quotes.token_index(key, keys, "key", "select")
        except quotes.QuoteError:
            return   # the class renamed the token: keep the selection they have
        self.document.selection.set(query=i, key=j)

    # -- the class's answers ---------------------------------------------------------------
    def guess_key(self, token: str) -> None:
        if self.active and self.run.step.ask is not None:
            self.run.guess_key(token)
            self.refresh()

    def guess_number(self, text: str) -> bool:
        if not (self.active and self.run.step.ask is not None):
            return False
        try:
            self.run.guess_number(text)
        except AttnExplorerError as err:
            self.window.status.show_message(str(err))
            return False
        self.refresh()
        return True

    def reveal(self) -> None:
        if self.active:
            if self.run.step.ask is not None and self.run.step.ask.kind == "number" and self.bar.number_edit.text() \
                    and self.run.index not in self.run.guesses:
                self.guess_number(self.bar.number_edit.text())  # typed but not yet entered
            self.run.reveal()
            self._arrange()   # Explain and the query's bars may show it now
            self.refresh()

    # -- following the document ------------------------------------------------------------
    def refresh(self, *_args) -> None:
        """Fill the bar from the newest result and place the covers."""
        if not self.active:
            return
        result = self.document.result
        run, step = self.run, self.run.step
        if result is None:
            self.bar.show_step(counter=run.counter(), formula=step.formula, text="", first=run.index == 0,
                               last=run.index == run.count - 1)
            return
        hidden = run.hidden()
        self.bar.show_step(counter=run.counter(result), formula=step.formula, text=fill(step.text, result, hidden).text,
                           first=run.index == 0, last=run.index == run.count - 1)
        ask = step.ask
        if ask is None:
            self.bar.show_question(None)
        else:
            self.bar.show_question(ask.kind, fill(ask.prompt, result, hidden).text, result.key_tokens,
                                   run.guesses.get(run.index), run.verdict(result), run.is_revealed())
        self._show_covers(hidden)
        self.fit_bar()   # the filled text may wrap onto more lines than the quotes did
        self.presenter.refresh_notes(result)

    def _show_covers(self, hidden) -> None:
        cover_panels(self.window.panels, hidden, self.document.result, self.document.selection.current.head,
                     self._covers, self.presenter.zoom if self.presenter.active else 1.0)

    def covers(self, kind: str):
        """The covers on panel ``kind`` (tests)."""
        return self._covers.get(kind)

    def _on_session_changed(self, session) -> None:
        # A token renamed or a stage switched can change which panels apply.
        if self.active:
            self.step_panels.remember(self.run)   # a panel the teacher brought up stays up
            self._arrange()
            self.slider.follow(session)

    # -- keys --------------------------------------------------------------------------------
    def eventFilter(self, obj, event) -> bool:
        if event.type() == QEvent.Type.Resize and obj is self.bar and self.active \
                and event.size().width() != event.oldSize().width():
            QTimer.singleShot(0, self.fit_bar)   # the bar's text wraps to its new width
            return False
        if event.type() != QEvent.Type.KeyPress or not self.active:
            return False
        if not isinstance(obj, QWidget) or obj.window() not in (self.window, self.presenter.notes_window):
            return False
        key = event.key()
        if event.modifiers() & (Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.AltModifier):
            return False
        if key in (Qt.Key.Key_Left, Qt.Key.Key_Right) and isinstance(QApplication.focusWidget(), _EDITING):
            return False
        if key in NEXT_KEYS:
            self.next()
            return True
        if key in BACK_KEYS:
            self.back()
            return True
        if key == Qt.Key.Key_Escape and self.presenter.active:
            self.presenter.leave()
            return True
        return False

    # -- the lesson as taught ----------------------------------------------------------------
    def current_lesson(self) -> Lesson | None:
        """The lesson with each step's panels as the teacher showed them (None: no lesson)."""
        if not self.active:
            return None
        self.step_panels.remember(self.run)
        return self.step_panels.as_taught(self.run)
