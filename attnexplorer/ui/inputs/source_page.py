"""The Source page of the Inputs: cross-attention's second sequence.

A tick box turns cross-attention on (the source starts as a copy of the tokens and their
embeddings, so nothing changes until it is edited) or off. The source has what the Tokens
page has for the queries: a sentence box (Enter splits it; words that stay keep their rows),
a token table (rename, insert, delete, move; "masked" blocks a source token as a key for every
query: padding is over source positions; the current row is the selected key), the embedding table (source tokens × d_s) with its
own width d_s (W_k and W_v read these rows) and a source for new rows (zeros or seeded
random) with Fill and Import.

A causal or window mask, RoPE and ALiBi need one sequence: turning the source on with one of
them is refused with the reason (the session's own check), and the box snaps back.
"""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import QSignalBlocker
from PySide6.QtWidgets import QCheckBox, QComboBox, QHBoxLayout, QLineEdit, QVBoxLayout, QWidget

from ...core.errors import AttnExplorerError
from ...core.inputs.session import MAX_DIM
from ...core.inputs.tokenize import detokenize, tokenize
from .. import user_actions
from ..document import SessionDocument
from .widgets import MAX_SENTENCE_TOKENS, ImportActions, rows_form, side_by_side, spin_box, tool_button
from .table_models import MatrixModel, TokenMaskModel, blocked_keys
from .table_view import MatrixTableView

SOURCES = (("manual", "manual (zeros)"), ("seeded", "seeded random"))


class SourceTokenModel(TokenMaskModel):
    """The source's tokens; a tick blocks the token as a key for every query (a padding mask
    over source positions)."""

    TOKEN_TIP = "source token {i}: {token!r}"
    BLOCKED_TIP = "Checked: no query may attend to this source token (padding)"

    def read(self, session):
        src = session.source
        if src is None:
            return (), np.zeros(0, dtype=bool)
        return src.tokens, blocked_keys(session.mask, src.n)

    def rename(self, i: int, text: str) -> bool:
        return user_actions.rename_source_token(self.document, i, text)

    def block(self, i: int, want: bool) -> bool:
        return user_actions.toggle_padding(self.document, i)


class SourcePage(QWidget):
    """Cross-attention on/off, the source's sentence box, token table and embedding table."""

    def __init__(self, document: SessionDocument, parent=None):
        super().__init__(parent)
        self.document = document
        self.enabled = QCheckBox("Cross-attention: keys and values from a source")
        self.enabled.setToolTip("Queries come from the tokens, keys and values from this second sequence "
                                "(an encoder's output). Starts as a copy of the tokens.")
        self.enabled.toggled.connect(self._on_enabled)
        self.sentence = QLineEdit()
        self.sentence.setPlaceholderText("Type the source sentence and press Enter")
        self.sentence.setToolTip("Enter splits it into words and punctuation; source tokens that stay keep their rows")
        self.sentence.setClearButtonEnabled(True)
        self.sentence.returnPressed.connect(self._on_sentence_entered)

        self.token_model = SourceTokenModel(document, self)
        self.token_view = MatrixTableView(self.token_model)
        header = self.token_view.horizontalHeader()
        header.setStretchLastSection(False)
        header.setSectionResizeMode(0, header.ResizeMode.Stretch)
        header.setSectionResizeMode(1, header.ResizeMode.ResizeToContents)
        self.embedding_model = MatrixModel(document, "source.embeddings", parent=self)
        self.embedding_view = MatrixTableView(self.embedding_model)
        self.embedding_view.verticalHeader().hide()  # the token table beside it names the rows
        self.importer = ImportActions(self, self.embedding_view, self.embedding_model, linear=False)

        buttons = QHBoxLayout()
        buttons.setContentsMargins(0, 0, 0, 0)
        self.insert_button = tool_button("+", "Insert a source token after the current one", slot=lambda: self.insert_token())
        self.delete_button = tool_button("−", "Delete the current source token", slot=lambda: self.delete_token())
        self.up_button = tool_button("↑", "Move the current source token up", slot=lambda: self.move_token(-1))
        self.down_button = tool_button("↓", "Move the current source token down", slot=lambda: self.move_token(+1))
        for b in (self.insert_button, self.delete_button, self.up_button, self.down_button):
            buttons.addWidget(b)
        buttons.addStretch(1)

        self.d_spin = spin_box(1, MAX_DIM, "Source width d_s: the source's embedding columns (W_k and W_v read them)")
        self.d_spin.valueChanged.connect(self._on_d_changed)
        self.seed_spin = spin_box(0, 2**31 - 1, "Seed of the seeded random rows (a fixed N(0, 1) vector per word)")
        self.seed_spin.setValue(123)
        self.rows_combo = QComboBox()
        for key, label in SOURCES:
            self.rows_combo.addItem(label, key)
        self.rows_combo.setToolTip("Where rows of new source tokens come from")
        self.rows_combo.setCurrentIndex(1)
        fill = tool_button("Fill", "Replace every source row from the chosen rows", slot=lambda: self.fill())
        importer = tool_button("Import", "Import the source embeddings (source tokens × d_s) from a file or the clipboard",
                                menu=self.importer.menu)
        form = rows_form("width d_s", self.d_spin, self.seed_spin, "new rows", self.rows_combo, fill, importer)
        tables = side_by_side(self.token_view, self.embedding_view)

        self.body = QWidget()
        body = QVBoxLayout(self.body)
        body.setContentsMargins(0, 0, 0, 0)
        body.addWidget(self.sentence)
        body.addLayout(buttons)
        body.addLayout(form)
        body.addWidget(tables)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(self.enabled)
        layout.addWidget(self.body)
        layout.addStretch(1)
        # The source's tokens are the keys: the current row is the selected key everywhere.
        self._syncing = False
        self.token_view.selectionModel().currentRowChanged.connect(self._on_current_row)
        document.selection.changed.connect(self._on_selection_changed)
        document.session_changed.connect(self._on_session_changed)
        self._on_session_changed(document.session)

    def _on_current_row(self, current, _previous) -> None:
        if not self._syncing and current.isValid() and self.document.session.source is not None:
            self.document.selection.set(key=current.row())

    def _on_selection_changed(self, selection) -> None:
        key = selection.key
        if key is None or not 0 <= key < self.token_model.rowCount() or self.token_view.currentIndex().row() == key:
            return
        self._syncing = True
        try:
            self.token_view.setCurrentIndex(self.token_model.index(key, 0))
        finally:
            self._syncing = False

    def embed_function(self):
        """``tokens -> (len(tokens), d_s)`` for the chosen rows, or None (zeros)."""
        src = self.document.session.source
        if src is None or self.rows_combo.currentData() != "seeded":
            return None
        from ...core.inputs.embeddings import word_embeddings

        seed, d = self.seed_spin.value(), src.d
        return lambda tokens: word_embeddings(tokens, d, seed=seed)

    # -- changes --------------------------------------------------------------------------------
    def _on_enabled(self, on: bool) -> None:
        if on == (self.document.session.source is not None):
            return
        if not (user_actions.set_source(self.document) if on else user_actions.clear_source(self.document)):
            self._on_session_changed(self.document.session)

    def _on_sentence_entered(self) -> None:
        try:
            tokens = tokenize(self.sentence.text())
        except AttnExplorerError as err:
            self.document.refuse(f"Source sentence not applied: {err}")
            return
        user_actions.set_source_sentence(self.document, tokens, self.embed_function())

    def _current_row(self) -> int:
        src = self.document.session.source
        n = 0 if src is None else src.n
        return min(max(self.token_view.currentIndex().row(), 0), max(n - 1, 0))

    def _select_row(self, row: int) -> None:
        if 0 <= row < self.token_model.rowCount():
            self.token_view.setCurrentIndex(self.token_model.index(row, 0))

    def insert_token(self, text: str = "token") -> bool:
        row = self._current_row() + 1
        if user_actions.insert_source_token(self.document, row, text, self.embed_function()):
            self._select_row(row)
            return True
        return False

    def delete_token(self) -> bool:
        return user_actions.delete_source_token(self.document, self._current_row())

    def move_token(self, step: int) -> bool:
        i = self._current_row()
        if user_actions.move_source_token(self.document, i, i + step):
            self._select_row(i + step)
            return True
        return False

    def fill(self) -> bool:
        return user_actions.fill_source_embeddings(self.document, self.embed_function(), self.rows_combo.currentText())

    def _on_d_changed(self, d: int) -> None:
        src = self.document.session.source
        if src is not None and d != src.d and not user_actions.resize_source_d(self.document, d):
            self._on_session_changed(self.document.session)

    # -- following the document -------------------------------------------------------------------
    def _on_session_changed(self, session) -> None:
        src = session.source
        if self.enabled.isChecked() != (src is not None):
            with QSignalBlocker(self.enabled):
                self.enabled.setChecked(src is not None)
        self.body.setVisible(src is not None)
        if src is None:
            return
        if self.d_spin.value() != src.d:
            with QSignalBlocker(self.d_spin):
                self.d_spin.setValue(src.d)
        try:
            current = tokenize(self.sentence.text())
        except AttnExplorerError:
            current = None
        if current != src.tokens:
            with QSignalBlocker(self.sentence):
                self.sentence.setText(detokenize(src.tokens) if src.n <= MAX_SENTENCE_TOKENS else "")
