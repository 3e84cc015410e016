"""The version-3 stage inputs driven as a user would: QK-norm, soft-capping, sinks, RoPE's
angles and scaling on the Stages page, and the scale factor in the controls; each change one
undo step, each bad value refused with its reason and the control snapped back."""

import numpy as np
import pytest
from test_stage_inputs import commit, inputs_panel

from attnexplorer.core.inputs.session import Scale
from attnexplorer.core.inputs.stages import Positions
from attnexplorer.ui.controls.controls_panel import ControlsPanel


@pytest.fixture
def panel(qtbot, doc):
    """The Inputs tabs with the Stages page shown."""
    inputs = inputs_panel(qtbot, doc)
    inputs.setCurrentWidget(inputs.stages)
    return inputs


def choose(combo, key):
    combo.setCurrentIndex(combo.findData(key))


def test_qk_norm_kind_over_eps_and_weights(qtbot, panel, doc):
    box = panel.stages.qk_norm
    assert not box.eps_edit.isVisible()
    choose(box.kind_combo, "rms")
    assert doc.session.qk_norm.kind == "rms" and doc.undo_stack.undoText() == "QK-norm: RMSNorm"
    assert box.tables["qk_norm.query_weight"].isVisible() and not box.tables["qk_norm.query_bias"].isVisible()
    commit(qtbot, box.eps_edit, "1e-5")
    assert doc.session.qk_norm.eps == 1e-5
    box.tables["qk_norm.query_weight"].model.setData(box.tables["qk_norm.query_weight"].model.index(0, 1), "2")
    assert doc.session.qk_norm.query_weight[1] == 2.0
    box.per_head.click()
    d_k, heads = doc.session.d_k, doc.session.heads
    assert doc.session.qk_norm.query_weight.shape == (heads * d_k,)
    assert box.tables["qk_norm.query_weight"].model.columnCount() == heads * d_k
    choose(box.over_combo, "all")
    assert doc.session.qk_norm.over == "all" and not box.per_head.isVisible()
    choose(box.kind_combo, "layer")
    assert box.tables["qk_norm.key_bias"].isVisible()
    for _ in range(6):
        doc.undo_stack.undo()
    assert doc.session.qk_norm is None and box.kind_combo.currentData() == "none"


def test_softcap_and_sinks(qtbot, panel, doc, messages):
    box = panel.stages.scores
    box.cap_check.click()
    assert doc.session.softcap == 50.0 and box.cap_edit.isVisible()
    commit(qtbot, box.cap_edit, "-3")
    assert doc.session.softcap == 50.0 and "softcap" in messages[-1] and box.cap_edit.text() == "50"
    commit(qtbot, box.cap_edit, "2.5")
    assert doc.session.softcap == 2.5 and doc.undo_stack.undoText() == "Soft-cap = 2.5"
    box.sinks_check.click()
    assert doc.session.sinks.tolist() == [0.0] * doc.session.heads and box.sinks.isVisible()
    box.sinks.model.setData(box.sinks.model.index(0, 0), "1.5")
    assert doc.session.sinks[0] == 1.5
    box.cap_check.click()
    assert doc.session.softcap is None and not box.cap_edit.isVisible()
    doc.undo_stack.undo()
    assert doc.session.softcap == 2.5 and box.cap_check.isChecked()


def test_rope_angles_and_scaling(qtbot, panel, doc, messages):
    doc.edit(doc.session.replace(positions=Positions("rope")), "RoPE")
    inputs = panel.stages.rope_scaling
    choose(inputs.angles_combo, "float32")
    assert doc.session.positions.angles == "float32"
    choose(inputs.scaling_combo, "llama3")
    scaling = doc.session.positions.scaling
    assert scaling.kind == "llama3" and scaling.factor == 8.0 and scaling.original_max_position_embeddings == 8192
    label, edit = inputs.edits["high_freq_factor"]
    assert edit.isVisible() and not inputs.edits["beta_fast"][1].isVisible()
    commit(qtbot, edit, "0.5")   # not above low_freq_factor (1): refused
    assert doc.session.positions.scaling.high_freq_factor == 4.0 and "high_freq_factor" in messages[-1]
    assert edit.text() == "4"
    commit(qtbot, inputs.edits["factor"][1], "16")
    assert doc.session.positions.scaling.factor == 16.0 and doc.undo_stack.undoText() == "RoPE scaling factor = 16"
    choose(inputs.scaling_combo, "yarn")
    assert doc.session.positions.scaling.kind == "yarn" and inputs.truncate.isVisible()
    inputs.truncate.click()
    assert doc.session.positions.scaling.truncate is False
    commit(qtbot, inputs.edits["original_max_position_embeddings"][1], "100.5")
    assert "whole number" in messages[-1]


def test_the_scale_factor(qtbot, doc, messages):
    controls = ControlsPanel(doc)
    qtbot.addWidget(controls)
    controls.show()
    before = doc.session.scale.factor(doc.session.d_k)
    choose(controls.scale_combo, "factor")
    assert doc.session.scale == Scale("factor", multiplier=before) and controls.factor_edit.isVisible()
    commit(qtbot, controls.factor_edit, "256**-0.5")
    assert doc.session.scale.multiplier == 0.0625
    commit(qtbot, controls.factor_edit, "0")
    assert doc.session.scale.multiplier == 0.0625 and "scale.factor" in messages[-1]
    choose(controls.scale_combo, "none")
    assert not controls.factor_edit.isVisible()
    doc.undo_stack.undo()
    assert controls.scale_combo.currentData() == "factor" and controls.factor_edit.text() == "0.0625"


def test_screenshot_of_the_stages_page(qtbot, panel, doc):
    from attnexplorer.core.inputs.stages import QKNorm, RopeScaling

    doc.edit(doc.session.replace(positions=Positions("rope", angles="float32", scaling=RopeScaling("yarn", factor=4.0)),
                                 qk_norm=QKNorm("rms"), softcap=30.0, sinks=np.zeros(doc.session.heads)), "all")
    panel.resize(1280, 800)
    panel.grab().save("/tmp/stages/stages_page.png")
    page = panel.stages
    page.resize(1280, page.sizeHint().height())
    page.grab().save("/tmp/stages/stages_page_whole.png")
