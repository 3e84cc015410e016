"""A flow layout: its widgets left to right at their size hints, wrapping onto another row
when the next one does not fit, each row as tall as its tallest widget (the others centred).

Qt has no built-in one (its docs have an example, not a class). The lesson bar puts the key
buttons, the number field and Reveal in one, so a question with sixty keys takes a few rows
instead of squeezing its buttons to slivers. ``heightForWidth`` is exact (the same pass
``setGeometry`` makes), so a parent layout, and ``LessonController.fit_bar``, can size the
bar to it.
"""

from __future__ import annotations

from PySide6.QtCore import QPoint, QRect, QSize, Qt
from PySide6.QtWidgets import QLayout, QLayoutItem, QStyle, QWidget, QWidgetItem


class FlowLayout(QLayout):
    def __init__(self, parent: QWidget | None = None, spacing: int | None = None):
        super().__init__(parent)
        self._items: list[QLayoutItem] = []
        self._spacing = spacing
        self.setContentsMargins(0, 0, 0, 0)

    # -- the QLayout interface ---------------------------------------------------------------
    def addItem(self, item: QLayoutItem) -> None:
        self._items.append(item)
        self.invalidate()

    def insertWidget(self, index: int, widget: QWidget) -> None:
        """``widget`` at place ``index`` (``addWidget`` puts it last)."""
        self.addChildWidget(widget)
        self._items.insert(index, QWidgetItem(widget))
        self.invalidate()

    def count(self) -> int:
        return len(self._items)

    def itemAt(self, index: int):
        return self._items[index] if 0 <= index < len(self._items) else None

    def takeAt(self, index: int):
        if not 0 <= index < len(self._items):
            return None
        item = self._items.pop(index)
        self.invalidate()
        return item

    def expandingDirections(self) -> Qt.Orientation:
        return Qt.Orientation(0)

    def hasHeightForWidth(self) -> bool:
        return True

    def heightForWidth(self, width: int) -> int:
        return self._place(QRect(0, 0, width, 0), move=False)

    def setGeometry(self, rect: QRect) -> None:
        super().setGeometry(rect)
        self._place(rect, move=True)

    def sizeHint(self) -> QSize:
        """Every widget on one row."""
        shown = self._shown()
        if not shown:
            return QSize(0, 0)
        width = sum(item.sizeHint().width() for item in shown) + self._gap() * (len(shown) - 1)
        height = max(item.sizeHint().height() for item in shown)
        margins = self.contentsMargins()
        return QSize(width + margins.left() + margins.right(), height + margins.top() + margins.bottom())

    def minimumSize(self) -> QSize:
        """As narrow as the widest widget (one a row)."""
        size = QSize(0, 0)
        for item in self._shown():
            size = size.expandedTo(item.minimumSize()).expandedTo(item.sizeHint())
        margins = self.contentsMargins()
        return size + QSize(margins.left() + margins.right(), margins.top() + margins.bottom())

    # -- placing -----------------------------------------------------------------------------
    def _shown(self) -> list[QLayoutItem]:
        return [item for item in self._items if not item.isEmpty()]   # hidden widgets take no room

    def _gap(self) -> int:
        if self._spacing is not None:
            return self._spacing
        parent = self.parentWidget()
        if parent is None:
            return 6
        return max(parent.style().pixelMetric(QStyle.PixelMetric.PM_LayoutHorizontalSpacing), 6)

    def rows(self, width: int) -> list[list[QLayoutItem]]:
        """The shown items row by row at ``width`` (contents margins included)."""
        margins = self.contentsMargins()
        room = max(width - margins.left() - margins.right(), 1)
        gap = self._gap()
        rows: list[list[QLayoutItem]] = []
        used = 0
        for item in self._shown():
            w = min(item.sizeHint().width(), room)
            if rows and used + gap + w <= room:
                rows[-1].append(item)
                used += gap + w
            else:
                rows.append([item])
                used = w
        return rows

    def _place(self, rect: QRect, move: bool) -> int:
        """Lay the items out in ``rect`` (only measure unless ``move``); the height it takes."""
        margins = self.contentsMargins()
        room = max(rect.width() - margins.left() - margins.right(), 1)
        gap = self._gap()
        y = rect.y() + margins.top()
        for n, row in enumerate(self.rows(rect.width())):
            if n:
                y += gap
            height = max(item.sizeHint().height() for item in row)
            x = rect.x() + margins.left()
            for item in row:
                hint = item.sizeHint()
                w = min(hint.width(), room)   # a widget wider than the bar is narrowed, never cut off
                if move:
                    item.setGeometry(QRect(QPoint(x, y + (height - hint.height()) // 2), QSize(w, hint.height())))
                x += w + gap
            y += height
        return y - rect.y() + margins.bottom() if self._shown() else 0
