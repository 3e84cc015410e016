"""Table models over the session's arrays: embeddings, one head of W_q / W_k / W_v, the
stages' tables (biases, norm, learned positions, ALiBi slopes, the source's embeddings), tokens.

Each model reads the document's current session and never holds its own copy of the
numbers: ``data()`` indexes the session's read-only numpy array, so a 4,096-row table costs
nothing until rows are scrolled into view. Edits go through ``user_actions`` (one undo step;
typing into one cell again and again merges into one step via a per-cell merge key). A refused edit returns False from ``setData`` and reports
its reason with ``document.refuse`` — no dialogs here.

The models follow ``document.session_changed``: a change of shape is one model reset, a
change of values is one ``dataChanged`` over the changed rectangle, and a new session whose
arrays hold the same values (a preset rebuilt while a slider is dragged) emits nothing.
"""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import QAbstractTableModel, QModelIndex, Qt

from ...core.editing import edits, stage_tables
from ...core.errors import SessionError
from ...core.inputs.session_arrays import derived_from
from ...core.numbers.expr import format_compact, format_full
from .. import user_actions
from ..document import SessionDocument

_RIGHT = int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)

# What the rows and columns of each table are, for header tooltips.
_AXES = {
    "embeddings": ("token", "embedding dimension"),
    "W_q": ("input dimension (of d)", "query dimension (of d_k)"),
    "W_k": ("input dimension (of d)", "key dimension (of d_k)"),
    "W_v": ("input dimension (of d)", "value dimension (of d_v)"),
    "W_o": ("concatenated value dimension", "output dimension"),
    "b_q": ("query bias", "query dimension (of d_k)"),
    "b_k": ("key bias", "key dimension (of d_k)"),
    "b_v": ("value bias", "value dimension (of d_v)"),
    "b_o": ("output bias", "output dimension"),
    "norm.weight": ("norm weight (scale)", "embedding dimension"),
    "norm.bias": ("norm bias (shift)", "embedding dimension"),
    "positions.table": ("position", "embedding dimension"),
    "positions.slopes": ("ALiBi slope", "head"),
    "source.embeddings": ("source token", "source embedding dimension"),
}
_EMPTY = np.zeros((0, 0))
_EMPTY.flags.writeable = False
_GREY = None  # set on first use: a QColor needs the GUI module loaded


def _matrix(session, table: str, head: int) -> np.ndarray:
    """What ``table`` shows for ``head``, or an empty table when the session has none of it
    (no norm, no source, positions of another kind): a stage turned off empties its table."""
    try:
        return stage_tables.table_matrix(session, table, head)
    except SessionError:
        return _EMPTY


class MatrixModel(QAbstractTableModel):
    """One editable 2-D table of the session: ``"embeddings"``, a head of ``"W_q"``, a bias,
    ... (any of ``core.editing.stage_tables.TABLES``).

    ``head`` picks the head of a per-head table; with ``follow_selection`` the model shows
    the document's selected head. Compact numbers (4 significant digits) are displayed; the
    editor and tooltip get full precision. A table the session does not have (a stage that
    is off) has no rows; a bias that is absent shows its zeros in grey, and typing into it
    adds it.
    """

    def __init__(self, document: SessionDocument, table: str, head: int = 0,
                 follow_selection: bool = False, parent=None):
        super().__init__(parent)
        stage_tables.has_table(document.session, table)  # raises early on an unknown table
        self.document = document
        self.table = table
        self._head = head
        self._session = document.session
        if follow_selection:
            self._head = document.selection.current.head
            document.selection.changed.connect(self._on_selection_changed)
        self._array = _matrix(self._session, table, self._head)
        self._stored = stage_tables.is_stored(self._session, table)
        self._source_tokens = None if self._session.source is None else self._session.source.tokens
        document.session_changed.connect(self._on_session_changed)

    # -- reading --------------------------------------------------------------------------
    @property
    def head(self) -> int:
        return self._head

    @property
    def array(self) -> np.ndarray:
        """The matrix shown (read-only): rows × columns of this table and head."""
        return self._array

    def rowCount(self, parent=QModelIndex()) -> int:
        return 0 if parent.isValid() else self._array.shape[0]

    def columnCount(self, parent=QModelIndex()) -> int:
        return 0 if parent.isValid() else self._array.shape[1]

    def data(self, index, role=Qt.ItemDataRole.DisplayRole):
        if not index.isValid():
            return None
        if role == Qt.ItemDataRole.DisplayRole:
            return format_compact(self._array[index.row(), index.column()])
        if role == Qt.ItemDataRole.EditRole:
            return format_full(self._array[index.row(), index.column()])
        if role == Qt.ItemDataRole.ToolTipRole:
            r, c = index.row(), index.column()
            tip = f"{stage_tables.cell_name(self._session, self.table, r, c, self._head)} = {format_full(self._array[r, c])}"
            return tip if self._stored else f"{tip} (absent, so this default; type a number to set it)"
        if role == Qt.ItemDataRole.TextAlignmentRole:
            return _RIGHT
        if role == Qt.ItemDataRole.ForegroundRole and not self._stored:
            return _grey()
        return None

    @property
    def stored(self) -> bool:
        """Whether the table holds its own numbers, not an absent stage's default (zeros)."""
        return self._stored

    def headerData(self, section, orientation, role=Qt.ItemDataRole.DisplayRole):
        if role == Qt.ItemDataRole.DisplayRole:
            if orientation == Qt.Orientation.Vertical:
                if self.table == "embeddings" and 0 <= section < self._session.n:
                    return f"{section} {self._session.tokens[section]}"
                source = self._session.source
                if self.table == "source.embeddings" and source is not None and 0 <= section < source.n:
                    return f"{section} {source.tokens[section]}"
                if self._array.shape[0] == 1 and self.table in stage_tables.BIASES:
                    return "b"  # a bias row under its matrix, in the matrix's narrow row header
                if self._array.shape[0] == 1 and self.table in stage_tables.STAGE_TABLES:
                    return self.table.split(".")[-1]  # a one-row table: its row is the vector
            return str(section)
        if role == Qt.ItemDataRole.ToolTipRole:
            if orientation == Qt.Orientation.Vertical and self.table in stage_tables.BIASES:
                return f"{self.table}, the bias added to every row"
            rows, cols = _AXES[self.table]
            return f"{rows if orientation == Qt.Orientation.Vertical else cols} {section}"
        return None

    def flags(self, index):
        if not index.isValid():
            return Qt.ItemFlag.NoItemFlags
        return Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsSelectable | Qt.ItemFlag.ItemIsEditable

    # -- editing (each one undo step, through user_actions) -----------------------------------
    def setData(self, index, value, role=Qt.ItemDataRole.EditRole) -> bool:
        if not index.isValid() or role != Qt.ItemDataRole.EditRole:
            return False
        text = value if isinstance(value, str) else str(value)
        return user_actions.set_cell(self.document, self.table, index.row(), index.column(), text, self._head)

    def prepare_edit(self) -> bool:
        """A cell's editor opened: get this table's array ready for the edit it will make
        (``core.editing.edits.prepare_edit``); True when that is under way or done."""
        return edits.prepare_edit(self._session, self.table)

    def paste_text(self, top: int, left: int, text: str) -> bool:
        """Paste a block of text at (top, left) as one undo step; refuse (and say why) if it
        cannot be read or does not fit."""
        return user_actions.paste_text(self.document, self.table, top, left, text, self._head)

    def paste_block(self, top: int, left: int, block) -> bool:
        return user_actions.paste_block(self.document, self.table, top, left, block, self._head)

    def import_matrix(self, matrix, transpose: bool = False, source: str = "") -> bool:
        """Replace this table (this head) with ``matrix`` (``transpose`` for nn.Linear's
        ``(out, in)`` orientation), as one undo step; a shape mismatch is refused."""
        return user_actions.import_matrix(self.document, self.table, matrix, self._head, transpose, source)

    def fill(self, matrix, text: str) -> bool:
        """Replace this table with ``matrix`` (same shape) as one undo step named ``text``."""
        return user_actions.fill_matrix(self.document, self.table, matrix, text, self._head)

    def _label(self) -> str:
        return user_actions.table_label(self._session, self.table, self._head)

    # -- following the document --------------------------------------------------------------
    def set_head(self, head: int) -> None:
        head = min(max(int(head), 0), self._session.heads - 1)
        if head != self._head:
            self._head = head
            self._sync(self._session, tokens_changed=False)

    def _on_selection_changed(self, selection) -> None:
        self.set_head(selection.head)

    def _on_session_changed(self, session) -> None:
        tokens_changed = session.tokens != self._session.tokens
        self._head = min(self._head, session.heads - 1)
        self._sync(session, tokens_changed)

    def _sync(self, session, tokens_changed: bool) -> None:
        new = _matrix(session, self.table, self._head)
        old = self._array
        stored, was_stored = stage_tables.is_stored(session, self.table), self._stored
        source_tokens, old_source_tokens = (None if session.source is None else session.source.tokens), self._source_tokens
        self._source_tokens = source_tokens
        if new.shape != old.shape:
            self.beginResetModel()
            self._session, self._array, self._stored = session, new, stored
            self.endResetModel()
            return
        self._session, self._array, self._stored = session, new, stored
        if stored != was_stored and new.size:  # grey ↔ black: every cell's colour changed
            self.dataChanged.emit(self.index(0, 0), self.index(new.shape[0] - 1, new.shape[1] - 1))
        if not _same_view(new, old):
            changed = changed_cells(new, old)
            if changed is None:
                changed = changed_box(new, old)
            if changed is not None and changed[0].size:
                rows, cols = changed
                self.dataChanged.emit(self.index(int(rows.min()), int(cols.min())),
                                      self.index(int(rows.max()), int(cols.max())))
        if (tokens_changed and self.table == "embeddings") or (
                self.table == "source.embeddings" and source_tokens != old_source_tokens):
            self.headerDataChanged.emit(Qt.Orientation.Vertical, 0, new.shape[0] - 1)
        # Nothing else: the column headers are indices, the same for every head and value, so
        # a value-only edit (a dragged preset slider rebuilds equal arrays) costs no signal.


def _same_view(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether ``a`` and ``b`` show the same numbers of one session array (``W_k[head]`` of a
    session whose edit touched W_q): session arrays never change, so no comparison of the
    262,144 cells of a 512 × 512 head is needed."""
    if a is b:
        return True
    return (isinstance(a.base, np.ndarray) and a.base is b.base and not a.base.flags.writeable
            and a.shape == b.shape and a.strides == b.strides
            and a.__array_interface__["data"][0] == b.__array_interface__["data"][0])


def changed_box(new: np.ndarray, old: np.ndarray):
    """``(rows, cols)`` that differ anywhere, whose ranges bound every changed cell: a model's
    layer opened at 4,096 tokens changes every cell of its tables, and listing each changed
    cell (``np.nonzero``) cost 23 ms for the 4,096 × 576 embeddings here, this 4 ms."""
    if new.size == 0:
        return None
    differ = new != old
    rows = np.flatnonzero(differ.any(axis=1))
    return (rows, np.flatnonzero(differ.any(axis=0))) if rows.size else None


def changed_cells(new: np.ndarray, old: np.ndarray):
    """``(rows, cols)`` of the cells where ``new`` differs from ``old``, in O(cells changed),
    when ``new`` shows the same cells as ``old`` of an array that an edit made from ``old``'s
    (``core.inputs.session.derived_from``: a one-cell edit of W_q tells which of its 4 million
    numbers it changed); None when that is not known (then the caller compares the two)."""
    # A table that is a whole session array is its own base (a copy-on-write copy's ``base`` is
    # its memory mapping, not an array).
    new_base = new.base if isinstance(new.base, np.ndarray) else new
    old_base = old.base if isinstance(old.base, np.ndarray) else old
    if new.shape != old.shape or new.strides != old.strides:
        return None
    known = derived_from(new_base)
    if known is None or known[0] is not old_base or new_base.shape != old_base.shape:
        return None
    item = new.itemsize
    start = new.__array_interface__["data"][0] - new_base.__array_interface__["data"][0]
    if start != old.__array_interface__["data"][0] - old_base.__array_interface__["data"][0]:
        return None
    if not new_base.flags.c_contiguous or new.ndim != 2 or start % item or any(s % item for s in new.strides):
        return None
    flat = np.asarray(known[1], dtype=np.int64) - start // item  # positions from new[0, 0]
    row_step, col_step = (s // item for s in new.strides)
    rows_n, cols_n = new.shape
    if rows_n > 1 and cols_n > 1 and not (col_step > 0 and row_step >= col_step * cols_n):
        return None  # not rows of cells one after another: let the caller compare
    if rows_n > 1 and row_step <= 0 or cols_n > 1 and col_step <= 0:
        return None
    rows = flat // row_step if rows_n > 1 else np.zeros_like(flat)
    rest = flat - rows * row_step if rows_n > 1 else flat
    cols = rest // col_step if cols_n > 1 else np.zeros_like(flat)
    inside = (flat >= 0) & (rows >= 0) & (rows < rows_n) & (cols >= 0) & (cols < cols_n) & (rest - cols * col_step == 0)
    rows, cols = rows[inside], cols[inside]
    differ = new[rows, cols] != old[rows, cols]  # an edit may have written the same number
    return rows[differ], cols[differ]


def _grey():
    global _GREY
    if _GREY is None:
        from PySide6.QtGui import QColor

        _GREY = QColor(128, 128, 128)
    return _GREY


def blocked_keys(mask, n: int) -> np.ndarray:
    """Which of ``n`` keys the mask blocks for every query (a padding mask, or a custom mask's
    all-blocked columns): the tick boxes of a token table."""
    out = np.zeros(n, dtype=bool)
    if mask.kind == "padding":
        out[list(mask.padding)] = True
    elif mask.kind == "custom":
        out = mask.blocked.all(axis=0)
    return out


class TokenMaskModel(QAbstractTableModel):
    """A token list: column 0 the token's text (editable), column 1 a check box that blocks the
    token as a key for every query (padding). A subclass says which tokens (``read``), what a
    rename and a tick do, and its tooltips."""

    TEXT, BLOCKED = 0, 1
    TOKEN_TIP = "token {i}: {token!r}"
    BLOCKED_TIP = ""

    def __init__(self, document: SessionDocument, parent=None):
        super().__init__(parent)
        self.document = document
        self._session = document.session
        self._tokens, self._blocked = self.read(self._session)
        document.session_changed.connect(self._on_session_changed)

    def read(self, session) -> tuple[tuple, np.ndarray]:
        """The tokens shown and which of them are blocked as keys."""
        raise NotImplementedError

    def rename(self, i: int, text: str) -> bool:
        raise NotImplementedError

    def block(self, i: int, want: bool) -> bool:
        raise NotImplementedError

    def checkable(self) -> bool:
        return True

    def rowCount(self, parent=QModelIndex()) -> int:
        return 0 if parent.isValid() else len(self._tokens)

    def columnCount(self, parent=QModelIndex()) -> int:
        return 0 if parent.isValid() else 2

    def data(self, index, role=Qt.ItemDataRole.DisplayRole):
        if not index.isValid():
            return None
        i = index.row()
        if index.column() == self.TEXT:
            if role in (Qt.ItemDataRole.DisplayRole, Qt.ItemDataRole.EditRole):
                return self._tokens[i]
            if role == Qt.ItemDataRole.ToolTipRole:
                return self.TOKEN_TIP.format(i=i, token=self._tokens[i])
            return None
        if role == Qt.ItemDataRole.CheckStateRole:
            return Qt.CheckState.Checked if self._blocked[i] else Qt.CheckState.Unchecked
        if role == Qt.ItemDataRole.ToolTipRole:
            return self.BLOCKED_TIP
        return None

    def headerData(self, section, orientation, role=Qt.ItemDataRole.DisplayRole):
        if role != Qt.ItemDataRole.DisplayRole:
            return None
        if orientation == Qt.Orientation.Horizontal:
            return ("token", "masked")[section] if 0 <= section < 2 else None
        return str(section)

    def flags(self, index):
        if not index.isValid():
            return Qt.ItemFlag.NoItemFlags
        base = Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsSelectable
        if index.column() == self.TEXT:
            return base | Qt.ItemFlag.ItemIsEditable
        if not self.checkable():
            return Qt.ItemFlag.ItemIsSelectable
        return base | Qt.ItemFlag.ItemIsUserCheckable

    def setData(self, index, value, role=Qt.ItemDataRole.EditRole) -> bool:
        if not index.isValid():
            return False
        i = index.row()
        if index.column() == self.TEXT and role == Qt.ItemDataRole.EditRole:
            return self.rename(i, str(value))
        if index.column() == self.BLOCKED and role == Qt.ItemDataRole.CheckStateRole:
            want = Qt.CheckState(value) == Qt.CheckState.Checked if not isinstance(value, bool) else value
            if want == bool(self._blocked[i]):
                return True
            return self.block(i, want)
        return False

    def _on_session_changed(self, session) -> None:
        could_tick = self.checkable()
        self._session = session
        tokens, blocked = self.read(session)
        if len(tokens) != len(self._tokens):
            self.beginResetModel()
            self._tokens, self._blocked = tokens, blocked
            self.endResetModel()
            return
        changed = (tokens != self._tokens or not np.array_equal(blocked, self._blocked)
                   or could_tick != self.checkable())
        self._tokens, self._blocked = tokens, blocked
        if changed and tokens:
            self.dataChanged.emit(self.index(0, 0), self.index(len(tokens) - 1, 1))


class TokenModel(TokenMaskModel):
    """The session's tokens; a tick blocks the token as a key for every query (padding; see
    ``edits.toggle_padding``). With a source (cross-attention) these tokens are queries only."""

    BLOCKED_TIP = "Checked: no query may attend to this token (a padding key)"

    def read(self, session):
        blocked = np.zeros(session.n, dtype=bool) if session.source is not None else blocked_keys(session.mask, session.n)
        return session.tokens, blocked

    def checkable(self) -> bool:
        return self._session.source is None  # cross-attention: these tokens are queries, never keys

    def rename(self, i: int, text: str) -> bool:
        return user_actions.rename_token(self.document, i, text)

    def block(self, i: int, want: bool) -> bool:
        if self._session.source is not None:
            self.document.refuse("With a source (cross-attention) the keys are the source's tokens: "
                                 "these tokens are queries and cannot be padding")
            return False
        return user_actions.set_padding(self.document, i, want)

    def headerData(self, section, orientation, role=Qt.ItemDataRole.DisplayRole):
        if (role == Qt.ItemDataRole.ToolTipRole and orientation == Qt.Orientation.Horizontal
                and section == self.BLOCKED):
            return "Block this token as a key for every query (padding)"
        return super().headerData(section, orientation, role)
