"""Table models: Qt's model checks, keyboard editing, paste/copy, undo, refusals."""

import numpy as np
import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QLineEdit

from attnexplorer.core.inputs.session import Mask, Session
from attnexplorer.ui.document import SessionDocument
from attnexplorer.ui.inputs.table_models import MatrixModel, TokenModel
from attnexplorer.ui.inputs.table_view import MatrixTableView


def make_session(n=3, d=2, dk=3, dv=2, heads=1):
    rng = np.random.default_rng(1)
    return Session(tokens=tuple(f"w{i}" for i in range(n)), embeddings=rng.normal(size=(n, d)),
                   w_query=rng.normal(size=(heads, d, dk)), w_key=rng.normal(size=(heads, d, dk)),
                   w_value=rng.normal(size=(heads, d, dv)))


@pytest.fixture
def doc(qtbot):
    d = SessionDocument(make_session(heads=2))
    yield d
    d.shutdown()


def test_models_pass_qt_model_checks(qtmodeltester, doc):
    for model in (MatrixModel(doc, "embeddings"), MatrixModel(doc, "W_q", follow_selection=True),
                  MatrixModel(doc, "W_v", head=1), TokenModel(doc)):
        qtmodeltester.check(model, force_py=True)


def test_display_is_compact_editor_is_exact(doc):
    model = MatrixModel(doc, "W_k")
    idx = model.index(1, 2)
    value = doc.session.w_key[0, 1, 2]
    assert model.data(idx) == f"{value:.4g}"
    assert float(model.data(idx, Qt.ItemDataRole.EditRole)) == value
    assert repr(float(value)) in model.data(idx, Qt.ItemDataRole.ToolTipRole)
    assert model.headerData(0, Qt.Orientation.Vertical) == "0"
    assert MatrixModel(doc, "embeddings").headerData(2, Qt.Orientation.Vertical) == "2 w2"


def _type_into_cell(qtbot, view, row, col, text):
    view.setCurrentIndex(view.model().index(row, col))
    view.setFocus()
    qtbot.keyClick(view, Qt.Key.Key_F2)
    editor = view.findChild(QLineEdit)
    assert editor is not None and editor.isVisible()
    editor.selectAll()
    qtbot.keyClicks(editor, text)
    qtbot.keyClick(editor, Qt.Key.Key_Return)
    # The delegate commits on a queued call after Return; wait for the editor to close.
    qtbot.waitUntil(lambda: view.state() != view.State.EditingState, timeout=5000)


def test_typing_arithmetic_into_a_cell_is_one_merged_undo_step(qtbot, doc):
    model = MatrixModel(doc, "W_q", follow_selection=True)
    view = MatrixTableView(model)
    qtbot.addWidget(view)
    view.show()
    before = doc.session
    _type_into_cell(qtbot, view, 1, 0, "sqrt(2)")
    assert doc.session.w_query[0, 1, 0] == pytest.approx(2 ** 0.5)
    _type_into_cell(qtbot, view, 1, 0, "-1/3")
    assert doc.session.w_query[0, 1, 0] == pytest.approx(-1 / 3)
    assert doc.undo_stack.count() == 1  # the same cell twice: one step
    assert doc.undo_stack.undoText() == "Edit W_q[1,0] (head 0)"
    assert model.data(model.index(1, 0)) == "-0.3333"
    assert doc.compute.wait_idle()
    assert np.allclose(doc.result.Q[0], doc.session.embeddings @ doc.session.w_query[0], atol=1e-5)
    doc.undo_stack.undo()
    assert doc.session == before
    assert model.data(model.index(1, 0)) == f"{before.w_query[0, 1, 0]:.4g}"
    doc.undo_stack.redo()
    assert doc.session.w_query[0, 1, 0] == pytest.approx(-1 / 3)


@pytest.mark.parametrize("text", ["abc", "nan", "inf", "", "1e999", "__import__('os')"])
def test_refused_cell_text_changes_nothing_and_says_why(qtbot, doc, messages, text):
    model = MatrixModel(doc, "embeddings")
    view = MatrixTableView(model)
    qtbot.addWidget(view)
    view.show()
    before = doc.session
    _type_into_cell(qtbot, view, 0, 1, text) if text else model.setData(model.index(0, 1), "")
    assert doc.session is before
    assert doc.undo_stack.count() == 0
    assert messages and "embeddings[0,1] not changed" in messages[-1]


def test_paste_block_from_clipboard_is_one_edit(qtbot, doc, messages):
    model = MatrixModel(doc, "embeddings")
    view = MatrixTableView(model)
    qtbot.addWidget(view)
    view.show()
    view.setCurrentIndex(model.index(1, 0))
    QGuiApplication.clipboard().setText("1\t2\n3\t4\n")
    view.setFocus()
    qtbot.keyClick(view, Qt.Key.Key_V, Qt.KeyboardModifier.ControlModifier)
    assert doc.session.embeddings[1:].tolist() == [[1.0, 2.0], [3.0, 4.0]]
    assert doc.undo_stack.count() == 1 and doc.undo_stack.undoText() == "Paste 2×2 into embeddings"
    # numpy printout also works; a block that overflows is refused with its shape and the room.
    before = doc.session
    view.setCurrentIndex(model.index(2, 1))
    QGuiApplication.clipboard().setText("[[5. 6.]\n [7. 8.]]")
    qtbot.keyClick(view, Qt.Key.Key_V, Qt.KeyboardModifier.ControlModifier)
    assert doc.session is before
    assert "a 2×2 block does not fit at [2,1]: there is room for 1×1" in messages[-1]
    QGuiApplication.clipboard().setText("hello world")
    qtbot.keyClick(view, Qt.Key.Key_V, Qt.KeyboardModifier.ControlModifier)
    assert doc.session is before and "Paste into embeddings refused" in messages[-1]


def test_copy_selection_as_tsv(qtbot, doc):
    model = MatrixModel(doc, "W_v", follow_selection=True)
    view = MatrixTableView(model)
    qtbot.addWidget(view)
    view.show()
    view.selectAll()
    view.setFocus()
    qtbot.keyClick(view, Qt.Key.Key_C, Qt.KeyboardModifier.ControlModifier)
    text = QGuiApplication.clipboard().text()
    rows = [[float(v) for v in line.split("\t")] for line in text.split("\n")]
    assert np.array_equal(np.array(rows), doc.session.w_value[0])


def test_head_follows_selection_and_resizes_reset_the_model(qtbot, doc):
    from attnexplorer.core.editing import edits

    model = MatrixModel(doc, "W_q", follow_selection=True)
    with qtbot.waitSignal(model.dataChanged):
        doc.selection.set(head=1)
    assert model.head == 1 and np.array_equal(model.array, doc.session.w_query[1])
    with qtbot.waitSignal(model.modelReset):
        doc.edit(edits.resize_dk(doc.session, 5), "d_k")
    assert model.columnCount() == 5
    doc.edit(edits.set_heads(doc.session, 1), "heads")
    assert model.head == 0 and model.array.shape == (2, 5)


def test_bulk_change_is_one_data_changed(qtbot, doc):
    from attnexplorer.core.editing import edits

    model = MatrixModel(doc, "embeddings")
    seen = []
    model.dataChanged.connect(lambda a, b: seen.append(((a.row(), a.column()), (b.row(), b.column()))))
    doc.edit(edits.set_block(doc.session, "embeddings", 1, 0, np.ones((2, 2))), "paste")
    assert seen == [((1, 0), (2, 1))]


def test_value_only_edits_never_reset_and_equal_values_emit_nothing(qtbot, doc):
    from attnexplorer.core.editing import edits
    from attnexplorer.core.inputs.session import Scale

    models = [MatrixModel(doc, "embeddings"), MatrixModel(doc, "W_q")]
    seen = []
    for m in models:
        m.modelReset.connect(lambda t=m.table: seen.append((t, "reset")))
        m.dataChanged.connect(lambda a, b, *_, t=m.table: seen.append((t, (a.row(), a.column()), (b.row(), b.column()))))
        m.headerDataChanged.connect(lambda *a, t=m.table: seen.append((t, "header")))
    s = doc.session
    # What a preset slider does: a new session, new arrays, the same values.
    doc.edit(s.replace(embeddings=s.embeddings.copy(), w_query=s.w_query.copy(),
                       scale=Scale("temperature", 2.0)), "tau")
    assert doc.session is not s and seen == []
    doc.edit(edits.set_cell(doc.session, "W_q", 1, 0, 9.0, 0), "one cell")
    assert seen == [("W_q", (1, 0), (1, 0))]


def test_token_model_renames_and_toggles_padding(qtbot, doc):
    model = TokenModel(doc)
    assert model.setData(model.index(1, 0), "dog")
    assert doc.session.tokens[1] == "dog"
    assert model.setData(model.index(2, 1), Qt.CheckState.Checked.value, Qt.ItemDataRole.CheckStateRole)
    assert doc.session.mask == Mask("padding", padding=(2,))
    assert model.data(model.index(2, 1), Qt.ItemDataRole.CheckStateRole) == Qt.CheckState.Checked
    assert not model.setData(model.index(0, 0), "   ")
    assert doc.session.tokens[0] == "w0"


def test_a_4096_row_table_asks_only_for_visible_rows(qtbot):
    n = 4096
    s = make_session(n=n, d=8)
    doc = SessionDocument(s)
    try:
        asked = set()

        class Counting(MatrixModel):
            def data(self, index, role=Qt.ItemDataRole.DisplayRole):
                asked.add(index.row())
                return super().data(index, role)

        model = Counting(doc, "embeddings")
        view = MatrixTableView(model)
        view.resize(400, 300)
        qtbot.addWidget(view)
        view.show()
        qtbot.waitExposed(view)
        view.scrollToBottom()
        asked.clear()
        view.grab()  # renders the visible rows
        assert model.rowCount() == n
        assert 0 < len(asked) < 200
        assert max(asked) == n - 1
    finally:
        doc.shutdown()


def test_changed_cells_of_a_head_come_from_the_edit_not_a_comparison():
    """What a table shows of an edited W_q head: exactly the cells whose numbers changed, read
    from the edit's record of positions (``derived_from``), for every head and shape of view."""
    from attnexplorer.core.inputs.session_arrays import with_values
    from attnexplorer.ui.inputs.table_models import changed_cells

    s = make_session(n=3, d=4, dk=5, heads=3)
    for index in [(1, 2, 3), (0, slice(0, 2), slice(1, 4)), (slice(None), 0, 4), (2, 1, slice(None))]:
        w = with_values(s.w_query, index, 7.0)
        for head in range(3):
            for new, old in ((w[head], s.w_query[head]), (w[head][1][None, :], s.w_query[head][1][None, :])):
                got = changed_cells(new, old)
                assert got is not None
                assert sorted(zip(*map(list, got))) == sorted(zip(*map(list, np.nonzero(new != old))))
            assert changed_cells(w[head].T, s.w_query[head].T) is None  # not rows of cells: compare instead
    same = with_values(s.w_query, (0, 0, 0), s.w_query[0, 0, 0])  # the same number written
    assert [c.size for c in changed_cells(same[0], s.w_query[0])] == [0, 0]
    x = with_values(s.embeddings, (2, 1), 5.0)
    assert [list(c) for c in changed_cells(x, s.embeddings)] == [[2], [1]]
    assert changed_cells(s.embeddings.copy(), s.embeddings) is None  # not made by an edit


def test_changed_box_bounds_every_changed_cell():
    from attnexplorer.ui.inputs.table_models import changed_box

    old = np.zeros((6, 5))
    new = old.copy()
    new[1, 3] = 1.0
    new[4, 0] = -2.0
    rows, cols = changed_box(new, old)
    assert (rows.min(), rows.max(), cols.min(), cols.max()) == (1, 4, 0, 3)
    assert changed_box(old.copy(), old) is None and changed_box(np.zeros((0, 0)), np.zeros((0, 0))) is None


@pytest.mark.skipif(not hasattr(__import__("os"), "memfd_create"), reason="copy-on-write copies need memfd_create (Linux)")
def test_opening_a_cell_editor_writes_the_first_edits_memory_file_ahead(qtbot):
    # A large W_q's first cell edit maps a memory file holding its numbers; the editor opening
    # gets it written (off the GUI thread) while the person types, so Enter writes no file.
    import gc

    from attnexplorer.core.inputs import session_arrays

    doc = SessionDocument(make_session(n=3, d=512, dk=512, dv=8, heads=2), compute=False)  # W_q: 4 MB
    try:
        model = MatrixModel(doc, "W_q", head=1)
        view = MatrixTableView(model)
        qtbot.addWidget(view)
        view.show()
        before = doc.session.w_query
        gc.collect()
        files = session_arrays.memory_file_bytes()
        view.setCurrentIndex(model.index(2, 5))
        view.setFocus()
        qtbot.keyClick(view, Qt.Key.Key_F2)
        assert session_arrays.prepared(before)
        assert session_arrays.memory_file_bytes() - files == before.nbytes
        _type_into_cell(qtbot, view, 2, 5, "0.25")
        assert doc.session.w_query[1, 2, 5] == 0.25
        assert session_arrays.copy_on_write(doc.session.w_query)
        assert session_arrays.memory_file_bytes() - files == before.nbytes  # the edit mapped that file
    finally:
        doc.shutdown()


def test_focus_coming_and_going_repaints_only_the_current_cell(qtbot):
    # Typing a number moves focus to the cell's editor and back: the table repaints the
    # current cell's focus frame, not every visible cell (QAbstractItemView's default), and
    # what it shows is what a full repaint draws.
    from PySide6.QtCore import QEvent, QItemSelectionModel, QObject, QRect
    from PySide6.QtWidgets import QVBoxLayout, QWidget

    doc = SessionDocument(make_session(n=4, d=6, dk=6, heads=1), compute=False)
    try:
        top = QWidget()
        layout = QVBoxLayout(top)
        model = MatrixModel(doc, "W_q")
        view, other = MatrixTableView(model), QLineEdit()
        layout.addWidget(view)
        layout.addWidget(other)
        qtbot.addWidget(top)
        top.resize(500, 300)
        top.show()
        qtbot.waitExposed(top)
        # Focus goes to the active window: on an X server with no window manager (Xvfb in CI)
        # nothing activates a new window, so the test does, as a click on it would.
        top.activateWindow()
        qtbot.waitActive(top)
        other.setFocus()
        qtbot.waitUntil(other.hasFocus)
        view.setCurrentIndex(model.index(1, 1))
        view.selectionModel().select(model.index(2, 3), QItemSelectionModel.SelectionFlag.Select)
        view.viewport().repaint()  # nothing left pending from setting them up

        class Paints(QObject):
            rects: list = []

            def eventFilter(self, obj, event):
                if event.type() == QEvent.Type.Paint:
                    self.rects.append(QRect(event.rect()))
                return False

        paints = Paints(view)
        view.viewport().installEventFilter(paints)
        cell = view.visualRect(model.index(1, 1))
        for focus, has in ((view, True), (other, False)):
            paints.rects = []
            focus.setFocus()
            qtbot.waitUntil(lambda: view.hasFocus() == has)
            qtbot.waitUntil(lambda: bool(paints.rects))
            assert all(cell.contains(rect) for rect in paints.rects), paints.rects
            shown = view.grab().toImage()
            view.viewport().repaint()
            assert view.grab().toImage() == shown  # nothing stale: the same as every cell painted afresh
        # Keyboard focus into a table with no current cell still makes the first one current.
        view.setCurrentIndex(model.index(-1, -1))
        view.setFocus(Qt.FocusReason.TabFocusReason)
        qtbot.waitUntil(view.hasFocus)
        assert view.currentIndex() == model.index(0, 0)
    finally:
        doc.shutdown()
