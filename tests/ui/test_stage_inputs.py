"""The stage inputs driven as a user would: bias rows under their matrices, the Stages page
(positions, norm, K/V heads, W_o) and the Source page (cross-attention)."""

import numpy as np
import pytest
from PySide6.QtCore import Qt

from attnexplorer.core.inputs.presets import build_preset
from attnexplorer.core.inputs.stages import Positions
from attnexplorer.ui.inputs.inputs_panel import InputsPanel


def inputs_panel(qtbot, doc) -> InputsPanel:
    """The Inputs tabs on ``doc``, shown at 400 × 900."""
    p = InputsPanel(doc)
    qtbot.addWidget(p)
    p.resize(400, 900)
    p.show()
    qtbot.waitExposed(p)
    return p


@pytest.fixture
def panel(qtbot, doc):
    return inputs_panel(qtbot, doc)


def type_into(qtbot, view, row, col, text):
    """Open the editor of cell (row, col) of ``view``, type ``text`` and press Enter."""
    from PySide6.QtWidgets import QLineEdit

    index = view.model().index(row, col)
    view.setCurrentIndex(index)
    view.edit(index)
    editor = view.viewport().findChild(QLineEdit)
    assert editor is not None, "the cell did not open an editor"
    editor.selectAll()
    qtbot.keyClicks(editor, text)
    qtbot.keyClick(editor, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: view.state() != view.State.EditingState)  # Qt commits Enter on the next turn


def commit(qtbot, edit, text):
    edit.setFocus()
    edit.selectAll()
    qtbot.keyClicks(edit, text)
    qtbot.keyClick(edit, Qt.Key.Key_Return)


def test_ticking_a_bias_shows_its_row_under_the_matrix_and_typing_sets_it(qtbot, panel, doc):
    panel.setCurrentWidget(panel.weights)
    table = panel.weights.tables["W_k"]
    assert not table.bias.check.isChecked() and not table.bias.isVisible()
    table.bias.check.click()
    assert doc.session.b_key is not None and not doc.session.b_key.any() and table.bias.isVisible()
    assert doc.undo_stack.undoText() == "Add b_k" and table.bias.model.columnCount() == doc.session.d_k
    type_into(qtbot, table.bias.view, 0, 1, "0.5")
    assert doc.session.b_key[0].tolist() == [0.0, 0.5] + [0.0] * (doc.session.d_k - 2)
    assert doc.undo_stack.undoText() == "Edit b_k[1]"
    table.bias.check.click()  # untick: removed
    assert doc.session.b_key is None and not table.bias.isVisible()
    doc.undo_stack.undo()
    assert doc.session.b_key[0, 1] == 0.5 and table.bias.check.isChecked() and table.bias.isVisible()


def test_the_bias_row_lines_up_with_its_matrix(qtbot, panel):
    panel.setCurrentWidget(panel.weights)
    table = panel.weights.tables["W_q"]
    table.bias.check.click()
    qtbot.waitExposed(table.bias.view)
    matrix, bias = table.view, table.bias.view
    assert matrix.verticalHeader().width() == bias.verticalHeader().width()
    matrix.horizontalHeader().resizeSection(0, 90)
    assert bias.columnWidth(0) == 90
    for c in range(bias.model().columnCount()):
        assert bias.columnViewportPosition(c) == matrix.columnViewportPosition(c)


def test_grouped_query_titles_say_who_shares(qtbot, panel, doc, messages):
    stages = panel.stages
    panel.weights.heads_spin.setValue(4)
    stages.kv_spin.setValue(3)  # does not divide 4: refused, snaps back
    assert doc.session.kv_heads == 4 and stages.kv_spin.value() == 4
    assert messages[-1] == "Set K/V heads to 3 refused: kv_heads: 3 does not divide 4 query heads"
    stages.kv_spin.setValue(2)
    assert doc.session.kv_heads == 2
    assert stages.sharing.text() == "K/V head 0: query heads 0, 1 · K/V head 1: query heads 2, 3"
    doc.selection.set(head=3)
    assert panel.weights.tables["W_k"].title.text() == "W_k (d × d_k) · K/V head 1, shared by query heads 2, 3"
    assert panel.weights.tables["W_q"].title.text() == "W_q (d × d_k)"
    panel.setCurrentWidget(panel.weights)
    type_into(qtbot, panel.weights.tables["W_v"].view, 0, 0, "7")
    assert doc.session.w_value[1, 0, 0] == 7.0


def test_positions_kinds_show_their_parameters_and_change_in_one_step(qtbot, panel, doc, messages):
    stages = panel.stages
    panel.setCurrentWidget(stages)
    combo = stages.positions_combo
    combo.setCurrentIndex(combo.findData("rope"))
    assert doc.session.positions.kind == "rope" and stages.rope_row.isVisible()
    assert not stages.positions_table.isVisible() and not stages.slopes_table.isVisible()
    stages.offset_spin.setValue(4)
    assert doc.session.positions.offset == 4 and doc.undo_stack.undoText() == "RoPE offset = 4"
    commit(qtbot, stages.theta_edit, "500")
    assert doc.session.positions.theta == 500.0
    commit(qtbot, stages.theta_edit, "-1")
    assert doc.session.positions.theta == 500.0 and "positions.theta: must be a finite number > 0" in messages[-1]
    assert stages.theta_edit.text() == "500"
    commit(qtbot, stages.theta_edit, "abc")
    assert stages.theta_edit.text() == "500" and messages[-1].startswith("Positions not changed: 'abc' is not a number")
    panel.weights.dk_spin.setValue(4)
    stages.dims_spin.setValue(3)  # odd: refused, snaps back to all of d_k
    assert doc.session.positions.dims is None and stages.dims_spin.text() == "all of d_k"
    assert "positions.dims: 3 must be an even whole number" in messages[-1]
    stages.dims_spin.setValue(2)
    assert doc.session.positions.dims == 2 and doc.undo_stack.undoText() == "RoPE dims = 2"
    combo.setCurrentIndex(combo.findData("alibi"))
    assert stages.slopes_table.isVisible() and not stages.rope_row.isVisible()
    assert not stages.geometric_button.isEnabled()
    type_into(qtbot, stages.slopes_table.view, 0, 0, "0.125")
    assert doc.session.positions.slopes[0] == 0.125 and stages.geometric_button.isEnabled()
    stages.geometric_button.click()
    assert doc.session.positions.slopes is None
    combo.setCurrentIndex(combo.findData("learned"))
    assert stages.positions_table.isVisible() and stages.positions_table.model.rowCount() == doc.session.n
    stages.rows_spin.setValue(doc.session.n + 2)
    assert doc.session.positions.table.shape[0] == doc.session.n + 2
    combo.setCurrentIndex(combo.findData("none"))
    assert doc.session.positions is None and not stages.positions_table.isVisible()


def test_a_panel_setting_the_rope_offset_updates_the_control(panel, doc):
    from attnexplorer.ui import user_actions

    user_actions.set_positions(doc, Positions("rope", offset=9))
    assert panel.stages.offset_spin.value() == 9 and panel.stages.positions_combo.currentData() == "rope"


def test_norm_controls(qtbot, panel, doc):
    stages = panel.stages
    panel.setCurrentWidget(stages)
    combo = stages.norm_combo
    assert not stages.norm_weight.isVisible()
    combo.setCurrentIndex(combo.findData("layer"))
    assert doc.session.norm.kind == "layer" and stages.norm_weight.isVisible() and stages.norm_bias.isVisible()
    type_into(qtbot, stages.norm_weight.view, 0, 0, "2")
    assert doc.session.norm.weight[0] == 2.0
    commit(qtbot, stages.eps_edit, "1e-3")
    assert doc.session.norm.eps == 1e-3
    combo.setCurrentIndex(combo.findData("rms"))
    assert doc.session.norm.kind == "rms" and doc.session.norm.weight[0] == 2.0 and not stages.norm_bias.isVisible()


def test_output_projection_on_off_with_its_bias(qtbot, panel, doc):
    stages = panel.stages
    panel.setCurrentWidget(stages)
    assert not stages.w_out.isVisible()
    stages.output_check.click()
    assert doc.session.w_out is not None and stages.w_out.isVisible()
    assert stages.w_out.model.rowCount() == doc.session.heads * doc.session.d_v
    assert not stages.b_out.isVisible()
    stages.b_out.check.click()
    type_into(qtbot, stages.b_out.view, 0, 0, "1.5")
    assert doc.session.b_out[0] == 1.5 and stages.b_out.check.isChecked()
    stages.d_out_spin.setValue(2)
    assert doc.session.w_out.shape[1] == 2 and stages.b_out.model.columnCount() == 2
    stages.output_check.click()
    assert doc.session.w_out is None and doc.session.b_out is None and not stages.w_out.isVisible()


def test_cross_attention_on_and_off_with_its_own_sentence_and_tables(qtbot, panel, doc, messages):
    page = panel.source
    panel.setCurrentWidget(page)
    assert not page.body.isVisible()
    page.enabled.click()
    s = doc.session
    assert s.source is not None and s.source.tokens == s.tokens and page.body.isVisible()
    page.sentence.clear()
    qtbot.keyClicks(page.sentence, "the cake")
    qtbot.keyClick(page.sentence, Qt.Key.Key_Return)
    assert doc.session.source.tokens == ("the", "cake") and page.token_model.rowCount() == 2
    assert doc.session.tokens == s.tokens  # the queries stay
    type_into(qtbot, page.embedding_view, 1, 0, "3")
    assert doc.session.source.embeddings[1, 0] == 3.0
    page.token_view.setCurrentIndex(page.token_model.index(0, 0))
    page.insert_token("big")
    assert doc.session.source.tokens == ("the", "big", "cake")
    page.move_token(+1)
    assert doc.session.source.tokens == ("the", "cake", "big")
    page.token_model.setData(page.token_model.index(0, 1), Qt.CheckState.Checked.value, Qt.ItemDataRole.CheckStateRole)
    assert doc.session.mask.kind == "padding" and doc.session.mask.padding == (0,)
    page.d_spin.setValue(doc.session.source.d + 1)
    assert doc.session.w_key.shape[1] == doc.session.source.d
    panel.setCurrentWidget(panel.weights)
    assert panel.weights.tables["W_k"].title.text().startswith("W_k (d_s × d_k)")
    page.enabled.click()
    assert doc.session.source is None and not page.body.isVisible()


def test_a_source_with_rope_is_refused_naming_why_and_the_box_snaps_back(panel, doc, messages):
    from attnexplorer.ui import user_actions

    user_actions.set_positions_kind(doc, "rope")
    page = panel.source
    page.enabled.click()
    assert doc.session.source is None and not page.enabled.isChecked()
    assert messages[-1].startswith("Cross-attention on refused: positions: rope encodes the distance between a query")
    user_actions.set_positions_kind(doc, "none")
    doc.edit(doc.session.replace(mask=doc.session.mask.__class__("causal")), "causal")
    page.enabled.click()
    assert doc.session.source is None and "causal needs one sequence" in messages[-1]


def test_the_translate_preset_shows_its_source(panel, doc):
    doc.edit(build_preset("translate").session, "translate")
    page = panel.source
    assert page.enabled.isChecked() and page.sentence.text() == "the black cat"
    assert page.embedding_model.rowCount() == 3 and page.embedding_model.columnCount() == 4
    assert page.embedding_model.headerData(1, Qt.Orientation.Vertical) == "1 black"
    assert np.array_equal(page.embedding_model.array, doc.session.source.embeddings)


def test_the_current_source_token_is_the_selected_key(panel, doc):
    doc.edit(build_preset("translate").session, "translate")
    page = panel.source
    page.token_view.setCurrentIndex(page.token_model.index(1, 0))
    assert doc.selection.current.key == 1
    doc.selection.set(key=2)
    assert page.token_view.currentIndex().row() == 2


def test_the_source_token_model_passes_the_model_tester(qtmodeltester, doc):
    from attnexplorer.ui import user_actions
    from attnexplorer.ui.inputs.source_page import SourceTokenModel

    model = SourceTokenModel(doc)
    assert model.rowCount() == 0  # no source: no rows
    qtmodeltester.check(model)
    user_actions.set_source(doc)
    user_actions.toggle_padding(doc, 1)
    assert model.rowCount() == doc.session.source.n
    assert model.data(model.index(1, model.BLOCKED), Qt.ItemDataRole.CheckStateRole) == Qt.CheckState.Checked
    qtmodeltester.check(model)
    assert not model.setData(model.index(0, model.TEXT), "  ")  # no text: refused
    assert doc.session.source.tokens[0] == doc.session.tokens[0]
