"""The mouse wheel scrolls a page of controls; it changes a control only once that has focus.

In a scrolling dock (the Inputs, the Controls, Fit) a wheel turn meant to scroll the page
landed on whichever spin box, combo box or slider passed under the pointer and changed it (the
K/V heads went 2 → 1, one undo step). ``guard_wheel(root)`` makes every such control under
``root`` (now and added later, e.g. a preset's sliders rebuilt for a new preset) take focus by
click or Tab only, and pass a wheel turn on to the page while it has no focus; a control the
user clicked into (or tabbed to) still takes the wheel, as in a browser's form.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, QPointF, Qt
from PySide6.QtGui import QWheelEvent
from PySide6.QtWidgets import (
    QAbstractItemView, QAbstractScrollArea, QAbstractSlider, QAbstractSpinBox, QApplication, QComboBox, QScrollBar,
    QWidget,
)

# The controls a wheel turn changes (a scroll bar is meant to be wheeled: not one of them).
WHEELED = (QAbstractSpinBox, QComboBox, QAbstractSlider)


def _wheeled(widget) -> bool:
    return isinstance(widget, WHEELED) and not isinstance(widget, QScrollBar)


def _in_table(widget) -> bool:
    """A table's viewport, scroll bars and cell editors keep their own wheel."""
    while widget is not None:
        widget = widget.parentWidget()
        if isinstance(widget, QAbstractItemView):
            return True
    return False


class WheelGuard(QObject):
    def eventFilter(self, watched, event) -> bool:
        kind = event.type()
        if kind == QEvent.Type.Wheel:
            if _wheeled(watched) and not watched.hasFocus():
                self._scroll_page(watched, event)
                return True
        elif kind == QEvent.Type.ChildPolished:
            child = event.child()
            if isinstance(child, QWidget):
                self.cover(child)
        return False

    @staticmethod
    def _scroll_page(control, event) -> None:
        """Give the turn to the page's scroll area. (Qt passes an ignored turn on to the
        parents only when it came from the window system; handing it over ourselves scrolls
        for any turn.)"""
        area = control.parentWidget()
        while area is not None and not isinstance(area, QAbstractScrollArea):
            area = area.parentWidget()
        if area is None:
            event.ignore()
            return
        viewport = area.viewport()
        at = QPointF(viewport.mapFromGlobal(event.globalPosition().toPoint()))
        turn = QWheelEvent(at, event.globalPosition(), event.pixelDelta(), event.angleDelta(), event.buttons(),
                           event.modifiers(), event.phase(), event.inverted(), event.source())
        QApplication.sendEvent(viewport, turn)
        event.accept()

    def cover(self, widget: QWidget) -> None:
        """Guard ``widget`` and everything under it (once each)."""
        for each in [widget, *widget.findChildren(QWidget)]:
            if each.property("wheel_guarded") or _in_table(each):
                continue
            each.setProperty("wheel_guarded", True)
            each.installEventFilter(self)
            if _wheeled(each) and each.focusPolicy() == Qt.FocusPolicy.WheelFocus:
                each.setFocusPolicy(Qt.FocusPolicy.StrongFocus)  # a turn must not hand it focus


def guard_wheel(root: QWidget) -> WheelGuard:
    """Guard every control under ``root``; the guard lives as long as ``root``."""
    guard = WheelGuard(root)
    guard.cover(root)
    return guard
