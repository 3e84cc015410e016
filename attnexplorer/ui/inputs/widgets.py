"""The pieces every input page is built from: small buttons and number boxes, the Import…
menus of a table, and the form and splitter above and around a token and embedding pair.

Shared by the Tokens and Weights pages (``tokens_page.py``, ``weights_page.py``), the Stages
page (``stages_page.py``) and the Source page (``source_page.py``).
"""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import QSignalBlocker, Qt, Signal
from PySide6.QtGui import QAction, QGuiApplication
from PySide6.QtWidgets import (
    QComboBox, QFileDialog, QFormLayout, QFrame, QHBoxLayout, QLabel, QLineEdit, QMenu, QScrollArea, QSpinBox,
    QSplitter, QToolButton, QVBoxLayout, QWidget,
)

from ...core.errors import AttnExplorerError
from ...core.numbers.expr import format_full, parse_number
from .table_models import MatrixModel
from .table_view import MatrixTableView

MATRIX_FILTER = "Matrices (*.csv *.tsv *.txt *.npy);;All files (*)"


def read_matrix_file(path) -> np.ndarray:
    """A 2-D float64 matrix from a CSV/TSV/TXT (labels allowed) or NPY (no pickle) file."""
    from ...io.matrices import read_matrix

    return read_matrix(path)


# Beyond this many tokens the sentence box stays blank (its placeholder says why): a line of
# thousands of tokens can be neither read nor edited.
MAX_SENTENCE_TOKENS = 512
SENTENCE_HINT = "Type a sentence and press Enter"


def tool_button(text: str, tip: str, menu: QMenu | None = None, slot=None) -> QToolButton:
    button = QToolButton()
    button.setText(text)
    button.setToolTip(tip)
    button.setAutoRaise(False)
    if menu is not None:
        button.setMenu(menu)
        button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
    if slot is not None:
        button.clicked.connect(slot)
    return button


def spin_box(minimum: int, maximum: int, tip: str) -> QSpinBox:
    spin = QSpinBox()
    spin.setRange(minimum, maximum)
    spin.setToolTip(tip)
    # Commit on Enter / focus-out / arrows, not on every digit typed: "12" is one edit, not two.
    spin.setKeyboardTracking(False)
    return spin


class ImportActions:
    """Import… entries for one table: from a file or the clipboard, optionally transposed.

    ``import_file(path, transpose)`` and ``import_text(text, transpose)`` are what the menu
    entries call after asking for a file; tests and the window may call them directly.
    """

    def __init__(self, owner: QWidget, view: MatrixTableView, model: MatrixModel, linear: bool):
        self.owner, self.model = owner, model
        self.menu = QMenu(owner)
        entries = [("From file…", False, True), ("From clipboard", False, False)]
        if linear:
            entries = [
                ("From file, as stored (d × cols)…", False, True),
                ("From file, nn.Linear orientation (cols × d, transposed)…", True, True),
                ("From clipboard, as stored (d × cols)", False, False),
                ("From clipboard, nn.Linear orientation (transposed)", True, False),
            ]
        for text, transpose, from_file in entries:
            action = QAction(text, owner)
            if from_file:
                action.triggered.connect(lambda _=False, t=transpose: self._ask_file(t))
            else:
                action.triggered.connect(lambda _=False, t=transpose: self.import_text(QGuiApplication.clipboard().text(), t))
            self.menu.addAction(action)
        import_all = QAction(f"Import into {model.table}", owner)
        import_all.setMenu(self.menu)
        view.add_menu_action(import_all)

    def _ask_file(self, transpose: bool) -> None:
        path, _ = QFileDialog.getOpenFileName(self.owner, f"Import {self.model.table}", "", MATRIX_FILTER)
        if path:
            self.import_file(path, transpose)

    def import_file(self, path, transpose: bool = False) -> bool:
        try:
            matrix = read_matrix_file(path)
        except AttnExplorerError as err:
            self.model.document.refuse(f"Import refused: {err}")
            return False
        return self.model.import_matrix(matrix, transpose=transpose, source=str(path))

    def import_text(self, text: str, transpose: bool = False) -> bool:
        from ...io.matrix_text import parse_matrix_text

        try:
            matrix = parse_matrix_text(text)
        except AttnExplorerError as err:
            self.model.document.refuse(f"Import from the clipboard refused: {err}")
            return False
        return self.model.import_matrix(matrix, transpose=transpose, source="the clipboard")



def set_spin(spin: QSpinBox, value: int) -> None:
    """``spin.setValue(value)`` with its signals blocked, only when it differs."""
    if spin.value() != value:
        with QSignalBlocker(spin):
            spin.setValue(value)


def rows_form(width_label: str, d_spin, seed_spin, rows_label: str, rows_combo, fill, importer) -> QFormLayout:
    """The two rows above a token and embedding table pair (the session's and a source's):
    the width and seed, then where new rows come from with Fill and Import."""
    form = QFormLayout()
    form.setContentsMargins(0, 0, 0, 0)
    form.setRowWrapPolicy(QFormLayout.RowWrapPolicy.WrapLongRows)
    form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
    row1 = QHBoxLayout()
    row1.addWidget(d_spin)
    row1.addWidget(QLabel("seed"))
    row1.addWidget(seed_spin, 1)
    form.addRow(width_label, row1)
    row2 = QHBoxLayout()
    row2.addWidget(rows_combo, 1)
    row2.addWidget(fill)
    row2.addWidget(importer)
    form.addRow(rows_label, row2)
    return form


def side_by_side(token_view, embedding_view) -> QSplitter:
    """A token table and its embedding table in one splitter, scrolling together (their rows
    are the same tokens)."""
    tables = QSplitter(Qt.Orientation.Horizontal)
    tables.addWidget(token_view)
    tables.addWidget(embedding_view)
    tables.setChildrenCollapsible(False)
    tables.setStretchFactor(0, 2)
    tables.setStretchFactor(1, 3)
    for a, b in ((token_view, embedding_view), (embedding_view, token_view)):
        a.verticalScrollBar().valueChanged.connect(b.verticalScrollBar().setValue)
    return tables


def scrolling(widget) -> QScrollArea:
    """``widget`` in a frameless scroll area that resizes it: a page taller (or wider) than
    its room scrolls instead of pushing the window past a small screen."""
    area = QScrollArea()
    area.setObjectName(f"scroll-{widget.objectName() or type(widget).__name__}")
    area.setWidgetResizable(True)
    area.setFrameShape(QFrame.Shape.NoFrame)
    area.setWidget(widget)
    return area


def form_layout() -> QFormLayout:
    """A form whose long rows wrap and whose fields take the width (the stage pages' forms)."""
    form = QFormLayout()
    form.setContentsMargins(0, 0, 0, 0)
    form.setRowWrapPolicy(QFormLayout.RowWrapPolicy.WrapLongRows)
    form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
    return form


def combo_box(items, tip: str) -> QComboBox:
    """A combo box of ``(key, label)`` items, the key as each item's data."""
    combo = QComboBox()
    for key, label in items:
        combo.addItem(label, key)
    combo.setToolTip(tip)
    combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
    combo.setMinimumContentsLength(10)
    return combo


def select_data(combo: QComboBox, key) -> None:
    """Select the item whose data is ``key`` (else the first), without signals."""
    with QSignalBlocker(combo):
        combo.setCurrentIndex(max(combo.findData(key), 0))


class NumberEdit(QLineEdit):
    """A number typed as text (``1e-5``, ``10000``, ``2**-8``), committed on Enter or when
    the box loses focus. ``committed(value)`` fires for a new finite number; ``invalid(why)``
    for text that is not one (the box then shows the last value again)."""

    committed = Signal(float)
    invalid = Signal(str)

    def __init__(self, tip: str, parent=None):
        super().__init__(parent)
        self.setToolTip(tip)
        self._value: float | None = None
        self.setMinimumWidth(self.fontMetrics().horizontalAdvance("1.0000e-05") + 16)
        self.editingFinished.connect(self._on_finished)

    def value(self) -> float | None:
        return self._value

    def set_value(self, value: float) -> None:
        self._value = float(value)
        text = format_full(value)
        if self.text() != text:
            with QSignalBlocker(self):
                self.setText(text)

    def _on_finished(self) -> None:
        try:
            value = parse_number(self.text())
        except AttnExplorerError as err:
            self.invalid.emit(str(err))
            if self._value is not None:
                self.set_value(self._value)
            return
        if value != self._value:
            self.committed.emit(value)


class StageTable(QWidget):
    """A titled stage table (learned positions, ALiBi slopes, norm rows, W_o) with Import."""

    def __init__(self, document, table: str, title: str, tip: str, one_row: bool = False, parent=None):
        super().__init__(parent)
        self.model = MatrixModel(document, table, parent=self)
        self.view = MatrixTableView(self.model)
        self.view.setToolTip(tip)
        if one_row:  # a vector: its one row, the column numbers and room for a scroll bar, no more
            self.view.hold_one_row()
        self.importer = ImportActions(self, self.view, self.model, linear=False)
        self.title = QLabel(title)
        self.title.setToolTip(tip)
        self.title.setWordWrap(True)
        self.header = QHBoxLayout()
        self.header.setContentsMargins(0, 0, 0, 0)
        self.header.addWidget(self.title, 1)
        self.header.addWidget(tool_button("Import", f"Import {table} from a CSV/NPY file or the clipboard",
                                           menu=self.importer.menu))
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(self.header)
        layout.addWidget(self.view)
