"""The lesson bar: the step counter, the stage's formula, the step's text, the question
(a key to click or a number to type, then Reveal), a preset slider, and Back / Next.

It shows what the controller gives it and reports what the class does through signals; it
keeps no lesson state of its own. ``set_zoom`` scales every font in it (presenter mode).

Rows, top to bottom, each as wide as the bar: Back, the counter, Next and End lesson; the
formula; the text; the question's prompt; its answers (a button per key, or the number
field, then Reveal) in a ``FlowLayout`` that wraps onto more rows when they do not fit; the
verdict; the slider. Every row's height follows the bar's width (``heightForWidth``), which
is what ``LessonController.fit_bar`` sizes the bar by.
"""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt, Signal
from PySide6.QtGui import QFont
from PySide6.QtWidgets import (QHBoxLayout, QLabel, QLineEdit, QPushButton, QSizePolicy, QVBoxLayout, QWidget)

from .flow import FlowLayout

# Base pixel sizes at zoom 1; presenter mode multiplies them.
COUNTER_PX, FORMULA_PX, TEXT_PX = 15, 20, 14


def _font(px: float, bold: bool = False, italic: bool = False) -> QFont:
    font = QFont()
    font.setPixelSize(max(6, round(px)))
    font.setBold(bold)
    font.setItalic(italic)
    return font


class KeyButton(QPushButton):
    """A key to guess: as wide as its token (the style's 80-px minimum would put a sentence of
    short tokens on three rows), checkable, never taking the keyboard (the arrows step)."""

    def __init__(self, key: str, parent=None):
        super().__init__(key, parent)
        self.key = key
        self.setCheckable(True)
        self.setFocusPolicy(Qt.FocusPolicy.NoFocus)

    def sizeHint(self) -> QSize:
        metrics = self.fontMetrics()
        return QSize(metrics.horizontalAdvance(self.text()) + 2 * metrics.averageCharWidth() + 12,
                     super().sizeHint().height())

    def minimumSizeHint(self) -> QSize:
        return self.sizeHint()


class LessonBar(QWidget):
    back_clicked = Signal()
    next_clicked = Signal()
    exit_clicked = Signal()
    reveal_clicked = Signal()
    key_guessed = Signal(str)
    number_guessed = Signal(str)
    slider_moved = Signal(float, bool)   # value, dragging

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("lesson-bar")
        self.zoom = 1.0
        self.back_button = QPushButton("◀ Back")
        self.next_button = QPushButton("Next ▶")
        self.exit_button = QPushButton("End lesson")
        self.counter = QLabel()
        self.counter.setObjectName("lesson-counter")
        self.counter.setWordWrap(True)   # a long step title wraps beside the buttons, never widens the bar
        self.formula = QLabel()
        self.formula.setObjectName("lesson-formula")
        self.formula.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.text = QLabel()
        self.text.setObjectName("lesson-text")
        self.text.setWordWrap(True)
        self.text.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.text.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Minimum)
        self.prompt = QLabel()
        self.prompt.setObjectName("lesson-prompt")
        self.prompt.setWordWrap(True)
        self.key_buttons: dict[str, KeyButton] = {}   # one per distinct key: a guess is a key's name
        self.number_edit = QLineEdit()
        self.number_edit.setPlaceholderText("your guess, e.g. 0.9")
        self.number_edit.returnPressed.connect(lambda: self.number_guessed.emit(self.number_edit.text()))
        self.reveal_button = QPushButton("Reveal")
        self.verdict = QLabel()
        self.verdict.setObjectName("lesson-verdict")
        self.verdict.setWordWrap(True)
        self.slider_label = QLabel()
        self.slider_box = QHBoxLayout()
        self.slider = None

        top = QHBoxLayout()
        top.addWidget(self.back_button)
        top.addWidget(self.counter, 1)
        top.addWidget(self.next_button)
        top.addWidget(self.exit_button)
        # The answers in one flow: the key buttons go in before the number field (``_answer_at``).
        self.answers = FlowLayout()
        self.answers.addWidget(self.number_edit)
        self.answers.addWidget(self.reveal_button)
        slider = QHBoxLayout()
        slider.addWidget(self.slider_label)
        slider.addLayout(self.slider_box, 1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(8, 4, 8, 4)
        layout.addLayout(top)
        layout.addWidget(self.formula)
        layout.addWidget(self.text)
        layout.addWidget(self.prompt)
        layout.addLayout(self.answers)
        layout.addWidget(self.verdict)
        layout.addLayout(slider)
        self.back_button.clicked.connect(self.back_clicked)
        self.next_button.clicked.connect(self.next_clicked)
        self.exit_button.clicked.connect(self.exit_clicked)
        self.reveal_button.clicked.connect(self.reveal_clicked)
        # The bar's buttons must not keep the keyboard focus: the arrow keys step the lesson.
        for button in (self.back_button, self.next_button, self.exit_button, self.reveal_button):
            button.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        # As wide as the lesson's tool bar gives it (the window's width): a fixed width would
        # stop the window from being made narrower; its height is fit_bar's.
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.show_question(None)
        self.show_slider(None)   # no empty slider row taking a share of the bar
        self.set_zoom(1.0)

    # -- what the controller shows ---------------------------------------------------------
    def show_step(self, *, counter: str, formula: str, text: str, first: bool, last: bool) -> None:
        self.counter.setText(counter)
        self.formula.setText(formula)
        self.formula.setVisible(bool(formula))   # no empty row taking the panels' room
        self.text.setText(text)
        self.text.setVisible(bool(text))
        self.back_button.setEnabled(not first)
        self.next_button.setEnabled(not last)

    def show_question(self, kind: str | None, prompt: str = "", keys=(), guess=None, verdict: str = "",
                      revealed: bool = False) -> None:
        """No question (``kind`` None), a key question (a button per key; the guess checked)
        or a number question (a field); ``verdict`` is shown once revealed."""
        asking = kind is not None
        self.prompt.setVisible(asking)
        self.prompt.setText(prompt)
        self.reveal_button.setVisible(asking)
        self.reveal_button.setEnabled(asking and not revealed)
        self.verdict.setVisible(asking and revealed)
        self.verdict.setText(verdict if revealed else "")
        # A token written twice ("the … the") is one key to guess: the answer names a key.
        wanted = list(dict.fromkeys(keys)) if kind == "key" else []
        if list(self.key_buttons) != wanted:
            for button in self.key_buttons.values():
                self.answers.removeWidget(button)
                button.hide()   # gone now, not at the next event loop turn
                button.deleteLater()
            self.key_buttons = {}
            for i, key in enumerate(wanted):
                button = KeyButton(key, self)
                button.setFont(_font(TEXT_PX * self.zoom))
                button.clicked.connect(lambda _checked=False, k=key: self.key_guessed.emit(k))
                self.answers.insertWidget(i, button)
                button.show()   # now: a layout shows a new child only at the next event loop turn
                self.key_buttons[key] = button
        for key, button in self.key_buttons.items():
            button.setChecked(key == guess)
        self.number_edit.setVisible(kind == "number")

    def fitted_height(self, width: int) -> int:
        """The bar's height at ``width``, measured afresh: a nested layout keeps the size it
        measured until the next event loop turn (a row just emptied still counted), so every
        layout of the bar forgets its sizes first."""
        stack = [self.layout()]
        while stack:
            layout = stack.pop()
            layout.invalidate()
            stack.extend(item.layout() for item in (layout.itemAt(i) for i in range(layout.count()))
                         if item.layout() is not None)
        return self.heightForWidth(width)

    def answer_rows(self) -> int:
        """How many rows the answers (keys, number field, Reveal) take at the bar's width."""
        return len(self.answers.rows(self.answers.geometry().width() or self.width()))

    def set_typed_guess(self, text: str) -> None:
        """The number field's text on entering a step: the step's guess, or empty."""
        self.number_edit.setText(text)

    def show_slider(self, label: str | None, widget=None) -> None:
        """The step's preset slider (``widget``, a ``ValueSlider``), or none."""
        if self.slider is not None and self.slider is not widget:
            self.slider_box.removeWidget(self.slider)
            self.slider.hide()
            self.slider.deleteLater()
            self.slider = None
        if widget is not None and self.slider is None:
            self.slider = widget
            self._zoom_slider()   # made for this step: the bar's zoom reaches it too
            self.slider_box.addWidget(widget)
            widget.show()
        self.slider_label.setText(label or "")
        self.slider_label.setVisible(widget is not None)

    def set_zoom(self, zoom: float) -> None:
        """Scale every font of the bar by ``zoom`` (presenter mode: readable from the back)."""
        self.zoom = zoom
        self.counter.setFont(_font(COUNTER_PX * zoom, bold=True))
        self.formula.setFont(_font(FORMULA_PX * zoom, italic=True))
        for widget in (self.text, self.prompt, self.verdict, self.slider_label, self.number_edit, self.back_button,
                       self.next_button, self.exit_button, self.reveal_button, *self.key_buttons.values()):
            widget.setFont(_font(TEXT_PX * zoom))
        # Wide enough for the placeholder at every zoom (a fixed 220 px cut it off in presenter mode).
        metrics = self.number_edit.fontMetrics()
        self.number_edit.setFixedWidth(metrics.horizontalAdvance(self.number_edit.placeholderText()) + 4 * metrics.averageCharWidth())
        self._zoom_slider()

    def _zoom_slider(self) -> None:
        if self.slider is None:
            return
        self.slider.setFont(_font(TEXT_PX * self.zoom))
        spin = getattr(self.slider, "spin", None)
        if spin is not None:   # its minimum width was measured at the font it was made with
            spin.setMinimumWidth(spin.fontMetrics().horizontalAdvance("0000.0000") + 24)
