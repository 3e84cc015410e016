"""A QTableView for the input tables: keyboard editing, Ctrl+C / Ctrl+V, a context menu.

- Typing into a cell starts editing (Enter commits, Escape cancels); F2 edits too.
- Ctrl+C copies the selected rectangle as tab-separated text at full precision.
- Ctrl+V pastes the clipboard's block at the current cell as one undo step (the model's
  ``paste_text``; a block that does not fit is refused with its shape and the room).
- The context menu offers Copy and Paste plus any actions the owner added with
  ``add_menu_action`` (the tables' Import… entries).
- ``bind_token_rows(document)``: rows are tokens; moving the current row selects that query
  everywhere, and the view follows the document's selected query.

Rows have a fixed height and headers are not sized to their contents, so a 4,096-row table
scrolls without asking the model about rows that are not on screen.
"""

from __future__ import annotations

from PySide6.QtCore import QItemSelectionModel, Qt, QTimer
from PySide6.QtGui import QAction, QGuiApplication, QKeySequence
from PySide6.QtCore import QSize
from PySide6.QtWidgets import (QAbstractItemView, QAbstractScrollArea, QHeaderView, QMenu, QSizePolicy,
                               QStyledItemDelegate, QTableView)

from ..document import SessionDocument


class _CellDelegate(QStyledItemDelegate):
    """The tables' delegate: opening a cell's editor tells a model that has ``prepare_edit``
    that an edit is coming, so it can get ready while the person types (a large weight array
    writes the memory file its first copy-on-write edit maps)."""

    def createEditor(self, parent, option, index):
        prepare = getattr(index.model(), "prepare_edit", None)
        if prepare is not None:
            prepare()
        return super().createEditor(parent, option, index)


class MatrixTableView(QTableView):
    # A table asks for room for every row it holds, up to this many (more scroll), so a
    # layout gives a walkthrough's tables all their rows and the plots the rest.
    ROWS_WANTED = 12
    ROWS_AT_LEAST = 3

    def __init__(self, model=None, parent=None):
        super().__init__(parent)
        self.setItemDelegate(_CellDelegate(self))
        self.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        self.setEditTriggers(QAbstractItemView.EditTrigger.DoubleClicked
                             | QAbstractItemView.EditTrigger.EditKeyPressed
                             | QAbstractItemView.EditTrigger.AnyKeyPressed)
        self.setHorizontalScrollMode(QAbstractItemView.ScrollMode.ScrollPerPixel)
        self.setVerticalScrollMode(QAbstractItemView.ScrollMode.ScrollPerPixel)
        rows = self.verticalHeader()
        rows.setSectionResizeMode(QHeaderView.ResizeMode.Fixed)
        rows.setDefaultSectionSize(max(20, self.fontMetrics().height() + 6))
        cols = self.horizontalHeader()
        cols.setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        # Room for "-0.0002533" (4 significant digits); longer ones ("1.234e-05") are elided,
        # the editor and the tooltip show them whole.
        cols.setDefaultSectionSize(self.fontMetrics().horizontalAdvance("-0.0000000") + 8)
        cols.setMinimumSectionSize(24)
        self._menu_actions: list[QAction] = []
        self._document: SessionDocument | None = None
        self._syncing = False
        self.copy_action = self._action("&Copy", QKeySequence.StandardKey.Copy, self.copy_selection)
        self.paste_action = self._action("&Paste", QKeySequence.StandardKey.Paste, self.paste_clipboard)
        if model is not None:
            self.setModel(model)

    def hold_one_row(self) -> None:
        """A vector (ALiBi slopes, a norm's weight): exactly its row, the column numbers and
        a horizontal scroll bar's room, whatever the style's header and bar heights turn out to
        be once the view is polished (a height fixed when the view was made left 17 of the
        row's 20 px, and nothing once a scroll bar appeared)."""
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.ROWS_WANTED = self.ROWS_AT_LEAST = 1
        self.setSizePolicy(self.sizePolicy().horizontalPolicy(), QSizePolicy.Policy.Fixed)
        self.updateGeometry()

    def _rows_height(self, rows: int) -> int:
        header = self.horizontalHeader().sizeHint().height() if self.horizontalHeader().isVisible() else 0
        scrollbar = self.horizontalScrollBar().sizeHint().height()  # columns may scroll
        return header + rows * self.verticalHeader().defaultSectionSize() + 2 * self.frameWidth() + scrollbar

    def _rows(self) -> int:
        model = self.model()
        return 0 if model is None else model.rowCount()

    def sizeHint(self) -> QSize:
        return QSize(super().sizeHint().width(), self._rows_height(max(1, min(self._rows(), self.ROWS_WANTED))))

    def minimumSizeHint(self) -> QSize:
        return QSize(super().minimumSizeHint().width(),
                     self._rows_height(max(1, min(self._rows(), self.ROWS_AT_LEAST))))

    def _action(self, text, shortcut, slot) -> QAction:
        action = QAction(text, self)
        action.setShortcut(shortcut)
        # Only while the table has focus: the window's own Edit menu must keep its shortcuts.
        action.setShortcutContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
        action.triggered.connect(slot)
        self.addAction(action)
        return action

    def add_menu_action(self, action: QAction) -> None:
        """Show ``action`` in this table's context menu (after Copy and Paste)."""
        self._menu_actions.append(action)

    def keyPressEvent(self, event) -> None:
        # Reached when the key did not fire the actions' shortcut (e.g. synthetic events);
        # QTableView's own Ctrl+C would copy only the display text of one cell.
        if event.matches(QKeySequence.StandardKey.Copy):
            self.copy_selection()
            event.accept()
        elif event.matches(QKeySequence.StandardKey.Paste):
            self.paste_clipboard()
            event.accept()
        else:
            super().keyPressEvent(event)

    # -- focus: only the current cell's frame changes -------------------------------------------
    # QAbstractItemView repaints its whole viewport when it gains or loses focus. Typing a number
    # moves focus to the cell's editor and back, so each typed edit repainted every visible cell
    # twice (2.4 ms each for a W_q table's 48 cells here), though all that differs with focus is
    # the current cell's focus frame (the selection looks the same either way). These do what
    # QAbstractItemView's handlers do, but repaint only that cell; QAbstractScrollArea's (the
    # frame, which a style may draw as focused) run as before.
    def focusInEvent(self, event) -> None:
        QAbstractScrollArea.focusInEvent(self, event)
        model, selection = self.model(), self.selectionModel()
        current = self.currentIndex()
        if (model is not None and selection is not None and not current.isValid()
                and event.reason() != Qt.FocusReason.MouseFocusReason):
            # As Qt does: keyboard focus into a table with no current cell makes the first one current.
            first = self.moveCursor(QAbstractItemView.CursorAction.MoveNext, Qt.KeyboardModifier.NoModifier)
            if first.isValid() and first.flags() & Qt.ItemFlag.ItemIsEnabled:
                selection.setCurrentIndex(first, QItemSelectionModel.SelectionFlag.NoUpdate)
                current = first
        self.setAttribute(Qt.WidgetAttribute.WA_InputMethodEnabled,
                          bool(current.isValid() and current.flags() & Qt.ItemFlag.ItemIsEditable))
        self._repaint_current_cell()

    def focusOutEvent(self, event) -> None:
        QAbstractScrollArea.focusOutEvent(self, event)
        self._repaint_current_cell()

    def _repaint_current_cell(self) -> None:
        current = self.currentIndex()
        if current.isValid():
            self.viewport().update(self.visualRect(current))

    def contextMenuEvent(self, event) -> None:
        menu = QMenu(self)
        menu.addAction(self.copy_action)
        self.paste_action.setEnabled(hasattr(self.model(), "paste_text"))
        menu.addAction(self.paste_action)
        if self._menu_actions:
            menu.addSeparator()
            for action in self._menu_actions:
                menu.addAction(action)
        menu.exec(event.globalPos())

    # -- copy and paste ----------------------------------------------------------------------
    def selected_text(self) -> str:
        """The selected rectangle (bounding box of the selection) as TSV, full precision."""
        model = self.model()
        indexes = self.selectionModel().selectedIndexes() if self.selectionModel() else []
        if not indexes:
            current = self.currentIndex()
            if not current.isValid():
                return ""
            indexes = [current]
        top = min(i.row() for i in indexes)
        bottom = max(i.row() for i in indexes)
        left = min(i.column() for i in indexes)
        right = max(i.column() for i in indexes)
        lines = []
        for r in range(top, bottom + 1):
            cells = []
            for c in range(left, right + 1):
                value = model.data(model.index(r, c), Qt.ItemDataRole.EditRole)
                cells.append("" if value is None else str(value))
            lines.append("\t".join(cells))
        return "\n".join(lines)

    def copy_selection(self) -> None:
        text = self.selected_text()
        if text:
            QGuiApplication.clipboard().setText(text)

    def paste_clipboard(self) -> bool:
        return self.paste_text(QGuiApplication.clipboard().text())

    def paste_text(self, text: str) -> bool:
        """Paste ``text`` with its top-left corner at the current cell, as one edit."""
        model = self.model()
        if not hasattr(model, "paste_text"):
            return False
        current = self.currentIndex()
        indexes = self.selectionModel().selectedIndexes() if self.selectionModel() else []
        if current.isValid():
            top, left = current.row(), current.column()
        elif indexes:
            top = min(i.row() for i in indexes)
            left = min(i.column() for i in indexes)
        else:
            top = left = 0
        return model.paste_text(top, left, text)

    # -- token rows follow the selection ---------------------------------------------------------
    def bind_token_rows(self, document: SessionDocument) -> None:
        """Rows are tokens: the current row is the selected query, in both directions."""
        self._document = document
        self.selectionModel().currentRowChanged.connect(self._on_current_row_changed)
        document.selection.changed.connect(self._on_selection_changed)
        self._on_selection_changed(document.selection.current)

    def setModel(self, model) -> None:
        super().setModel(model)
        if model is not None:
            # The rows asked for follow the rows held (one setModel: a second definition of
            # it further down once silently replaced this one).
            for signal in (model.modelReset, model.rowsInserted, model.rowsRemoved, model.layoutChanged,
                           model.columnsInserted, model.columnsRemoved):
                signal.connect(self.updateGeometry)
        if getattr(self, "_document", None) is not None and self.selectionModel() is not None:
            self.selectionModel().currentRowChanged.connect(self._on_current_row_changed)

    def _on_current_row_changed(self, current, previous) -> None:
        if self._document is not None and not self._syncing and current.isValid():
            self._document.selection.set(query=current.row())

    def showEvent(self, event) -> None:
        super().showEvent(event)
        # A selection made before the table had its size (a preset opening on its query)
        # could not be scrolled to then; once laid out, bring the current row into view.
        QTimer.singleShot(0, self._scroll_to_current)

    def _scroll_to_current(self) -> None:
        if self.currentIndex().isValid():
            self.scrollTo(self.currentIndex())

    def _on_selection_changed(self, selection) -> None:
        model = self.model()
        if model is None or not 0 <= selection.query < model.rowCount():
            return
        if self.currentIndex().row() == selection.query:
            return
        self._syncing = True
        try:
            column = max(self.currentIndex().column(), 0)
            self.selectionModel().setCurrentIndex(
                model.index(selection.query, column),
                QItemSelectionModel.SelectionFlag.ClearAndSelect | QItemSelectionModel.SelectionFlag.Rows)
            self.scrollTo(model.index(selection.query, column))
        finally:
            self._syncing = False
