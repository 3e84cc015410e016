"""The inputs panel: sentence, tokens, embeddings, weights, heads, initialisers, import."""

import numpy as np
import pytest
from PySide6.QtCore import Qt

from attnexplorer.core.inputs.presets import build_preset
from attnexplorer.ui.document import SessionDocument
from attnexplorer.ui.inputs.inputs_panel import InputsPanel


@pytest.fixture
def panel(qtbot, doc):
    p = InputsPanel(doc)
    qtbot.addWidget(p)
    p.resize(340, 700)
    p.show()
    return p


def test_sentence_enter_retokenizes_keeping_embeddings(qtbot, panel, doc):
    before = doc.session
    box = panel.tokens.sentence
    box.clear()
    qtbot.keyClicks(box, "Life is short, eat cake")
    qtbot.keyClick(box, Qt.Key.Key_Return)
    s = doc.session
    assert s.tokens == ("Life", "is", "short", ",", "eat", "cake")
    for tok in ("Life", "is", "short", "eat"):
        assert np.array_equal(s.embeddings[s.tokens.index(tok)], before.embeddings[before.tokens.index(tok)])
    assert panel.tokens.token_model.rowCount() == 6
    assert panel.tokens.embedding_model.rowCount() == 6
    assert doc.undo_stack.count() == 1
    doc.undo_stack.undo()
    assert doc.session == before and box.text() == "Life is short eat dessert first"


def test_new_tokens_use_the_chosen_source(qtbot, panel, doc):
    panel.tokens.set_source("manual")
    panel.tokens.sentence.setText("Life is short really")
    panel.tokens.sentence.returnPressed.emit()
    assert not doc.session.embeddings[3].any()  # manual: zeros for the new word
    panel.tokens.set_source("seeded")
    panel.tokens.seed_spin.setValue(7)
    from attnexplorer.core.inputs.embeddings import word_embeddings

    panel.tokens.sentence.setText("Life is short truly")
    panel.tokens.sentence.returnPressed.emit()
    expected = word_embeddings(("truly",), doc.session.d, seed=7)[0]
    assert np.array_equal(doc.session.embeddings[3], expected)
    # a typed word never takes the vector of a word already there
    assert not any(np.array_equal(expected, row) for row in doc.session.embeddings[:3])


def test_token_header_click_toggles_padding(qtbot, panel, doc):
    from attnexplorer.core.inputs.session import Mask

    doc.edit(doc.session.replace(mask=Mask("padding", padding=(0,))), "padding")
    panel.tokens.token_view.verticalHeader().sectionClicked.emit(2)
    assert doc.session.mask.padding == (0, 2)
    panel.tokens.token_view.verticalHeader().sectionClicked.emit(0)
    assert doc.session.mask.padding == (2,)
    doc.undo_stack.undo()
    assert doc.session.mask.padding == (0, 2)
    doc.edit(doc.session.replace(mask=Mask("causal")), "causal")
    panel.tokens.token_view.verticalHeader().sectionClicked.emit(1)  # only padding listens
    assert doc.session.mask == Mask("causal")


def test_empty_sentence_is_refused(panel, doc, messages):
    before = doc.session
    panel.tokens.sentence.setText("   ")
    panel.tokens.sentence.returnPressed.emit()
    assert doc.session is before and "no tokens" in messages[-1]


def test_insert_delete_move_tokens_move_embedding_rows(qtbot, panel, doc):
    s0 = doc.session
    doc.selection.set(query=0)
    qtbot.mouseClick(panel.tokens.down_button, Qt.MouseButton.LeftButton)
    assert doc.session.tokens[:2] == (s0.tokens[1], s0.tokens[0])
    assert np.array_equal(doc.session.embeddings[1], s0.embeddings[0])
    assert doc.selection.current.query == 1
    qtbot.mouseClick(panel.tokens.insert_button, Qt.MouseButton.LeftButton)
    assert doc.session.n == s0.n + 1 and doc.session.tokens[2] == "token"
    qtbot.mouseClick(panel.tokens.delete_button, Qt.MouseButton.LeftButton)
    assert doc.session.n == s0.n
    assert doc.undo_stack.count() == 3


def test_clicking_a_token_row_selects_the_query_and_follows_it(qtbot, panel, doc):
    view = panel.tokens.token_view
    rect = view.visualRect(view.model().index(3, 0))
    qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    assert doc.selection.current.query == 3
    doc.selection.set(query=1)
    assert view.currentIndex().row() == 1
    assert panel.tokens.embedding_view.currentIndex().row() == 1


def test_d_spin_resizes_everything(panel, doc):
    panel.tokens.d_spin.setValue(5)
    s = doc.session
    assert s.d == 5 and s.w_query.shape[1] == 5 and panel.tokens.embedding_model.columnCount() == 5
    assert not s.embeddings[:, 3:].any()


def test_heads_head_selector_dk_dv(panel, doc):
    w = panel.weights
    w.heads_spin.setValue(3)
    assert doc.session.heads == 3
    w.head_spin.setValue(2)
    assert doc.selection.current.head == 2
    assert w.tables["W_q"].model.head == 2
    w.dk_spin.setValue(4)
    w.dv_spin.setValue(1)
    assert (doc.session.d_k, doc.session.d_v) == (4, 1)
    assert w.tables["W_k"].model.columnCount() == 4 and w.tables["W_v"].model.columnCount() == 1
    doc.undo_stack.undo()
    assert doc.session.d_v == 4 and w.dv_spin.value() == 4


def test_initialisers(panel, doc, messages):
    from attnexplorer.core.inputs.weights import init_weight

    table = panel.weights.tables["W_v"]
    panel.weights.seed_spin.setValue(5)
    assert table.initialise("linear")
    assert np.array_equal(doc.session.w_value[0], init_weight("linear", 3, 4, seed=5)[0])
    assert table.initialise("zeros") and not doc.session.w_value.any()
    before = doc.session
    assert not table.initialise("identity")  # 3×4 is not square
    assert doc.session is before and "identity" in messages[-1]
    panel.weights.dk_spin.setValue(3)
    assert panel.weights.tables["W_q"].initialise("identity")
    assert np.array_equal(doc.session.w_query[0], np.eye(3))


def test_import_weight_in_linear_orientation(tmp_path, panel, doc, messages):
    table = panel.weights.tables["W_q"]  # 3×2 (d × d_k)
    linear = np.arange(6.0).reshape(2, 3)  # nn.Linear(3, 2).weight is (out, in) = 2×3
    path = tmp_path / "wq.npy"
    np.save(path, linear)
    assert table.importer.import_file(path, transpose=True)
    assert np.array_equal(doc.session.w_query[0], linear.T)
    before = doc.session
    assert not table.importer.import_file(path, transpose=False)
    assert doc.session is before
    assert "the matrix is 2×3 but the table is 3×2 (d × d_k)" in messages[-1]
    assert table.importer.import_text("tensor([[1., 2., 3.], [4., 5., 6.]])", transpose=True)
    assert doc.session.w_query[0].tolist() == [[1, 4], [2, 5], [3, 6]]


def test_import_embeddings_from_csv_with_labels(tmp_path, panel, doc, messages):
    n, d = doc.session.n, doc.session.d
    rows = "\n".join(f"{t}," + ",".join(str(i * 10 + j) for j in range(d)) for i, t in enumerate(doc.session.tokens))
    path = tmp_path / "x.csv"
    path.write_text("token," + ",".join(f"x{j}" for j in range(d)) + "\n" + rows + "\n")
    assert panel.tokens.embedding_import.import_file(path)
    assert doc.session.embeddings[2, 1] == 21.0
    bad = tmp_path / "bad.csv"
    bad.write_text("1,2\n3,4\n")
    before = doc.session
    assert not panel.tokens.embedding_import.import_file(bad)
    assert doc.session is before and f"table is {n}×{d}" in messages[-1]


def test_a_blank_sentence_box_says_why(qtbot):
    built = build_preset("sine", {"N": 600})
    document = SessionDocument(built.session)
    inputs = InputsPanel(document)
    qtbot.addWidget(inputs)
    assert inputs.tokens.sentence.text() == ""
    assert "600 tokens are too many to show as a sentence" in inputs.tokens.sentence.placeholderText()
    document.edit(build_preset("pronoun").session, "Back to a sentence")
    assert inputs.tokens.sentence.text().startswith("The dog fetched")
    assert inputs.tokens.sentence.placeholderText() == "Type a sentence and press Enter"
    document.shutdown()
