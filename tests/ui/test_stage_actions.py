"""The undoable stage actions (ui/user_actions.py): one named undo step each; a refusal
changes nothing and says why through the document's message."""

import numpy as np

from attnexplorer.core.inputs.session import Mask
from attnexplorer.core.inputs.stages import Positions
from attnexplorer.ui import user_actions


def one_step(doc, action, text):
    """Run ``action()``; it must succeed as one undo step named ``text`` that undo reverts."""
    before, count = doc.session, doc.undo_stack.count()
    assert action()
    assert doc.undo_stack.count() == count + 1 and doc.undo_stack.undoText() == text
    after = doc.session
    doc.undo_stack.undo()
    assert doc.session == before
    doc.undo_stack.redo()
    assert doc.session == after
    return after


def test_bias_actions_are_one_step_each(doc):
    s = one_step(doc, lambda: user_actions.add_bias(doc, "b_q"), "Add b_q")
    assert s.b_query is not None and not s.b_query.any()
    s = one_step(doc, lambda: user_actions.set_cell(doc, "b_q", 0, 1, "0.5"), "Edit b_q[1]")
    assert s.b_query[0, 1] == 0.5
    s = one_step(doc, lambda: user_actions.remove_bias(doc, "b_q"), "Remove b_q")
    assert s.b_query is None


def test_positions_actions_name_what_changed(doc):
    one_step(doc, lambda: user_actions.set_positions_kind(doc, "rope"), "Positions: RoPE")
    s = one_step(doc, lambda: user_actions.set_positions(doc, Positions("rope", offset=5)), "RoPE offset = 5")
    assert s.positions.offset == 5
    s = one_step(doc, lambda: user_actions.change_positions(doc, theta=100.0), "RoPE θ = 100")
    assert s.positions.theta == 100.0 and s.positions.offset == 5


def test_a_drag_of_the_offset_is_one_step(doc):
    user_actions.set_positions_kind(doc, "rope")
    count = doc.undo_stack.count()
    for offset in (1, 2, 3):
        assert user_actions.set_positions(doc, Positions("rope", offset=offset), merge_key=("rope offset", 1))
    assert doc.undo_stack.count() == count + 1 and doc.session.positions.offset == 3


def test_refusals_change_nothing_and_say_why(doc, messages):
    before, count = doc.session, doc.undo_stack.count()
    assert not user_actions.change_positions(doc, theta=1.0)
    assert messages[-1] == "Positions not changed: there are no positions; choose a kind first"
    user_actions.set_positions_kind(doc, "rope")
    before, count = doc.session, doc.undo_stack.count()
    assert not user_actions.change_positions(doc, offset=-1)
    assert "positions.offset: -1 must be a whole number" in messages[-1]
    assert not user_actions.set_source(doc)
    assert messages[-1].startswith("Cross-attention on refused: positions: rope encodes the distance")
    assert not user_actions.set_kv_heads(doc, 3) or doc.session.heads % 3 == 0
    assert not user_actions.set_norm_eps(doc, 1e-3)
    assert messages[-1] == "Norm eps = 0.001 refused: norm.eps: there is no norm; choose LayerNorm or RMSNorm first"
    assert doc.session == before and doc.undo_stack.count() == count


def test_norm_and_kv_heads_actions(doc):
    s = one_step(doc, lambda: user_actions.set_norm_kind(doc, "rms"), "Norm: RMSNorm")
    assert s.norm.kind == "rms"
    s = one_step(doc, lambda: user_actions.set_norm_eps(doc, 1e-3), "RMSNorm eps = 0.001")
    assert s.norm.eps == 1e-3
    one_step(doc, lambda: user_actions.set_heads(doc, 4), "Set heads to 4")
    s = one_step(doc, lambda: user_actions.set_kv_heads(doc, 2), "Set K/V heads to 2")
    assert s.kv_heads == 2
    s = one_step(doc, lambda: user_actions.import_matrix(doc, "W_k", np.ones((s.d, s.d_k)), head=3),
                 "Import into W_k (K/V head 1)")
    assert s.w_key[1].all()


def test_source_actions(doc, messages):
    s = one_step(doc, lambda: user_actions.set_source(doc), "Cross-attention on")
    assert s.source.tokens == s.tokens
    s = one_step(doc, lambda: user_actions.set_source_sentence(doc, ("the", "cake")), "Set source sentence (2 tokens)")
    assert s.source.tokens == ("the", "cake") and not s.source.embeddings.any()
    s = one_step(doc, lambda: user_actions.insert_source_token(doc, 1, "big"), "Insert source token 'big'")
    assert s.source.tokens == ("the", "big", "cake")
    s = one_step(doc, lambda: user_actions.move_source_token(doc, 2, 1), "Move source token 'cake' up")
    assert s.source.tokens == ("the", "cake", "big")
    s = one_step(doc, lambda: user_actions.rename_source_token(doc, 0, "a"), "Rename source token 0 to 'a'")
    s = one_step(doc, lambda: user_actions.delete_source_token(doc, 2), "Delete source token 'big'")
    assert s.source.tokens == ("a", "cake")
    wider = s.source.d + 1
    s = one_step(doc, lambda: user_actions.resize_source_d(doc, wider), f"Set source width d_s to {wider}")
    assert s.w_key.shape[1] == wider
    assert not user_actions.set_mask(doc, Mask("causal"), "Mask: Causal")
    assert messages[-1].startswith("Mask: Causal refused: mask: causal needs one sequence")
    s = one_step(doc, lambda: user_actions.clear_source(doc), "Cross-attention off")
    assert s.source is None and s.w_key.shape[1] == s.d


def test_output_actions(doc):
    s = one_step(doc, lambda: user_actions.add_output(doc), "Add W_o")
    s = one_step(doc, lambda: user_actions.set_cell(doc, "b_o", 0, 0, "1"), "Edit b_o[0]")
    assert s.b_out[0] == 1.0
    s = one_step(doc, lambda: user_actions.remove_output(doc), "Remove W_o and b_o")
    assert s.w_out is None and s.b_out is None


def test_stage_table_models_pass_the_model_tester_and_follow_the_stage(qtmodeltester, doc):
    from PySide6.QtCore import Qt

    from attnexplorer.ui.inputs.table_models import MatrixModel

    bias = MatrixModel(doc, "b_q", follow_selection=True)
    qtmodeltester.check(bias)
    assert bias.rowCount() == 1 and not bias.stored
    assert bias.data(bias.index(0, 0), Qt.ItemDataRole.ForegroundRole) is not None  # grey: absent
    assert bias.headerData(0, Qt.Orientation.Vertical) == "b"
    assert bias.setData(bias.index(0, 1), "2")
    assert bias.stored and doc.session.b_query[0, 1] == 2.0
    assert bias.data(bias.index(0, 1), Qt.ItemDataRole.ForegroundRole) is None
    norm = MatrixModel(doc, "norm.weight")
    assert norm.rowCount() == 0  # no norm: nothing to show
    user_actions.set_norm_kind(doc, "layer")
    assert norm.rowCount() == 1 and norm.columnCount() == doc.session.d
    qtmodeltester.check(norm)
    source = MatrixModel(doc, "source.embeddings")
    user_actions.set_source(doc)
    user_actions.rename_source_token(doc, 0, "zero")
    assert source.headerData(0, Qt.Orientation.Vertical) == "0 zero"
    qtmodeltester.check(source)
    assert not source.setData(source.index(0, 0), "nan")
    assert doc.session.source.embeddings[0, 0] == doc.session.embeddings[0, 0]
