"""The input side of the window: sentence, tokens, embeddings and the weight tables.

``InputsPanel(document)`` is a tab widget with four pages that fit a narrow dock:

- **Tokens** — a sentence box (Enter splits it into words and punctuation, see
  ``core.tokenize``; tokens that stay keep their embeddings, new ones get rows from the
  embedding source), the token table (rename, insert, delete, move; the embedding row
  travels with its token; the "masked" box blocks the token as a key), and the embedding
  table (n × d) with its width d, its source (manual = zeros, seeded random — a fixed
  N(0, 1) vector per distinct word —, or the preset's generator) and Import….
- **Weights** — the number of heads, the head shown, d_k, d_v, a seed for the initialisers,
  and one table each for W_q, W_k and W_v with an Initialise menu (seeded torch.rand,
  nn.Linear's default, identity where square, zeros) and an Import menu (file or clipboard,
  as stored (d × cols) or in nn.Linear orientation (cols × d), transposed for you), each
  with its bias as a one-row table under it (``stage_inputs.BiasRow``).
- **Stages** — positions, norm, grouped-query K/V heads, W_o and b_o (``ui/stage_inputs.py``).
- **Source** — cross-attention's source sequence (``ui/source_inputs.py``).

Every change goes through ``document.edit`` as one undo step, or ``document.refuse`` with
the reason; widgets are synced from ``document.session_changed`` with their signals blocked.
"""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import QSignalBlocker, Qt
from PySide6.QtGui import QAction, QGuiApplication
from PySide6.QtWidgets import (
    QComboBox, QFileDialog, QFormLayout, QHBoxLayout, QLabel, QLineEdit, QMenu, QSizePolicy,
    QSpinBox, QSplitter, QTabWidget, QToolButton, QVBoxLayout, QWidget,
)

from ..core.errors import AttnExplorerError
from ..core.session import MAX_DIM, MAX_HEADS
from ..core.tokenize import detokenize, tokenize
from .document import SessionDocument
from . import user_actions
from .models import MatrixModel, TokenModel
from .table_view import MatrixTableView

MATRIX_FILTER = "Matrices (*.csv *.tsv *.txt *.npy);;All files (*)"
MIN_WIDTH = 280
SOURCES = (("manual", "manual (zeros)"), ("seeded", "seeded random"), ("preset", "preset generator"))


def read_matrix_file(path) -> np.ndarray:
    """A 2-D float64 matrix from a CSV/TSV/TXT (labels allowed) or NPY (no pickle) file."""
    from ..io.matrices import read_matrix

    return read_matrix(path)


# Beyond this many tokens the sentence box stays blank (its placeholder says why): a line of
# thousands of tokens can be neither read nor edited.
MAX_SENTENCE_TOKENS = 512
SENTENCE_HINT = "Type a sentence and press Enter"


def _tool_button(text: str, tip: str, menu: QMenu | None = None, slot=None) -> QToolButton:
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


def _spin(minimum: int, maximum: int, tip: str) -> QSpinBox:
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
        from ..io.matrix_text import parse_matrix_text

        try:
            matrix = parse_matrix_text(text)
        except AttnExplorerError as err:
            self.model.document.refuse(f"Import from the clipboard refused: {err}")
            return False
        return self.model.import_matrix(matrix, transpose=transpose, source="the clipboard")


class TokensPage(QWidget):
    """Sentence box, token table and embedding table."""

    def __init__(self, document: SessionDocument, parent=None):
        super().__init__(parent)
        self.document = document
        session = document.session

        self.sentence = QLineEdit()
        self._tokenized: tuple[str | None, tuple | None] = (None, None)  # (text, its tokens) last seen
        self.sentence.setPlaceholderText(SENTENCE_HINT)
        self.sentence.setToolTip("Enter splits the sentence into words and punctuation. Tokens that stay "
                                 "keep their embeddings; new ones get rows from the embedding source.")
        self.sentence.setClearButtonEnabled(True)
        self.sentence.returnPressed.connect(self._on_sentence_entered)

        self.token_model = TokenModel(document, self)
        self.token_view = MatrixTableView(self.token_model)
        self.token_view.horizontalHeader().setStretchLastSection(False)
        self.token_view.horizontalHeader().setSectionResizeMode(0, self.token_view.horizontalHeader().ResizeMode.Stretch)
        self.token_view.horizontalHeader().setSectionResizeMode(1, self.token_view.horizontalHeader().ResizeMode.ResizeToContents)
        self.token_view.bind_token_rows(document)
        # With a padding mask, clicking a token's row header pads (or frees) it as a key.
        self.token_view.verticalHeader().sectionClicked.connect(self._on_token_header_clicked)

        buttons = QHBoxLayout()
        buttons.setContentsMargins(0, 0, 0, 0)
        self.insert_button = _tool_button("+", "Insert a token after the current one",
                                          slot=lambda: self.insert_token())
        self.delete_button = _tool_button("−", "Delete the current token", slot=lambda: self.delete_token())
        self.up_button = _tool_button("↑", "Move the current token up", slot=lambda: self.move_token(-1))
        self.down_button = _tool_button("↓", "Move the current token down", slot=lambda: self.move_token(+1))
        for b in (self.insert_button, self.delete_button, self.up_button, self.down_button):
            buttons.addWidget(b)
        buttons.addStretch(1)

        # Embeddings: width, source, seed, fill, import, then the table.
        self.d_spin = _spin(1, MAX_DIM, "Embedding width d (every weight table follows)")
        self.d_spin.valueChanged.connect(self._on_d_changed)
        self.source_combo = QComboBox()
        for key, label in SOURCES:
            self.source_combo.addItem(label, key)
        self.source_combo.setToolTip("Where embeddings of new tokens come from")
        self.source_combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.source_combo.setMinimumContentsLength(8)
        self.seed_spin = _spin(0, 2**31 - 1, "Seed of the seeded random source: each distinct word gets a fixed N(0, 1) vector, like a row of nn.Embedding, chosen by the seed and the word")
        self.seed_spin.setValue(123)
        self.embedding_model = MatrixModel(document, "embeddings", parent=self)
        self.embedding_view = MatrixTableView(self.embedding_model)
        self.embedding_view.bind_token_rows(document)
        self.embedding_import = ImportActions(self, self.embedding_view, self.embedding_model, linear=False)
        fill = _tool_button("Fill", "Replace every embedding row from the source", slot=lambda: self.fill_from_source())
        importer = _tool_button("Import", "Import the embeddings (n × d) from a CSV/NPY file or the clipboard",
                                menu=self.embedding_import.menu)

        form = rows_form("embeddings d", self.d_spin, self.seed_spin, "source", self.source_combo, fill, importer)
        # The token table and the embedding table side by side: their rows are the same
        # tokens, so they line up (and scroll together), and a walkthrough's sentence fits
        # in both without scrolling at 1280×800.
        tables = side_by_side(self.token_view, self.embedding_view)
        self.embedding_view.verticalHeader().hide()  # the token table beside it names the rows

        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(self.sentence)
        layout.addLayout(buttons)
        layout.addLayout(form)
        layout.addWidget(tables)
        layout.addStretch(1)  # room left over goes below, not into empty table rows

        self._preset_name = None
        document.session_changed.connect(self._on_session_changed)
        self._on_session_changed(session)

    # -- the embedding source ------------------------------------------------------------------
    def source(self) -> str:
        return self.source_combo.currentData()

    def set_source(self, key: str) -> None:
        index = self.source_combo.findData(key)
        if index >= 0 and self.source_combo.model().item(index).isEnabled():
            self.source_combo.setCurrentIndex(index)

    def _preset(self):
        ref = self.document.session.preset
        if ref is None:
            return None
        from ..core.presets import get_preset

        try:
            preset = get_preset(ref.name)
        except AttnExplorerError:
            return None
        return preset if preset.embed is not None else None

    def embed_function(self):
        """``tokens -> (len(tokens), d)`` for the current source, or None (zeros)."""
        session = self.document.session
        d = session.d
        kind = self.source()
        if kind == "seeded":
            from ..core.embeddings import word_embeddings

            seed = self.seed_spin.value()
            return lambda tokens: word_embeddings(tokens, d, seed=seed)
        if kind == "preset":
            preset = self._preset()
            if preset is not None:
                params = dict(session.preset.params)
                return lambda tokens: preset.embed(tuple(tokens), d, params)
        return None

    def _on_token_header_clicked(self, row: int) -> None:
        # In cross-attention padding blocks source tokens, which this table does not list.
        if self.document.session.mask.kind == "padding" and self.document.session.source is None:
            user_actions.toggle_padding(self.document, row)

    # -- token edits --------------------------------------------------------------------------
    def _on_sentence_entered(self) -> None:
        try:
            tokens = tokenize(self.sentence.text())
        except AttnExplorerError as err:
            self.document.refuse(f"Sentence not applied: {err}")
            return
        user_actions.set_sentence(self.document, tokens, self.embed_function())

    def _current_row(self) -> int:
        return min(max(self.document.selection.query, 0), self.document.session.n - 1)

    def insert_token(self, text: str = "token") -> bool:
        """Insert ``text`` after the current token, with a row from the embedding source."""
        return user_actions.insert_token(self.document, self._current_row() + 1, text, self.embed_function())

    def delete_token(self) -> bool:
        return user_actions.delete_token(self.document, self._current_row())

    def move_token(self, step: int) -> bool:
        i = self._current_row()
        return user_actions.move_token(self.document, i, i + step)

    def fill_from_source(self) -> bool:
        """Replace every embedding row from the current source (manual = zeros)."""
        return user_actions.fill_embeddings(self.document, self.embed_function(), self.source_combo.currentText())

    def _on_d_changed(self, d: int) -> None:
        if d != self.document.session.d:
            if not user_actions.resize_d(self.document, d):
                with QSignalBlocker(self.d_spin):
                    self.d_spin.setValue(self.document.session.d)

    # -- following the document ---------------------------------------------------------------
    def _on_session_changed(self, session) -> None:
        if self.d_spin.value() != session.d:  # setting the same value again still repaints
            with QSignalBlocker(self.d_spin):
                self.d_spin.setValue(session.d)
        text = self.sentence.text()
        if self._tokenized[0] != text:  # tokenizing 512 words on every frame of a fit costs ms
            try:
                self._tokenized = (text, tokenize(text))
            except AttnExplorerError:
                self._tokenized = (text, None)
        current = self._tokenized[1]
        if current != session.tokens:
            with QSignalBlocker(self.sentence):
                self.sentence.setText(detokenize(session.tokens) if session.n <= MAX_SENTENCE_TOKENS else "")
        # A blank box must say why: too many tokens to edit as one line of text.
        self.sentence.setPlaceholderText(
            SENTENCE_HINT if session.n <= MAX_SENTENCE_TOKENS else
            f"{session.n:,} tokens are too many to show as a sentence; edit them in the table below, "
            "or type a new sentence and press Enter")
        has_generator = self._preset() is not None
        item = self.source_combo.model().item(self.source_combo.findData("preset"))
        item.setEnabled(has_generator)
        name = session.preset.name if session.preset else None
        with QSignalBlocker(self.source_combo):
            if name != self._preset_name:
                # A new preset: its own generator is the natural source for new tokens.
                self._preset_name = name
                self.set_source("preset" if has_generator else "seeded")
            elif self.source() == "preset" and not has_generator:
                self.set_source("seeded")


class WeightTable(QWidget):
    """One of W_q / W_k / W_v for the selected head, with Initialise and Import menus."""

    def __init__(self, document: SessionDocument, table: str, seed_spin: QSpinBox, parent=None):
        super().__init__(parent)
        from ..core.weights import INIT_KINDS

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
        from .stage_inputs import BiasRow

        # The bias under its matrix: b's columns are W's columns (x·W + b).
        self.bias = BiasRow(document, "b" + table[1:], self.view)
        header = QHBoxLayout()
        header.setContentsMargins(0, 0, 0, 0)
        header.addWidget(self.title, 1)
        header.addWidget(self.bias.check)
        header.addWidget(_tool_button("Init", f"Initialise {table} for this head", menu=self.init_menu))
        header.addWidget(_tool_button("Import", f"Import {table} for this head from a file or the clipboard",
                                      menu=self.importer.menu))
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(header)
        layout.addWidget(self.view, 1)
        layout.addWidget(self.bias)
        document.session_changed.connect(self._update_title)
        document.selection_changed.connect(self._update_title)
        self._update_title()

    def _update_title(self, *_args) -> None:
        """Rows come from the source with cross-attention; a shared K/V head says who shares it."""
        from .stage_inputs import kv_note

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
        self.heads_spin = _spin(1, MAX_HEADS, "Number of heads (new heads start at zeros)")
        self.head_spin = _spin(0, 0, "The head whose weights are shown (also selects it in every panel)")
        self.dk_spin = _spin(1, MAX_DIM, "Query/key width d_k (W_q and W_k)")
        self.dv_spin = _spin(1, MAX_DIM, "Value width d_v (W_v)")
        self.seed_spin = _spin(0, 2**31 - 1, "Seed for the random initialisers (torch.manual_seed)")
        self.seed_spin.setValue(123)
        self.heads_spin.valueChanged.connect(self._on_heads_changed)
        self.head_spin.valueChanged.connect(lambda h: document.set_selection(head=h))
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
        document.selection_changed.connect(self._on_selection_changed)
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
            _set_spin(spin, value)
        with QSignalBlocker(self.head_spin):
            if self.head_spin.maximum() != session.heads - 1:
                self.head_spin.setMaximum(session.heads - 1)
            self.head_spin.setEnabled(session.heads > 1)
        _set_spin(self.head_spin, self.document.selection.clamp(session).head)

    def _on_selection_changed(self, selection) -> None:
        _set_spin(self.head_spin, selection.head)


def _set_spin(spin: QSpinBox, value: int) -> None:
    """``spin.setValue(value)`` with its signals blocked, only when it differs."""
    if spin.value() != value:
        with QSignalBlocker(spin):
            spin.setValue(value)


class InputsPanel(QTabWidget):
    """Tokens & embeddings / Weights / Stages / Source, for the window's Inputs dock."""

    def __init__(self, document: SessionDocument, parent=None):
        super().__init__(parent)
        self.document = document
        self.tokens = TokensPage(document)
        self.weights = WeightsPage(document)
        self.addTab(self.tokens, "Tokens")
        self.addTab(self.weights, "Weights")
        from .source_inputs import SourcePage
        from .stage_inputs import StagesPage

        self.stages = StagesPage(document)
        self.source = SourcePage(document)
        self.addTab(self.stages, "Stages")
        self.addTab(self.source, "Source")
        self.setDocumentMode(True)
        # Below this the tables and their buttons clip; the window's dock cannot squeeze it further.
        self.setMinimumWidth(MIN_WIDTH)
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Expanding)


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
