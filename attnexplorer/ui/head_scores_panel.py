"""The model window's Heads tab: colour the model view by a head score, and the heads ranked
by it (click a row to open that head). The scores come from the run that opened the model
(``models.head_scores``, computed during its forward, a block of rows at a time on a long text)."""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (QAbstractItemView, QComboBox, QHBoxLayout, QLabel, QTableWidget, QTableWidgetItem,
                               QVBoxLayout, QWidget)

NONE = "none"


class _Number(QTableWidgetItem):
    """A cell that sorts by its number, not its text."""

    def __init__(self, value: float, text: str):
        super().__init__(text)
        self.value = value
        self.setData(Qt.ItemDataRole.UserRole, value)

    def __lt__(self, other):
        return self.value < getattr(other, "value", 0.0)


class HeadScoresPanel(QWidget):
    coloured = Signal(object, object)   # score name or None, its (layers × heads) values or None
    chosen = Signal(int, int)           # layer, head

    def __init__(self, parent=None):
        super().__init__(parent)
        self.scores: dict[str, np.ndarray] = {}
        self.colour_box = QComboBox()
        self.colour_box.currentTextChanged.connect(self._on_colour)
        self.definition = QLabel("")
        self.definition.setWordWrap(True)
        self.table = QTableWidget(0, 3)
        self.table.setHorizontalHeaderLabels(["layer", "head", "score"])
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.verticalHeader().setVisible(False)
        self.table.horizontalHeader().setStretchLastSection(True)
        self.table.cellClicked.connect(self._on_row)
        row = QHBoxLayout()
        row.addWidget(QLabel("Colour by"))
        row.addWidget(self.colour_box, 1)
        layout = QVBoxLayout(self)
        layout.addLayout(row)
        layout.addWidget(self.definition)
        layout.addWidget(self.table, 1)

    def set_scores(self, scores: dict[str, np.ndarray]) -> None:
        self.scores = dict(scores)
        self.colour_box.blockSignals(True)
        self.colour_box.clear()
        self.colour_box.addItems([NONE, *self.scores])
        self.colour_box.blockSignals(False)
        self._on_colour(NONE)

    def colour_by(self, name: str) -> None:
        self.colour_box.setCurrentText(name)

    def _on_colour(self, name: str) -> None:
        from ..models.head_scores import definition

        values = self.scores.get(name)
        self.definition.setText("Ring each thumbnail by a head score; the heads ranked by it below." if values is None
                                else definition(name) + " Rings: the more orange, the higher.")
        self.table.setSortingEnabled(False)
        self.table.setRowCount(0)
        if values is not None:
            self.table.setHorizontalHeaderLabels(["layer", "head", name])
            order = np.argsort(-values, axis=None, kind="stable")
            self.table.setRowCount(len(order))
            for r, flat in enumerate(order):
                layer, head = divmod(int(flat), values.shape[1])
                value = float(values[layer, head])
                self.table.setItem(r, 0, _Number(layer, f"L{layer}"))
                self.table.setItem(r, 1, _Number(head, f"H{head}"))
                self.table.setItem(r, 2, _Number(value, f"{value:.3f}"))
            self.table.setSortingEnabled(True)
            self.table.sortItems(2, Qt.SortOrder.DescendingOrder)   # enabling sorts by the last column clicked
        self.coloured.emit(None if values is None else name, values)

    def _on_row(self, row: int, _column: int) -> None:
        layer, head = (int(self.table.item(row, c).value) for c in (0, 1))
        self.chosen.emit(layer, head)
