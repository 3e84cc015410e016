"""The Weights page of the Inputs dock: the number of heads, the head shown, d_k, d_v, a seed,
and one table each for W_q, W_k and W_v with its Initialise and Import menus and its bias."""

from __future__ import annotations

from PySide6.QtCore import QSignalBlocker, Qt
from PySide6.QtGui import QAction
from PySide6.QtWidgets import (
    QFormLayout, QHBoxLayout, QLabel, QMenu, QSpinBox, QSplitter, QVBoxLayout, QWidget,
)

from ...core.inputs.session import MAX_DIM, MAX_HEADS
from .. import user_actions
from ..document import SessionDocument
from .widgets import ImportActions, set_spin, spin_box, tool_button
from .table_models import MatrixModel
from .table_view import MatrixTableView


class WeightTable(QWidget):
    """One of W_q / W_k / W_v for the selected head, with Initialise and Import menus."""

    def __init__(self, document: SessionDocument, table: str, seed_spin: QSpinBox, parent=None):
        super().__init__(parent)
        from ...core.inputs.weights import INIT_KINDS

        self.document, self.table, self._seed_spin = document, table, seed_spin
        self.model = MatrixModel(document, table, follow_selection=True, parent=self)
        self.view = MatrixTableView(self.model)
        self.importer = ImportActions(self, self.view, self.model, linear=True)
        self.init_menu = QMenu(self)
        self.init_actions = {}
        for kind, label in INIT_KINDS:
            action = QAction(label, self)
            action.triggered.connect(lambda _=False, k=kind: self.initialise(k))
            self.init_menu.addAction(action)
            self.init_actions[kind] = action
        self.init_menu.aboutToShow.connect(self._update_init_menu)
        cols = "d_k" if table in ("W_q", "W_k") else "d_v"
        self._cols = cols
        self.title = QLabel(f"{table} (d × {cols})")
        self.title.setToolTip(f"{table}: rows are the embedding dimensions, columns the {cols} projected dimensions; "
                              f"Q = X @ W_q (row vectors)")
        from .stages_page import BiasRow

        # The bias under its matrix: b's columns are W's columns (x·W + b).
        self.bias = BiasRow(document, "b" + table[1:], self.view)
        header = QHBoxLayout()
        header.setContentsMargins(0, 0, 0, 0)
        header.addWidget(self.title, 1)
        header.addWidget(self.bias.check)
        header.addWidget(tool_button("Init", f"Initialise {table} for this head", menu=self.init_menu))
        header.addWidget(tool_button("Import", f"Import {table} for this head from a file or the clipboard",
                                      menu=self.importer.menu))
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(header)
        layout.addWidget(self.view, 1)
        layout.addWidget(self.bias)
        document.session_changed.connect(self._update_title)
        document.selection.changed.connect(self._update_title)
        self._update_title()

    def _update_title(self, *_args) -> None:
        """Rows come from the source with cross-attention; a shared K/V head says who shares it."""
        from .stages_page import kv_note

        s = self.document.session
        rows = "d_s" if s.source is not None and self.table != "W_q" else "d"
        note = kv_note(s, self.table, self.model.head)
        text = f"{self.table} ({rows} × {self._cols})" + (f" · {note}" if note else "")
        if self.title.text() != text:
            self.title.setText(text)

    def _update_init_menu(self) -> None:
        m = self.model.array
        self.init_actions["identity"].setEnabled(m.shape[0] == m.shape[1])

    def initialise(self, kind: str) -> bool:
        """Fill this head's table with ``init_weight(kind, ...)`` using the page's seed."""
        return user_actions.initialise_weights(self.document, self.table, kind, self._seed_spin.value(), self.model.head)


class WeightsPage(QWidget):
    """Heads, head selector, d_k, d_v, seed, and the three weight tables."""

    def __init__(self, document: SessionDocument, parent=None):
        super().__init__(parent)
        self.document = document
        self.heads_spin = spin_box(1, MAX_HEADS, "Number of heads (new heads start at zeros)")
        self.head_spin = spin_box(0, 0, "The head whose weights are shown (also selects it in every panel)")
        self.dk_spin = spin_box(1, MAX_DIM, "Query/key width d_k (W_q and W_k)")
        self.dv_spin = spin_box(1, MAX_DIM, "Value width d_v (W_v)")
        self.seed_spin = spin_box(0, 2**31 - 1, "Seed for the random initialisers (torch.manual_seed)")
        self.seed_spin.setValue(123)
        self.heads_spin.valueChanged.connect(self._on_heads_changed)
        self.head_spin.valueChanged.connect(lambda h: document.selection.set(head=h))
        self.dk_spin.valueChanged.connect(lambda v: self._resize("d_k", v))
        self.dv_spin.valueChanged.connect(lambda v: self._resize("d_v", v))

        grid = QFormLayout()
        grid.setContentsMargins(0, 0, 0, 0)
        grid.setRowWrapPolicy(QFormLayout.RowWrapPolicy.WrapLongRows)
        row1 = QHBoxLayout()
        row1.addWidget(self.heads_spin)
        row1.addWidget(QLabel("show"))
        row1.addWidget(self.head_spin)
        row1.addStretch(1)
        grid.addRow("heads", row1)
        row2 = QHBoxLayout()
        row2.addWidget(self.dk_spin)
        row2.addWidget(QLabel("d_v"))
        row2.addWidget(self.dv_spin)
        row2.addStretch(1)
        grid.addRow("d_k", row2)
        row2.insertWidget(row2.count() - 1, QLabel("seed"))
        row2.insertWidget(row2.count() - 1, self.seed_spin, 1)

        self.tables = {t: WeightTable(document, t, self.seed_spin) for t in ("W_q", "W_k", "W_v")}
        splitter = QSplitter(Qt.Orientation.Vertical)
        splitter.setChildrenCollapsible(False)
        for t in self.tables.values():
            splitter.addWidget(t)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addLayout(grid)
        layout.addWidget(splitter)
        layout.addStretch(1)  # room left over goes below, not into empty table rows

        document.session_changed.connect(self._on_session_changed)
        document.selection.changed.connect(self._on_selection_changed)
        self._on_session_changed(document.session)

    def _on_heads_changed(self, heads: int) -> None:
        if heads != self.document.session.heads:
            if not user_actions.set_heads(self.document, heads):
                self._on_session_changed(self.document.session)

    def _resize(self, which: str, value: int) -> None:
        s = self.document.session
        if value == (s.d_k if which == "d_k" else s.d_v):
            return
        change = user_actions.resize_dk if which == "d_k" else user_actions.resize_dv
        if not change(self.document, value):
            self._on_session_changed(self.document.session)

    def _on_session_changed(self, session) -> None:
        # Only what differs: setting a spin box's value again repaints it, and setting its
        # maximum again re-lays out the whole Inputs dock, three weight tables included (a
        # few ms on every cell edit).
        for spin, value in ((self.heads_spin, session.heads), (self.dk_spin, session.d_k), (self.dv_spin, session.d_v)):
            set_spin(spin, value)
        with QSignalBlocker(self.head_spin):
            if self.head_spin.maximum() != session.heads - 1:
                self.head_spin.setMaximum(session.heads - 1)
            self.head_spin.setEnabled(session.heads > 1)
        set_spin(self.head_spin, self.document.selection.current.clamp(session).head)

    def _on_selection_changed(self, selection) -> None:
        set_spin(self.head_spin, selection.head)
