"""The lesson bar: the step counter, the stage's formula, the step's text, the question
(a key to click or a number to type, then Reveal), a preset slider, and Back / Next.

It shows what the controller gives it and reports what the class does through signals; it
keeps no lesson state of its own. ``set_zoom`` scales every font in it (presenter mode).
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QFont
from PySide6.QtWidgets import (QHBoxLayout, QLabel, QLineEdit, QPushButton, QSizePolicy, QVBoxLayout, QWidget)

# Base pixel sizes at zoom 1; presenter mode multiplies them.
COUNTER_PX, FORMULA_PX, TEXT_PX = 15, 20, 14


def _font(px: float, bold: bool = False, italic: bool = False) -> QFont:
    font = QFont()
    font.setPixelSize(max(6, round(px)))
    font.setBold(bold)
    font.setItalic(italic)
    return font


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
        self.formula = QLabel()
        self.formula.setObjectName("lesson-formula")
        self.formula.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.text = QLabel()
        self.text.setObjectName("lesson-text")
        self.text.setWordWrap(True)
        self.text.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.text.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Minimum)
        self.prompt = QLabel()
        self.prompt.setWordWrap(True)
        self.key_row = QHBoxLayout()
        self.key_buttons: dict[str, QPushButton] = {}
        self.number_edit = QLineEdit()
        self.number_edit.setPlaceholderText("your guess, e.g. 0.9")
        self.number_edit.setMaximumWidth(220)
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
        ask = QHBoxLayout()
        ask.addWidget(self.prompt, 2)
        ask.addLayout(self.key_row)
        ask.addWidget(self.number_edit)
        ask.addWidget(self.reveal_button)
        slider = QHBoxLayout()
        slider.addWidget(self.slider_label)
        slider.addLayout(self.slider_box, 1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(8, 4, 8, 4)
        layout.addLayout(top)
        layout.addWidget(self.formula)
        layout.addWidget(self.text)
        layout.addLayout(ask)
        layout.addWidget(self.verdict)
        layout.addLayout(slider)
        self.back_button.clicked.connect(self.back_clicked)
        self.next_button.clicked.connect(self.next_clicked)
        self.exit_button.clicked.connect(self.exit_clicked)
        self.reveal_button.clicked.connect(self.reveal_clicked)
        # The bar's buttons must not keep the keyboard focus: the arrow keys step the lesson.
        for button in (self.back_button, self.next_button, self.exit_button, self.reveal_button):
            button.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Maximum)
        self.set_zoom(1.0)

    # -- what the controller shows ---------------------------------------------------------
    def show_step(self, *, counter: str, formula: str, text: str, first: bool, last: bool) -> None:
        self.counter.setText(counter)
        self.formula.setText(formula)
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
        wanted = list(keys) if kind == "key" else []
        if list(self.key_buttons) != wanted:
            for button in self.key_buttons.values():
                self.key_row.removeWidget(button)
                button.deleteLater()
            self.key_buttons = {}
            for key in wanted:
                button = QPushButton(key)
                button.setCheckable(True)
                button.setFocusPolicy(Qt.FocusPolicy.NoFocus)
                button.setFont(_font(TEXT_PX * self.zoom))
                button.clicked.connect(lambda _checked=False, k=key: self.key_guessed.emit(k))
                self.key_row.addWidget(button)
                self.key_buttons[key] = button
        for key, button in self.key_buttons.items():
            button.setChecked(key == guess)
        self.number_edit.setVisible(kind == "number")

    def set_typed_guess(self, text: str) -> None:
        """The number field's text on entering a step: the step's guess, or empty."""
        self.number_edit.setText(text)

    def show_slider(self, label: str | None, widget=None) -> None:
        """The step's preset slider (``widget``, a ``ValueSlider``), or none."""
        if self.slider is not None and self.slider is not widget:
            self.slider_box.removeWidget(self.slider)
            self.slider.deleteLater()
            self.slider = None
        if widget is not None and self.slider is None:
            self.slider = widget
            self.slider_box.addWidget(widget)
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
        if self.slider is not None:
            self.slider.setFont(_font(TEXT_PX * zoom))
