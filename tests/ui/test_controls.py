"""Controls: mask, scale, device/dtype, preset sliders, and the click-to-mask paths."""

import numpy as np
import pytest
from PySide6.QtWidgets import QApplication

from attnexplorer.core.inputs.presets import build_preset, reference_curves
from attnexplorer.core.inputs.session import Mask, Scale
from attnexplorer.ui.controls.controls_panel import ControlsPanel
from attnexplorer.ui.user_actions import toggle_blocked, toggle_padding
from attnexplorer.ui.document import SessionDocument


def open_preset(qtbot, name):
    built = build_preset(name)
    doc = SessionDocument(built.session)
    panel = ControlsPanel(doc)
    qtbot.addWidget(panel)
    panel.resize(320, 600)
    panel.show()
    return doc, panel


@pytest.fixture
def dessert(qtbot):
    doc, panel = open_preset(qtbot, "dessert")
    yield doc, panel
    doc.shutdown()


@pytest.fixture
def sine(qtbot):
    doc, panel = open_preset(qtbot, "sine")
    yield doc, panel
    doc.shutdown()


def choose(combo, key):
    combo.setCurrentIndex(combo.findData(key))


def test_mask_kinds_change_the_session_and_the_weights(dessert):
    doc, panel = dessert
    choose(panel.mask_combo, "causal")
    assert doc.session.mask == Mask("causal")
    assert doc.compute.wait_idle()
    assert np.allclose(np.triu(doc.result.weights[0], 1), 0)
    choose(panel.mask_combo, "window")
    assert panel.window_spin.isEnabled()
    panel.window_spin.setValue(2)
    assert doc.session.mask == Mask("window", window=2)
    choose(panel.mask_combo, "custom")
    assert doc.session.mask.kind == "custom"
    assert np.array_equal(doc.session.mask.blocked, Mask("window", window=2).matrix(doc.session.n))
    doc.undo_stack.undo()
    assert doc.session.mask == Mask("window", window=2)
    assert panel.mask_combo.currentData() == "window"


def test_click_paths_toggle_padding_and_cells(dessert):
    doc, panel = dessert
    assert toggle_padding(doc, 2)
    assert doc.session.mask == Mask("padding", padding=(2,))
    assert panel.mask_combo.currentData() == "padding"
    assert toggle_blocked(doc, 0, 1)
    assert doc.session.mask.kind == "custom" and doc.session.mask.blocked[0, 1]
    assert doc.session.mask.blocked[:, 2].all()
    before = doc.session
    assert not toggle_blocked(doc, 0, 99)
    assert doc.session is before


def test_scale_and_temperature(dessert):
    doc, panel = dessert
    choose(panel.scale_combo, "none")
    assert doc.session.scale == Scale("none")
    choose(panel.scale_combo, "temperature")
    assert doc.session.scale.kind == "temperature" and panel.temperature.isEnabled()
    panel.temperature.spin.setValue(0.25)
    assert doc.session.scale == Scale("temperature", 0.25)
    assert doc.compute.wait_idle() and doc.result.scale_factor == pytest.approx(4.0)


def test_temperature_starts_where_the_weights_stay_the_same(dessert):
    doc, panel = dessert
    assert doc.compute.wait_idle()
    before = doc.result.weights.copy()
    choose(panel.scale_combo, "temperature")
    assert doc.session.scale == Scale("temperature", np.sqrt(doc.session.d_k))
    assert panel.temperature.value() == pytest.approx(np.sqrt(doc.session.d_k), rel=1e-4)
    assert doc.compute.wait_idle()
    np.testing.assert_allclose(doc.result.weights, before, rtol=1e-5, atol=1e-6)
    choose(panel.scale_combo, "none")
    choose(panel.scale_combo, "temperature")
    assert doc.session.scale == Scale("temperature", 1.0)


def test_temperature_slider_drag_is_one_undo_step(dessert):
    doc, panel = dessert
    choose(panel.scale_combo, "temperature")
    steps = doc.undo_stack.count()
    slider = panel.temperature.slider
    slider.setSliderDown(True)
    for position in (100, 300, 600):
        slider.setValue(position)
    slider.setSliderDown(False)
    assert doc.undo_stack.count() == steps + 1
    tau = doc.session.scale.temperature
    assert tau == pytest.approx(panel.temperature.value()) and tau > 1.0
    assert doc.undo_stack.undoText() == f"Temperature τ = {tau:g}"  # the value the drag ended at
    doc.undo_stack.undo()
    assert doc.session.scale.kind == "temperature" and doc.session.scale.temperature != tau


def test_drag_faster_than_frames_computes_only_the_newest_value(sine):
    """Slider moves that arrive before the event loop turns are coalesced: one edit, one
    compute, one redraw for the newest value; letting go applies the last value at once."""
    doc, panel = sine
    tau = panel.param_widgets["tau"]
    steps = doc.undo_stack.count()
    start = doc.session.preset.params["tau"]
    edits, results = [], []
    doc.session_changed.connect(lambda s: edits.append(s.preset.params["tau"]))
    doc.result_changed.connect(results.append)
    slider = tau.slider
    slider.setSliderDown(True)
    for position in (100, 200, 300):
        slider.setValue(position)
    # The number box follows the slider at once (rounded to the digits it shows).
    shown = lambda: pytest.approx(tau.value(), abs=0.5 * 10 ** -tau.spin.decimals())  # noqa: E731
    newest = shown()
    assert edits == [] and results == []  # nothing yet: waiting for the event loop
    QApplication.processEvents()
    assert len(edits) == 1 and edits[0] == newest and len(results) == 1  # only the newest of three
    assert doc.undo_stack.count() == steps + 1
    for position in (400, 500):
        slider.setValue(position)
    newest = shown()
    assert start != newest and edits[0] != newest
    slider.setSliderDown(False)  # the release applies the last value without waiting
    assert edits[-1] == newest and edits[-1] == doc.session.preset.params["tau"]
    assert len(edits) == 2
    assert doc.undo_stack.count() == steps + 1  # still one undo step for the whole drag
    QApplication.processEvents()
    assert len(edits) == 2  # nothing left over to apply
    doc.undo_stack.undo()
    assert doc.session.preset.params["tau"] == start


def test_device_lists_only_available_and_sets_options(dessert):
    from attnexplorer.core.compute.engine import available_devices

    doc, panel = dessert
    devices = [panel.device_combo.itemData(i) for i in range(panel.device_combo.count())]
    assert devices == available_devices() and panel.device_combo.currentData() == "cpu"
    choose(panel.dtype_combo, "float64")
    assert doc.compute.dtype == "float64"
    assert doc.compute.wait_idle() and doc.result.dtype == "float64" and doc.result.device == "cpu"
    choose(panel.dtype_combo, "float32")
    assert doc.result.dtype == "float32"


def test_preset_slider_drag_regenerates_live_and_merges(sine):
    doc, panel = sine
    assert set(panel.param_widgets) >= {"N", "sigma", "tau", "seed"}
    n_widget = panel.param_widgets["N"]
    start_n = doc.session.n
    steps = doc.undo_stack.count()
    seen_n = []
    doc.session_changed.connect(lambda s: seen_n.append(s.n))
    slider = n_widget.slider
    slider.setSliderDown(True)
    for value in (slider.value() + 5, slider.value() + 10, slider.value() + 20):
        slider.setValue(value)
        QApplication.processEvents()  # a frame between two mouse moves
    slider.setSliderDown(False)
    assert len(set(seen_n)) == 3  # regenerated at every step of the drag
    assert doc.session.n == start_n + 20 == doc.session.preset.params["N"]
    assert doc.undo_stack.count() == steps + 1
    assert len(reference_curves(doc.session)["clean"]) == doc.session.n
    doc.undo_stack.undo()
    assert doc.session.n == start_n
    assert n_widget.value() == start_n
    assert len(reference_curves(doc.session)["clean"]) == start_n  # the reference curves follow undo


def test_preset_spin_box_edit_is_its_own_step(sine):
    doc, panel = sine
    sigma = panel.param_widgets["sigma"]
    steps = doc.undo_stack.count()
    sigma.spin.setValue(0.5)
    sigma.spin.setValue(0.6)
    assert doc.session.preset.params["sigma"] == pytest.approx(0.6)
    assert doc.undo_stack.count() == steps + 2


def test_no_preset_box_without_a_preset(qtbot):
    built = build_preset("dessert")
    doc = SessionDocument(built.session.replace(preset=None))
    try:
        panel = ControlsPanel(doc)
        qtbot.addWidget(panel)
        panel.show()
        assert not panel.preset_box.isVisible() and panel.param_widgets == {}
    finally:
        doc.shutdown()


def test_labels_are_not_clipped_in_a_narrow_dock(qtbot, sine):
    from PySide6.QtWidgets import QLabel

    doc, panel = sine
    panel.resize(300, 700)
    qtbot.wait(10)
    for label in panel.findChildren(QLabel):
        if label.isVisible() and label.text():
            assert label.width() >= min(label.sizeHint().width(), label.minimumSizeHint().width()), label.text()


@pytest.mark.parametrize("name, param", [("random", "n"), ("sine", "N")])
def test_preset_sliders_follow_an_edited_sentence(qtbot, name, param):
    # After the sentence was edited the slider said "tokens 6" for 4 tokens.
    from attnexplorer.core.editing import edits

    doc, panel = open_preset(qtbot, name)
    try:
        n = doc.session.n
        doc.edit(edits.delete_token(edits.delete_token(doc.session, 0), 0), "delete two tokens")
        assert doc.session.n == n - 2
        assert panel.param_widgets[param].value() == n - 2
        doc.undo_stack.undo()
        assert panel.param_widgets[param].value() == n
    finally:
        doc.shutdown()
