"""The Tokens page of the Inputs dock: the sentence box, the token table and the embedding
table with its width d, its source (manual = zeros, seeded random, or the preset's generator)
and Import…."""

from __future__ import annotations

from PySide6.QtCore import QSignalBlocker
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLineEdit, QVBoxLayout, QWidget

from ...core.errors import AttnExplorerError
from ...core.inputs.session import MAX_DIM
from ...core.inputs.tokenize import detokenize, tokenize
from .. import user_actions
from ..document import SessionDocument
from .widgets import (MAX_SENTENCE_TOKENS, SENTENCE_HINT, ImportActions, rows_form, side_by_side, spin_box,
                            tool_button)
from .table_models import MatrixModel, TokenModel
from .table_view import MatrixTableView

SOURCES = (("manual", "manual (zeros)"), ("seeded", "seeded random"), ("preset", "preset generator"))


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
        self.insert_button = tool_button("+", "Insert a token after the current one",
                                          slot=lambda: self.insert_token())
        self.delete_button = tool_button("−", "Delete the current token", slot=lambda: self.delete_token())
        self.up_button = tool_button("↑", "Move the current token up", slot=lambda: self.move_token(-1))
        self.down_button = tool_button("↓", "Move the current token down", slot=lambda: self.move_token(+1))
        for b in (self.insert_button, self.delete_button, self.up_button, self.down_button):
            buttons.addWidget(b)
        buttons.addStretch(1)

        # Embeddings: width, source, seed, fill, import, then the table.
        self.d_spin = spin_box(1, MAX_DIM, "Embedding width d (every weight table follows)")
        self.d_spin.valueChanged.connect(self._on_d_changed)
        self.source_combo = QComboBox()
        for key, label in SOURCES:
            self.source_combo.addItem(label, key)
        self.source_combo.setToolTip("Where embeddings of new tokens come from")
        self.source_combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.source_combo.setMinimumContentsLength(8)
        self.seed_spin = spin_box(0, 2**31 - 1, "Seed of the seeded random source: each distinct word gets a fixed N(0, 1) vector, like a row of nn.Embedding, chosen by the seed and the word")
        self.seed_spin.setValue(123)
        self.embedding_model = MatrixModel(document, "embeddings", parent=self)
        self.embedding_view = MatrixTableView(self.embedding_model)
        self.embedding_view.bind_token_rows(document)
        self.embedding_import = ImportActions(self, self.embedding_view, self.embedding_model, linear=False)
        fill = tool_button("Fill", "Replace every embedding row from the source", slot=lambda: self.fill_from_source())
        importer = tool_button("Import", "Import the embeddings (n × d) from a CSV/NPY file or the clipboard",
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
        # What the token column's width and the source box last followed: an edit of numbers
        # (a typed cell, a dragged slider) changes neither, and measuring the header, the
        # scroll bar and the fonts again on each one was a third of this page's share of an edit.
        self._width_for = None
        self._source_for = None
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
        from ...core.inputs.presets import get_preset

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
            from ...core.inputs.embeddings import word_embeddings

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
        return min(max(self.document.selection.current.query, 0), self.document.session.n - 1)

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
    def _keep_token_column_readable(self, n: int) -> None:
        """The token table at least as wide as its row numbers (up to ``n``), the "token" title
        and the mask column: beside a wide embedding table, a 4,096-token session's four-digit
        row numbers squeezed the token column to "oke"."""
        view = self.token_view
        metrics = view.fontMetrics()
        rows = metrics.horizontalAdvance(str(max(n - 1, 0))) + 16
        token = metrics.horizontalAdvance("token") + 16
        masked = view.horizontalHeader().sectionSizeHint(1) if self.token_model.columnCount() > 1 else 0
        bar = view.verticalScrollBar().sizeHint().width()
        view.setMinimumWidth(rows + token + masked + bar + 2 * view.frameWidth())

    def _on_session_changed(self, session) -> None:
        width_for = (session.n, self.token_model.columnCount())
        if width_for != self._width_for:
            self._width_for = width_for
            self._keep_token_column_readable(session.n)
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
        if session.preset is self._source_for and session.preset is not None:
            return  # the same preset (an immutable value): its generator and the box as they are
        self._source_for = session.preset
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
