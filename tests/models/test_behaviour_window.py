"""The Predictions panel, the logit lens and the ablations in the window, driven on the tiny
random GPT-2 with its LM head (a real transformers model, through the same worker threads as
SmolLM2): every number drawn is the one ``Behaviour.predict`` gives."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import Qt

from attnexplorer.core.inputs.presets import build_preset
from attnexplorer.models import load_model
from attnexplorer.models.interventions import Behaviour, Interventions
from attnexplorer.ui.document import SessionDocument
from attnexplorer.ui.window import MainWindow
from attnexplorer.ui.settings import AppSettings

TEXT = "The dog fetched the ball and she was happy"


@pytest.fixture
def opened(model_in_window, tiny_gpt2_lm):
    window, controller = model_in_window(tiny_gpt2_lm, TEXT)
    loaded = load_model(str(tiny_gpt2_lm))
    return window, controller, controller.behaviour, Behaviour(loaded, loaded.run(TEXT))


def _wait(qtbot, control, check):
    qtbot.waitUntil(lambda: control.last_result is not None and bool(check(control.last_result)), timeout=60000)
    return control.last_result


def test_the_panel_shows_the_models_prediction(opened, qtbot, qtmodeltester):
    window, controller, control, reference = opened
    expected = reference.predict(top=10)
    result = control.last_result
    assert [e["id"] for e in result["baseline"]["top"]] == [e["id"] for e in expected["baseline"]["top"]]
    panel = controller.window.predictions
    qtmodeltester.check(panel.table_model)
    qtmodeltester.check(controller.window.lens.table_model)
    assert panel.table_model.rowCount() == 10
    assert panel.table_model.data(panel.table_model.index(0, 0)) == expected["baseline"]["top"][0]["token"]
    assert controller.window.lens.table_model.rowCount() == reference.loaded.num_layers
    assert control.dock.isVisibleTo(window) and control.dock_panel.table_model.rowCount() == 10
    assert "After position" in panel.heading.text() and "no interventions" in panel.heading.text()


def test_ctrl_click_ablates_a_head_marks_it_and_undo_restores_it(opened, qtbot):
    window, controller, control, reference = opened
    grid = controller.window.grid
    controller.window.show()
    qtbot.waitExposed(controller.window)
    controller.window.tabs.setCurrentIndex(0)
    r = grid.cell_rect(1, 2)
    qtbot.mouseClick(grid, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.ControlModifier, r.center().toPoint())
    assert grid.ablations == {(1, 2): "zero"}
    result = _wait(qtbot, control, lambda res: res["intervened"] is not None)
    expected = reference.predict(Interventions().with_ablation(1, 2, "zero"), top=10)
    got = [e["logit"] for e in result["intervened"]["top"]]
    assert np.allclose(got, [e["logit"] for e in expected["intervened"]["top"]], atol=1e-6)
    assert result["intervened"]["interventions"] == ["L1H2 zero"]
    assert "in effect: L1H2 zero" in controller.window.behaviour_bar.state.text()
    # the mark is drawn: the thumbnail's centre is crossed in red
    image = grid.grab().toImage()
    assert image.pixelColor(int(r.center().x()), int(r.center().y())).red() > 150
    control.stack.undo()
    assert grid.ablations == {}
    _wait(qtbot, control, lambda res: res["intervened"] is None)
    control.stack.redo()
    _wait(qtbot, control, lambda res: res["intervened"] is not None)
    # the context menu offers the other ablations and Reset interventions
    menu = grid.menu_for(0, 3)
    labels = [a.text() for a in menu.actions() if a.text()]
    assert labels[:3] == ["Zero-ablate L0H3", "Mean-ablate L0H3", "Patch from the second text L0H3"]
    assert "Reset interventions" in labels


def test_an_edit_in_the_tables_reaches_the_prediction_and_reset_is_one_step(opened, qtbot):
    window, controller, control, reference = opened
    doc = window.document
    session = doc.session
    w = np.array(session.w_query)
    w[1, 0, :] += 2.0
    edited = session.replace(w_query=w)
    doc.edit(edited, "Edit W_q")
    result = _wait(qtbot, control, lambda res: res["intervened"] is not None)
    assert result["intervened"]["interventions"] == ["layer 1 edited"]
    expected = reference.predict(Interventions().with_edit(1, edited), top=10)
    assert np.allclose([e["logit"] for e in result["intervened"]["top"]],
                       [e["logit"] for e in expected["intervened"]["top"]], atol=1e-6)
    control.set_ablation(0, 1, "mean")
    _wait(qtbot, control, lambda res: res["intervened"] and len(res["intervened"]["interventions"]) == 2)
    before = control.stack.count()
    control.reset()
    assert control.stack.count() == before + 1 and control.ablations == {}
    _wait(qtbot, control, lambda res: res["intervened"] is None)
    control.stack.undo()
    assert control.ablations == {(0, 1): "mean"}
    result = _wait(qtbot, control, lambda res: res["intervened"] and len(res["intervened"]["interventions"]) == 2)
    assert result["intervened"]["interventions"] == ["layer 1 edited", "L0H1 mean"]


def test_a_picked_token_a_pair_and_a_bad_one(opened, qtbot):
    window, controller, control, reference = opened
    panel = controller.window.predictions
    panel.set_target(" dog", " ball")
    result = _wait(qtbot, control, lambda res: res["target"] is not None and "versus" in res["target"])
    expected = reference.predict(top=10, target=" dog", versus=" ball")
    assert abs(result["target"]["logit_difference"]["baseline"]
               - expected["target"]["logit_difference"]["baseline"]) < 1e-6
    assert "logit difference" in panel.target_label.text()
    assert control.dock_panel.target_edit.text() == " dog"
    panel.set_target(" dog ball", "")
    _wait(qtbot, control, lambda res: "target_error" in res)
    assert "not one" in panel.target_label.text() and panel.table_model.rowCount() == 10
    # its pieces as the tables write tokens, as `predict --target` says them: not GPT-2's Ġdog
    assert "'␣dog' + '␣ball'" in panel.target_label.text() and "Ġ" not in panel.target_label.text()


def test_an_edit_that_overflows_the_stream_is_not_saved(opened, qtbot, tmp_path):
    # the prediction refuses the edit; Save edited model refused nothing and wrote a model that
    # transformers loads and that predicts NaN (export-model did the same; both refuse it now)
    window, controller, control, reference = opened
    doc = window.document
    w = np.array(doc.session.w_value)
    w[0] = 1e38
    doc.edit(doc.session.replace(w_value=w), "Edit W_v")
    qtbot.waitUntil(lambda: control.last_error is not None and "float32" in control.last_error, timeout=60000)
    control.save(tmp_path / "huge")
    qtbot.waitUntil(lambda: bool(window.errors), timeout=60000)
    assert "cannot save" in window.errors[0] and "after layer 1" in window.errors[0]
    assert not [p for p in tmp_path.iterdir() if "huge" in p.name]   # nor a half-written staging folder


def test_a_patch_text_of_another_length_is_said_in_the_panel(opened, qtbot):
    window, controller, control, reference = opened
    control.set_ablation(1, 0, "patch")
    qtbot.waitUntil(lambda: control.last_error is not None and "second text" in control.last_error, timeout=60000)
    control.set_patch_text("dog")
    qtbot.waitUntil(lambda: control.last_error is not None and "same token length" in control.last_error, timeout=60000)
    assert "same token length" in controller.window.predictions.heading.text()
    control.set_patch_text("The ball fetched the dog and she was happy")
    _wait(qtbot, control, lambda res: res["intervened"] is not None and control.last_error is None)


def test_figures_export_and_the_edited_model_saves(opened, qtbot, tmp_path):
    from attnexplorer.ui.exports.figures import export_panel, render_panel

    window, controller, control, reference = opened
    control.set_ablation(0, 0, "zero")
    _wait(qtbot, control, lambda res: res["intervened"] is not None)
    controller.window.show()
    qtbot.waitExposed(controller.window)
    for panel in (controller.window.predictions, controller.window.lens):
        controller.window.side_tabs.setCurrentWidget(panel)
        image = render_panel(panel)
        assert image.width() > 100
        colours = {(image.pixelColor(x, y).red() // 40, image.pixelColor(x, y).green() // 40)
                   for x in range(0, image.width(), 3) for y in range(0, image.height(), 3)}
        assert (235 // 40, 130 // 40) in colours   # the intervened bars / curves are drawn
        for fmt in ("png", "svg"):
            assert export_panel(panel, tmp_path / f"{panel.kind}.{fmt}").stat().st_size > 1000
    saved = tmp_path / "edited"
    control.save(saved)
    qtbot.waitUntil(lambda: "saved" in controller.window.behaviour_bar.state.text() or bool(window.errors),
                    timeout=60000)
    assert not window.errors and (saved / "model.safetensors").is_file()
    again = load_model(str(saved))
    unedited = Behaviour(again, again.run(TEXT)).predict(top=3)
    assert unedited["baseline"]["top"][0]["id"] == control.last_result["intervened"]["top"][0]["id"]
    # mean ablations cannot be saved: said, nothing written
    control.set_ablation(0, 1, "mean")
    control.save(tmp_path / "mean")
    qtbot.waitUntil(lambda: bool(window.errors), timeout=60000)
    assert "mean ablation" in window.errors[0] and not (tmp_path / "mean").exists()


def test_an_encoder_without_a_head_says_why_and_compares_embeddings(qtbot, tmp_path, monkeypatch, tiny_bert):
    from attnexplorer.ui.model.controller import ModelController

    monkeypatch.setenv("ATTNEXPLORER_CONFIG_DIR", str(tmp_path / "config"))
    doc = SessionDocument(build_preset("pronoun").session)
    window = MainWindow(doc, AppSettings())
    window.errors = []
    window.show_error = lambda title, text: window.errors.append(text)
    window.ask_unsaved = lambda: "discard"
    qtbot.addWidget(window)
    window.model_controller = controller = ModelController(window, doc, window.actions)
    control = controller.behaviour
    try:
        controller.start(str(tiny_bert), TEXT, 0)
        qtbot.waitUntil(lambda: control.last_result is not None or bool(window.errors), timeout=120000)
        assert not window.errors, window.errors
        panel = controller.window.predictions
        assert "without a masked-LM head" in panel.heading.text() and panel.table_model.rowCount() == 0
        assert "No logit lens" in controller.window.lens.note.text()
        control.set_ablation(1, 2, "zero")
        result = _wait(qtbot, control, lambda res: res["embedding"]["cosine"] is not None)
        assert 0 < result["embedding"]["cosine"] < 1
        assert f"{result['embedding']['cosine']:.6f}" in panel.heading.text()
    finally:
        controller.window.close()
        controller.shutdown()
        window.actions.autosaver.discard()
        doc.shutdown()


def test_export_figure_opens_the_windows_export_dialog(opened, qtbot, tmp_path):
    window, controller, control, reference = opened
    controller.window.side_tabs.setCurrentWidget(controller.window.lens)
    dialog = control.export_dialog()
    qtbot.addWidget(dialog)
    label = controller.window.loaded.source.label
    assert [dialog.figure_box.itemText(i) for i in range(dialog.figure_box.count())] == \
        [f"{label}: model view", f"Head view: layer {controller.window.layer}, head 0", "Predictions", "Logit lens",
         "Whole dashboard"]
    assert dialog.target() is controller.window.lens
    dialog.set_format("svg")
    dialog.path_edit.setText(str(tmp_path / "lens.svg"))
    written = dialog.export()
    assert written == tmp_path / "lens.svg" and written.stat().st_size > 1000


def test_the_dock_ablates_the_head_selected_in_the_tables(opened, qtbot):
    window, controller, control, reference = opened
    window.document.selection.set(head=3)
    qtbot.mouseClick(control.dock_panel.ablate_buttons["mean"], Qt.MouseButton.LeftButton)
    assert control.ablations == {(1, 3): "mean"} and controller.window.grid.ablations == {(1, 3): "mean"}
    result = _wait(qtbot, control, lambda res: res["intervened"] is not None)
    assert result["intervened"]["interventions"] == ["L1H3 mean"]
    qtbot.mouseClick(control.dock_panel.ablate_buttons[None], Qt.MouseButton.LeftButton)
    assert control.ablations == {}
    assert not controller.window.predictions.tables_row.isVisibleTo(controller.window)


def test_ctrl_z_in_the_model_window_undoes_ablations_one_step_each(opened, qtbot):
    window, controller, control, reference = opened
    mw, grid = controller.window, controller.window.grid
    mw.show()
    mw.activateWindow()
    qtbot.waitActive(mw)
    mw.tabs.setCurrentIndex(0)
    for layer, head in ((0, 1), (1, 2)):
        qtbot.mouseClick(grid, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.ControlModifier,
                         grid.cell_rect(layer, head).center().toPoint())
    assert grid.ablations == {(0, 1): "zero", (1, 2): "zero"}
    control.reset()
    assert grid.ablations == {}
    grid.setFocus()
    qtbot.keyClick(grid, Qt.Key.Key_Z, Qt.KeyboardModifier.ControlModifier)   # Reset interventions, undone
    assert grid.ablations == {(0, 1): "zero", (1, 2): "zero"}
    qtbot.keyClick(grid, Qt.Key.Key_Z, Qt.KeyboardModifier.ControlModifier)   # the last ablation
    assert grid.ablations == {(0, 1): "zero"}
    qtbot.keyClick(grid, Qt.Key.Key_Z, Qt.KeyboardModifier.ShiftModifier | Qt.KeyboardModifier.ControlModifier)
    assert grid.ablations == {(0, 1): "zero", (1, 2): "zero"}
    _wait(qtbot, control, lambda res: res["intervened"] and len(res["intervened"]["interventions"]) == 2)
    # the tables' own history is not touched: the main window's Undo has nothing to undo
    assert not window.document.undo_stack.canUndo()


def test_the_logit_lens_strip_beside_the_model_view(opened, qtbot):
    window, controller, control, reference = opened
    mw, grid = controller.window, controller.window.grid
    mw.show()
    qtbot.waitExposed(mw)
    expected = reference.predict(top=10, lens=True)["logit_lens"]
    assert [c.token for c in grid.lens] == [e["baseline"]["top"]["token"] for e in expected]
    assert not any(c.changed for c in grid.lens)
    # drawn right of each layer's thumbnails, tinted by the probability, its tooltip the numbers
    last = reference.loaded.num_layers - 1
    rect = grid.lens_rect(last)
    assert rect.left() > grid.cell_rect(last, reference.loaded.num_heads - 1).right()
    assert grid.lens_at(rect.center().x(), rect.center().y()) == last
    assert grid.cell_at(rect.center().x(), rect.center().y()) is None
    image = grid.grab().toImage()
    pixel = image.pixelColor(int(rect.left()) + 2, int(rect.bottom()) - 2)
    assert pixel.blue() > pixel.red() + 20
    assert f"{expected[last]['baseline']['top']['prob']:.3f}" in grid.lens[last].tooltip
    # with an ablation the strip shows the intervened model's tokens, a changed one marked
    control.set_ablation(0, 0, "zero")
    control.set_ablation(1, 1, "zero")
    result = _wait(qtbot, control, lambda res: res["intervened"] is not None)
    edited = reference.predict(Interventions().with_ablation(0, 0, "zero").with_ablation(1, 1, "zero"),
                               top=10, lens=True)["logit_lens"]
    assert [c.token for c in grid.lens] == [e["intervened"]["top"]["token"] for e in edited]
    assert [c.changed for c in grid.lens] == [e["intervened"]["top"]["id"] != e["baseline"]["top"]["id"]
                                              for e in edited]
    assert "with the interventions" in grid.lens[0].tooltip and result["logit_lens"] is not None


def test_the_predictions_dock_keeps_its_bars_legible_at_1280_by_800(opened, qtbot):
    window, controller, control, reference = opened
    window.resize(1280, 800)
    window.show()
    control.dock.raise_()
    qtbot.waitExposed(window)
    control.dock_panel.set_target(" dog", " ball")   # three lines of the pair above the bars
    _wait(qtbot, control, lambda res: res["target"] is not None and "versus" in res["target"])
    qtbot.wait(50)
    assert window.height() <= 800
    bars = control.dock_panel.plot_widget
    assert bars.isVisible() and len(bars.ids) == 6
    view = bars.plot.getViewBox().sceneBoundingRect()
    # a row per token at least a line of text high: the strip it was drew ten rows in 30 px
    assert view.height() / len(bars.ids) >= bars.fontMetrics().height()
    assert view.width() > 200
    # the table, all ten rows, one tab away
    views = control.dock_panel.views
    views.setCurrentWidget(control.dock_panel.table)
    assert control.dock_panel.table.isVisible() and control.dock_panel.table_model.rowCount() == 10


def test_an_edit_starts_one_prediction_before_the_tables_compute(opened, qtbot, monkeypatch):
    # The prediction needs the edited session only: it is asked for as the edit lands, before
    # the tables' own compute and the panels' redraw, and the result that follows asks for
    # nothing more (one job per edit, not one superseded by another).
    window, controller, control, _reference = opened
    doc = window.document
    _wait(qtbot, control, lambda res: res["intervened"] is None)
    asked = []   # at each request: had the tables' result for the edited session come yet?
    submit = control.jobs.submit

    def submitting(*args, **kwargs):
        result = doc.result
        asked.append(result is not None and result.session is doc.session)
        return submit(*args, **kwargs)

    monkeypatch.setattr(control.jobs, "submit", submitting)
    w = np.array(doc.session.w_query)
    w[0, 0, :] += 1.0
    control.last_result = None
    doc.edit(doc.session.replace(w_query=w), "Edit W_q")
    result = _wait(qtbot, control, lambda res: res["intervened"] is not None)
    qtbot.waitUntil(lambda: doc.result is not None and doc.result.session is doc.session)
    assert result["intervened"]["interventions"] == ["layer 1 edited"]
    assert asked == [False], asked


def test_the_prediction_is_drawn_before_its_logit_lens(opened, qtbot, monkeypatch):
    """The job hands the prediction over as soon as it is made: the Predictions panels draw it
    before the logit lens is computed, and the answer with the lens draws the lens only."""
    window, controller, control, reference = opened
    _wait(qtbot, control, lambda res: res["intervened"] is None)
    drawn = []
    for name, panel in (("predictions", controller.window.predictions), ("dock", control.dock_panel),
                        ("lens", controller.window.lens)):
        show = panel.show_result
        monkeypatch.setattr(panel, "show_result",
                            lambda result, name=name, show=show: drawn.append((name, result["logit_lens"] is None))
                            or show(result))
    control.last_result = None
    control.set_ablation(1, 2, "zero")
    result = _wait(qtbot, control, lambda res: res["intervened"] is not None)
    assert drawn == [("predictions", True), ("dock", True), ("lens", False)]
    assert control.last_prediction is result and result["logit_lens"] is not None
    expected = reference.predict(Interventions().with_ablation(1, 2, "zero"), top=10, lens=True)
    assert [e["id"] for e in result["intervened"]["top"]] == [e["id"] for e in expected["intervened"]["top"]]
    assert controller.window.predictions.result["intervened"] is result["intervened"]


def test_edit_undo_in_the_tables_restores_the_models_numbers_and_its_prediction(model_in_window, tiny_llama_lm, qtbot):
    """A Llama layer's W_o (o_proj transposed) came in Fortran order: Edit ▸ Undo of a W_o edit
    moved the history back but left the edited numbers in the tables, and the prediction kept
    the edit."""
    window, controller = model_in_window(tiny_llama_lm, TEXT)
    control = controller.behaviour
    doc = window.document
    session = doc.session
    w = np.array(session.w_out)
    w[0, :] += 3.0
    doc.edit(session.replace(w_out=w), "Edit W_o")
    _wait(qtbot, control, lambda res: res["intervened"] is not None)
    window.undo_action.trigger()
    assert np.array_equal(doc.session.w_out, session.w_out)
    _wait(qtbot, control, lambda res: res["intervened"] is None)
