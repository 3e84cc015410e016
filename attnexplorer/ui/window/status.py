"""The status bar: the device and dtype, how long the last compute and the last redraw took,
and the short messages the document and the actions leave there.

``last_draw_ms`` is the time from a ``result_changed`` to the end of every panel's redraw
(before the first edit: the time the first show took to draw the panels). It is measured by
two connections to ``result_changed``: ``on_result_started`` made before any panel listens,
``on_result_drawn`` after every panel does; the window makes them in that order.
"""

from __future__ import annotations

import time

from PySide6.QtCore import QSize, Qt, Signal
from PySide6.QtWidgets import QLabel, QSizePolicy, QWidget

# How long a message stays in the status bar, in ms.
STATUS_MESSAGE_MS = 5000


class StatusLine:
    """Made before the panels (its timer must hear ``result_changed`` first); its labels go into
    the window's status bar with ``install``, at the point of the window's construction where
    they always were (making the status bar earlier shifts the first layout by a pixel here and
    there)."""

    def __init__(self, window, document):
        self.window, self.document = window, document
        self.last_draw_ms = 0.0
        self._draw_started: float | None = None

    def install(self) -> None:
        self.bar = self.window.statusBar()
        # The bar's own message is one line, cut off at the first permanent label ("…the keys
        # are ano"). This label is the first permanent widget and takes the free width, so the
        # bar's own text has no room left, and it shows every message (from ``show_message``
        # or any ``statusBar().showMessage``) whole: wrapped over as many lines as it needs,
        # and in its tooltip.
        self.message_area = MessageArea()
        self.message_label = self.message_area.label
        self.bar.addPermanentWidget(self.message_area, 1)
        self.bar.messageChanged.connect(self._on_message_changed)
        self.device_label = QLabel()
        self.compute_label = QLabel()
        self.draw_label = QLabel()
        for label in (self.device_label, self.compute_label, self.draw_label):
            label.setContentsMargins(6, 0, 6, 0)
            self.bar.addPermanentWidget(label)
        # The timings change on every edit. A label whose size can change asks the window to
        # lay itself out again, which repaints the whole window; at a fixed size wide enough
        # for any timing, only the label repaints.
        for label, widest in ((self.compute_label, "compute 00000.0 ms"), (self.draw_label, "draw 00000.0 ms")):
            label.setText(widest)
            label.setFixedSize(label.sizeHint())
            label.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            # It paints its own background (the bar's colour): a label that does not makes Qt
            # paint the status bar and the window behind it first, on every edit.
            label.setAutoFillBackground(True)

    def on_result_started(self, _result) -> None:
        self._draw_started = time.perf_counter()

    def on_result_drawn(self, _result) -> None:
        if self._draw_started is not None:
            self.last_draw_ms = (time.perf_counter() - self._draw_started) * 1000.0
            self._draw_started = None
        self.refresh()

    def first_shown(self, draw_ms: float) -> None:
        """The first show drew the panels in ``draw_ms``: the figure shown before any edit."""
        if self.last_draw_ms == 0.0:
            self.last_draw_ms = draw_ms
            self.refresh()

    def refresh(self) -> None:
        """Show the current timings and device."""
        self.compute_label.setText(f"compute {self.document.compute.last_compute_ms:.1f} ms")
        self.draw_label.setText(f"draw {self.last_draw_ms:.1f} ms" if self.last_draw_ms else "draw –")
        self.refresh_device()

    def refresh_device(self) -> None:
        self.device_label.setText(f"{self.document.compute.device} · {self.document.compute.dtype}")

    def show_message(self, text: str, duration_ms: int = STATUS_MESSAGE_MS) -> None:
        # A long reason stays up long enough to be read: about 20 characters a second.
        self.bar.showMessage(text, max(duration_ms, 50 * len(text)))

    def _on_message_changed(self, text: str) -> None:
        self.message_label.show_text(text)


class MessageArea(QWidget):
    """The status bar's room for its message: the label fills it, and it asks the bar for the
    height of the message's lines, at least one line's (the height the bar's other labels take
    anyway, so an empty bar looks the same).

    A label laid out by the bar asks it to lay itself out again on every new text (``QLabel``
    updates its geometry on ``setText``), and the bar then asks the whole window: a message
    shown or timing out laid out every dock and repainted the window (20-48 ms of the GUI
    thread in a 16,384-token window, where a compute's progress, "Computing 16,384 tokens × 4
    heads: 40% of the rows", is a new message every few per cent). Here the label is a
    child that no layout holds, so a new text repaints the label alone; the area asks for a new
    layout only when the message needs another number of lines."""

    def __init__(self):
        super().__init__()
        self.label = MessageLabel(self)
        self.label.needed_changed.connect(self.updateGeometry)
        policy = QSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.setSizePolicy(policy)

    def sizeHint(self) -> QSize:
        return QSize(0, self.label.needed)

    def minimumSizeHint(self) -> QSize:
        return QSize(0, self.label.needed)

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self.label.setGeometry(self.rect())


class MessageLabel(QLabel):
    """The status bar's message, wrapped over the lines it needs at its width, whole in its
    tooltip too; selectable, so a reason can be copied."""

    needed_changed = Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("status-message")
        self.setWordWrap(True)
        self.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        policy = QSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        policy.setHeightForWidth(False)
        self.setSizePolicy(policy)
        self.setContentsMargins(6, 0, 6, 0)
        self._needed = 0
        self._one_line = self.fontMetrics().height()

    # A word-wrapped label asks for the height its text takes at a narrow width (hundreds of
    # pixels here), which the status bar would take as its own: its area asks instead for the
    # lines the text takes at the width it has (``needed``).
    def hasHeightForWidth(self) -> bool:
        return False

    def lines_height(self, width: int) -> int:
        """The height the message takes wrapped at ``width``."""
        return max(super().heightForWidth(max(width, 50)), 0) if self.text() else 0

    def show_text(self, text: str) -> None:
        self.setText(text)
        self.setToolTip(text)
        self._fit()

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        if event.size().width() != event.oldSize().width():
            self._fit()

    @property
    def needed(self) -> int:
        """The height the message takes at the label's width, at least one line's."""
        return max(self._needed, self._one_line)

    def _fit(self) -> None:
        needed = self.lines_height(self.width())
        if needed != self._needed:
            before = self.needed
            self._needed = needed
            if self.needed != before:
                self.needed_changed.emit()
