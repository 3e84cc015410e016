"""File ▸ Open model…: the dialog, the loader thread, the model view, the head view, the badge.

Driven on the tiny random GPT-2 of conftest.py (a real transformers model, loaded through the
same worker thread as MiniLM or SmolLM2 would be)."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import Qt

from attnexplorer.core.inputs.presets import build_preset
from attnexplorer.ui.document import SessionDocument
from attnexplorer.ui.window import MainWindow
from attnexplorer.ui.model.head_view import HeadView
from attnexplorer.ui.model.views import ModelGrid
from attnexplorer.ui.model.open_model_dialog import OpenModelDialog
from attnexplorer.ui.settings import AppSettings

TEXT = "The dog fetched the ball"


@pytest.fixture
def win(qtbot, isolated):
    built = build_preset("pronoun")
    doc = SessionDocument(built.session)
    window = MainWindow(doc, AppSettings())
    window.errors = []
    window.show_error = lambda title, text: window.errors.append(text)
    window.ask_unsaved = lambda: "discard"
    qtbot.addWidget(window)
    yield window
    if window.model_controller is not None:
        window.model_controller.window.close()
        window.model_controller.shutdown()
    window.actions.autosaver.discard()
    doc.shutdown()


def test_grid_paints_each_head_and_reports_clicks(qtbot):
    grid = ModelGrid()
    qtbot.addWidget(grid)
    att = np.zeros((3, 4, 5, 5))
    att[..., 0] = 1.0                 # every query on the first key ...
    att[2, 1] = np.eye(5)             # ... but layer 2, head 1 looks at itself
    grid.set_attentions(att)
    grid.show()
    qtbot.waitExposed(grid)
    image = grid.grab().toImage()
    r = grid.cell_rect(2, 1)
    step = r.width() / 5
    on_diag = image.pixelColor(int(r.left() + 3.5 * step), int(r.top() + 3.5 * step))
    off_diag = image.pixelColor(int(r.left() + 0.5 * step), int(r.top() + 3.5 * step))
    assert on_diag.red() > 200 and on_diag.green() > 200 and on_diag.blue() < 100   # viridis 1: yellow
    assert off_diag.blue() > off_diag.green() and off_diag.red() < 100              # viridis 0: purple
    with qtbot.waitSignal(grid.chosen) as got:
        qtbot.mouseClick(grid, Qt.MouseButton.LeftButton, pos=r.center().toPoint())
    assert got.args == [2, 1]
    assert grid.cell_at(1, 1) is None


def test_a_tall_model_folds_into_bands_that_fit_the_view(qtbot):
    from PySide6.QtWidgets import QScrollArea

    grid = ModelGrid()
    scroll = QScrollArea()
    scroll.setWidget(grid)
    scroll.setWidgetResizable(True)
    qtbot.addWidget(scroll)
    scroll.resize(1250, 700)
    att = np.zeros((30, 9, 6, 6))
    att[..., 0] = 1.0
    att[20, 3] = np.eye(6)            # layer 20 is in the second band
    grid.set_attentions(att)
    scroll.show()
    qtbot.waitExposed(scroll)
    qtbot.waitUntil(lambda: grid.bands == 2)
    assert not scroll.verticalScrollBar().isVisible()     # all 30 layers on screen
    r = grid.cell_rect(20, 3)
    assert r.left() > grid.cell_rect(14, 8).right() and r.bottom() <= scroll.viewport().height()
    image = grid.grab().toImage()
    step = r.width() / 6
    on_diag = image.pixelColor(int(r.left() + 4.5 * step), int(r.top() + 4.5 * step))
    assert on_diag.red() > 200 and on_diag.green() > 200 and on_diag.blue() < 100
    assert grid.cell_at(r.center().x(), r.center().y()) == (20, 3)
    with qtbot.waitSignal(grid.chosen) as got:
        qtbot.mouseClick(grid, Qt.MouseButton.LeftButton, pos=r.center().toPoint())
    assert got.args == [20, 3]


def test_head_view_hover_isolates_a_token(qtbot):
    view = HeadView()
    qtbot.addWidget(view)
    view.resize(500, 300)
    w = np.full((2, 4, 4), 0.25)
    view.set_layer(["a", "b", "c", "d"], w)
    view.show()
    qtbot.waitExposed(view)
    qtbot.mouseMove(view, view.token_rect("query", 2).center().toPoint())
    qtbot.waitUntil(lambda: view.hover == ("query", 2))
    qtbot.mouseMove(view, view.token_rect("key", 0).center().toPoint())
    qtbot.waitUntil(lambda: view.hover == ("key", 0))
    view.set_head(None)
    assert view.head is None


def test_dialog_refuses_an_empty_text_and_a_missing_model(qtbot, tmp_path):
    dialog = OpenModelDialog(None, spec=str(tmp_path / "nothing"), text="hello")
    qtbot.addWidget(dialog)
    dialog.accept()
    assert "no such model" in dialog.problem.text() and dialog.result() == 0
    dialog.model_box.setCurrentText("minilm")
    dialog.text_edit.setText("  ")
    dialog.accept()
    assert "text is empty" in dialog.problem.text()
    dialog.text_edit.setText("hello")
    assert dialog.check() is None and dialog.spec() == "minilm"
    # a probe is refused in the words `heads --probe` uses (one parser), and accepted as it accepts it
    from attnexplorer.models.head_scores import parse_probe
    from attnexplorer.models.sources import ModelError

    for bad in ("repeated:0", "repeated:x", "repeated:5:-1"):
        dialog.text_edit.setText(bad)
        with pytest.raises(ModelError) as refused:
            parse_probe(bad)
        assert dialog.check() == str(refused.value)
    dialog.text_edit.setText("repeated:12:3")
    assert dialog.check() is None


def test_open_model_fills_the_views_and_the_tables(win, qtbot, tiny_gpt2):
    assert win.open_model_action.text() == "Open &model…"
    from attnexplorer.ui.model.controller import ModelController

    win.model_controller = controller = ModelController(win, win.document, win.actions)
    controller.start(str(tiny_gpt2), TEXT, 1)
    qtbot.waitUntil(lambda: controller.window.run is not None or bool(win.errors), timeout=120000)
    assert not win.errors, win.errors
    run = controller.window.run
    assert controller.window.isVisible()
    assert run.attentions.shape[:2] == (2, 4)
    assert tuple(win.document.session.tokens) == run.tokens
    assert win.document.session.heads == 4
    # the document is of the model: the model, its run on the text, the layer in the tables
    model = win.document.model
    assert model.run is run and model.text == TEXT and model.layer == 1 and model.model is controller.window.loaded
    qtbot.waitUntil(lambda: controller.window.badge.text().startswith("Tables: layer 1: matches the model"), timeout=30000)
    # another thumbnail: layer 0, head 3 goes into the tables with that head selected
    with qtbot.waitSignal(win.document.result_changed, timeout=30000):
        controller.window.grid.chosen.emit(0, 3)
    assert win.document.selection.current.head == 3 and controller.window.layer == 0
    qtbot.waitUntil(lambda: controller.window.badge.text().startswith("Tables: layer 0: matches the model"),
                    timeout=30000)
    # an edit in the tables: the badge says by how much the weights now differ
    session = win.document.session
    x = session.embeddings.copy()
    x[2, 0] += 3.0   # one component: a whole row shifted alike would vanish in the LayerNorm
    with qtbot.waitSignal(win.document.result_changed, timeout=30000):
        win.document.edit(session.replace(embeddings=x), "Edit X")
    assert "edited: differs from the model by up to" in controller.window.badge.text()
    assert win.document.model.layer == 0  # an edit keeps the document of the model
    win.actions.new_session("dessert")  # a preset: a document of no model
    assert win.document.model is None
    assert controller.window.badge.text() == "the tables hold another session"


def test_a_bad_model_is_a_message_and_changes_nothing(win, qtbot, tmp_path):
    from attnexplorer.ui.model.controller import ModelController

    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF\x03\x00\x00\x00")
    before = win.document.session
    win.model_controller = controller = ModelController(win, win.document, win.actions)
    controller.start(str(bad), TEXT, 0)
    qtbot.waitUntil(lambda: bool(win.errors), timeout=60000)
    assert "broken.gguf" in win.errors[0] and "\n" not in win.errors[0]
    assert win.document.session is before and controller.window.run is None


def test_cancel_drops_the_load(win, qtbot, tiny_bert):
    from attnexplorer.ui.model.controller import ModelController

    before = win.document.session
    win.model_controller = controller = ModelController(win, win.document, win.actions)
    controller.start(str(tiny_bert), TEXT, 0)
    controller.cancel()
    qtbot.wait(200)
    controller.shutdown()   # waits for the worker: whatever it finished is dropped
    qtbot.wait(50)
    assert controller.window.run is None and win.document.session is before and not win.errors



def test_closing_the_main_window_closes_the_model_window_and_stops_its_work(win, qtbot, tiny_gpt2_lm):
    """The model window outlived the main window whose tables it feeds (the app kept running, a
    generation went on); and a load still in progress opened it after the main window closed."""
    from attnexplorer.ui.model.controller import ModelController

    win.model_controller = controller = ModelController(win, win.document, win.actions)
    win.show()
    controller.start(str(tiny_gpt2_lm), TEXT, 1)
    qtbot.waitUntil(lambda: controller.behaviour.last_result is not None or bool(win.errors), timeout=120000)
    assert controller.window.isVisible() and not win.errors
    win.close()
    assert not controller.window.isVisible()
    # a load in progress when the main window closes never shows the model window
    second = MainWindow(SessionDocument(build_preset("pronoun").session), AppSettings())
    second.show_error = lambda title, text: win.errors.append(text)
    second.ask_unsaved = lambda: "discard"
    qtbot.addWidget(second)
    second.model_controller = other = ModelController(second, second.document, second.actions)
    second.show()
    other.start(str(tiny_gpt2_lm), TEXT, 1)
    second.close()
    qtbot.wait(300)
    assert other.window.run is None and not other.window.isVisible() and not win.errors
    second.actions.autosaver.discard()
    second.document.shutdown()

def _held_load(monkeypatch, go):
    """``open_and_run`` made to wait for ``go``, report once, then fail: a load whose end is
    queued right behind its last report."""
    from attnexplorer.core.errors import AttnExplorerError
    from attnexplorer.ui.model import controller as model_controller

    def load(job, models, spec, text, layer):
        go.wait(60)
        job.progress(0.5, f"layer 1 of 2 of {text}")
        raise AttnExplorerError(f"{text} ended")

    monkeypatch.setattr(model_controller, "open_and_run", load)
    return model_controller.ModelController


def test_the_loads_end_queued_behind_a_report_runs_after_it_not_inside(win, qtbot, monkeypatch):
    """On the shown window-modal progress dialog, QProgressDialog.setValue processes events: the
    load's end (queued behind the report) closed and deleted the dialog under setValue, which then
    read the dead bar (a segfault, 2 runs in 4). A report must not run the event loop."""
    import threading

    import shiboken6

    go = threading.Event()
    win.model_controller = controller = _held_load(monkeypatch, go)(win, win.document, win.actions)
    inside, bars = [], []
    report = controller.show_progress

    def on_progress(*args):   # the report as the loader delivers it, watched
        inside.append(True)
        try:
            report(*args)
        finally:
            inside.pop()
        bars.append(None if controller.progress_dialog is None else (controller.progress_dialog.value(),
                                                               controller.progress_dialog.labelText()))

    controller.show_progress = on_progress
    win.show_error = lambda title, text: win.errors.append((text, bool(inside)))
    controller.start("minilm", "the text", 0)
    dialog = controller.progress_dialog
    qtbot.waitUntil(dialog.isVisible, timeout=10000)   # shown: from now setValue would process events
    go.set()
    assert controller.wait(30)   # the report, then the end, both queued
    qtbot.waitUntil(lambda: bool(win.errors), timeout=10000)
    assert bars == [(50, "layer 1 of 2 of the text")]   # the report moved the bar, the dialog alive
    assert win.errors == [("the text ended", False)]    # the end came after the report, not inside it
    assert controller.progress_dialog is None
    qtbot.waitUntil(lambda: not shiboken6.isValid(dialog), timeout=10000)   # closed and deleted
    report(1.0, "a report after the end")   # finds no dialog: nothing to touch
    assert controller.progress_dialog is None and win.errors == [("the text ended", False)]


def test_a_load_started_over_another_closes_the_first_ones_dialog(win, qtbot, monkeypatch):
    import threading

    import shiboken6

    go = threading.Event()
    win.model_controller = controller = _held_load(monkeypatch, go)(win, win.document, win.actions)
    controller.start("minilm", "the first text", 0)
    first = controller.progress_dialog
    controller.start("minilm", "the second text", 0)   # as the Heads tab's Open probe does
    assert controller.progress_dialog is not first and not first.isVisible()
    go.set()
    qtbot.waitUntil(lambda: bool(win.errors), timeout=10000)
    assert win.errors == ["the second text ended"]   # the first load's end is dropped
    qtbot.waitUntil(lambda: not shiboken6.isValid(first), timeout=10000)
    assert controller.progress_dialog is None


def test_without_the_extra_open_model_says_what_to_install(win, monkeypatch):
    from attnexplorer.ui.model import controller as model_controller

    monkeypatch.setattr(model_controller, "missing_dependencies",
                        lambda: 'opening a model needs gguf: python3 -m pip install "attnexplorer[models]"')
    before = win.document.session
    win.open_model()
    assert win.errors == ['opening a model needs gguf: python3 -m pip install "attnexplorer[models]"']
    assert win.document.session is before


def test_a_long_text_opens_with_progress_pooled_thumbnails_and_a_streamed_layer(win, qtbot, tiny_llama, monkeypatch):
    """A text run the long way (no n × n kept) and its layer computed the streamed way: the
    progress dialog follows the layers, the head view is off, the badge checks the outputs."""
    from attnexplorer.core.compute.long import result as long_result
    from attnexplorer.models import forward as own_forward, loading
    from attnexplorer.ui.model.controller import ModelController

    monkeypatch.setattr(loading, "DENSE_RUN_BYTES", 0)
    monkeypatch.setattr(own_forward, "THUMBNAIL_CELLS", 4)
    monkeypatch.setattr(long_result, "DENSE_BUDGET", 0)
    win.model_controller = controller = ModelController(win, win.document, win.actions)
    said = []
    controller.progressed.connect(lambda _fraction, message: said.append(message))
    controller.start(str(tiny_llama), "The dog fetched the ball and she was happy because life is short", 1)
    qtbot.waitUntil(lambda: controller.window.run is not None or bool(win.errors), timeout=120000)
    assert not win.errors, win.errors
    run = controller.window.run
    assert run.long and run.attentions is None and run.thumbnails.shape[2] <= 4
    qtbot.waitUntil(lambda: any("layer 2 of 2" in m for m in said), timeout=5000)
    assert not controller.window.tabs.isTabEnabled(1)
    qtbot.waitUntil(lambda: controller.window.badge.text().startswith(
        "Tables: layer 1: matches the model: attention output max |Δ| = "), timeout=30000)
    assert "log Σ exp" in controller.window.badge.text()   # the tables were computed the streamed way
    assert win.document.session.heads == 4 and tuple(win.document.session.tokens) == run.tokens
    session = win.document.session
    x = session.embeddings.copy()
    x[2, 0] += 3.0
    with qtbot.waitSignal(win.document.result_changed, timeout=30000):
        win.document.edit(session.replace(embeddings=x), "Edit X")
    qtbot.waitUntil(lambda: "edited: the attention output differs" in controller.window.badge.text(), timeout=30000)


def test_the_dialog_reads_a_long_text_from_a_file(qtbot, tmp_path):
    dialog = OpenModelDialog(None, spec="minilm", text="hello")
    qtbot.addWidget(dialog)
    page = tmp_path / "page.txt"
    page.write_text("word " * 9000 + "\nend", encoding="utf-8")   # past QLineEdit's default 32,767
    assert dialog.read_text(str(page))
    assert dialog.text_edit.text().endswith("word end") and len(dialog.text_edit.text()) == 5 * 9000 + 3
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"\xff\xfe\x00bad")
    assert not dialog.read_text(str(bad))
    assert "bad.txt: cannot read it" in dialog.problem.text()
    assert dialog.text_edit.text().endswith("word end")


def test_the_heads_tab_colours_the_model_view_and_ranks_the_heads(win, qtbot, tiny_gpt2, tmp_path):
    from attnexplorer.models.head_scores import HeadScores, parse_scores
    from attnexplorer.ui.model.controller import ModelController

    win.model_controller = controller = ModelController(win, win.document, win.actions)
    controller.start(str(tiny_gpt2), TEXT, 0)
    qtbot.waitUntil(lambda: controller.window.run is not None or bool(win.errors), timeout=120000)
    assert not win.errors, win.errors
    window = controller.window
    panel, grid, run = window.head_scores, window.grid, window.run
    assert panel.colour_box.itemText(0) == "none" and grid.colouring is None
    assert "first-token" in [panel.colour_box.itemText(i) for i in range(panel.colour_box.count())]
    panel.colour_by("first-token")
    # the values are the run's weights on key 0, averaged over the queries (computed here)
    expected = run.attentions[..., 0].mean(-1)
    name, values = grid.colouring
    assert name == "first-token" and np.abs(values - expected).max() < 1e-6
    top = np.unravel_index(np.argmax(expected), expected.shape)
    low = np.unravel_index(np.argmin(expected), expected.shape)
    assert grid.ring_colour(*top).alpha() == 255 and grid.ring_colour(*low).alpha() == 0
    assert (panel.table.item(0, 0).text(), panel.table.item(0, 1).text()) == (f"L{top[0]}", f"H{top[1]}")
    assert panel.table.rowCount() == 8 and "first token" in panel.definition.text()
    assert ", first-token " in grid.cell_tooltip(*top)
    with qtbot.waitSignal(window.layer_chosen) as got:
        panel.table.cellClicked.emit(0, 0)
    assert got.args == [int(top[0]), int(top[1])]
    panel.layer_box.setCurrentText("layer 1")   # the ranked list of one layer; the rings stay on all
    assert panel.table.rowCount() == 4
    assert {panel.table.item(r, 0).text() for r in range(4)} == {"L1"}
    assert [float(panel.table.item(r, 2).text()) for r in range(4)] == sorted(
        [round(float(v), 3) for v in expected[1]], reverse=True)
    assert grid.colouring[1].shape == (2, 4)
    panel.layer_box.setCurrentText("all layers")
    # the heatmap of the score shown exports like every panel's figure
    from attnexplorer.ui.exports.figures import export_panel

    image = panel.image.image
    assert image.shape == (2, 4) and np.abs(image - expected).max() < 1e-6
    for fmt in ("png", "svg"):
        written = export_panel(panel, tmp_path / f"heads.{fmt}")
        assert written.stat().st_size > 1000
    assert "first-token" in (tmp_path / "heads.svg").read_text()
    panel.colour_by("none")
    assert grid.colouring is None and panel.table.rowCount() == 0 and panel.export_item() is None


def test_a_heads_tab_let_go_of_is_freed(qapp):
    """Nothing of the tab's own (a connection to its child's signal) keeps it alive: a lambda on
    its layer box did, so a tab drawn for ``heads --figures`` lived on till exit, where PySide6
    6.12's deletion of it crashed the command (-11, "shared QObject was deleted directly")."""
    import gc
    import weakref

    from attnexplorer.ui.model.head_scores_panel import HeadScoresPanel

    panel = HeadScoresPanel()
    gone = weakref.ref(panel)
    panel.shutdown()
    del panel
    gc.collect()
    assert gone() is None


def test_the_heads_tab_attributes_a_token_on_a_job(win, qtbot, tiny_gpt2_lm):
    from attnexplorer.models.head_attribution import ablation_sweep, direct_logit_attribution, pick
    from attnexplorer.ui.model.controller import ModelController

    win.model_controller = controller = ModelController(win, win.document, win.actions)
    controller.start(str(tiny_gpt2_lm), TEXT, 0)
    qtbot.waitUntil(lambda: controller.window.run is not None or bool(win.errors), timeout=120000)
    panel, grid = controller.window.head_scores, controller.window.grid
    behaviour = panel.behaviour
    assert behaviour is not None
    panel.target_edit.setText(" dogball")
    panel.attribute()
    assert "not one" in panel.status.text() and panel.run_button.isEnabled()
    panel.target_edit.setText(" ball")
    panel.attribute()
    qtbot.waitUntil(lambda: panel.colour_box.currentText() == "dla ' ball'", timeout=30000)
    expected, rest, logit = direct_logit_attribution(behaviour, pick(behaviour, " ball"))
    assert np.abs(grid.colouring[1] - expected).max() < 1e-9 and "+ rest" in panel.status.text()
    biggest = np.unravel_index(np.argmax(np.abs(expected)), expected.shape)
    assert grid.ring_colour(*biggest).alpha() == 255
    panel.kind_box.setCurrentText("zero-ablate each head")
    panel.attribute()
    qtbot.waitUntil(lambda: panel.colour_box.currentText() == "ablate:zero ' ball'", timeout=60000)
    effects, _base = ablation_sweep(behaviour, pick(behaviour, " ball"), "zero")
    assert np.abs(grid.colouring[1] - effects).max() < 1e-9
    assert panel.run_button.isEnabled() and not panel.cancel_button.isEnabled()
    panel.kind_box.setCurrentText("mean-ablate each head")
    panel.attribute()
    panel.cancel()
    assert panel.status.text() == "cancelled" and panel.run_button.isEnabled()
    assert panel.jobs.wait(60)
    qtbot.wait(50)   # let any answer already posted arrive: a cancelled job's is dropped
    assert panel.colour_box.findText("ablate:mean ' ball'") < 0


def test_a_probe_opens_as_the_documents_text_with_its_induction_score(win, qtbot, tiny_gpt2_lm):
    from attnexplorer.models.head_scores import HeadScores, make_probe, parse_scores
    from attnexplorer.ui.model.controller import ModelController

    win.model_controller = controller = ModelController(win, win.document, win.actions)
    controller.start(str(tiny_gpt2_lm), TEXT, 1)
    qtbot.waitUntil(lambda: controller.window.run is not None or bool(win.errors), timeout=120000)
    window, panel = controller.window, controller.window.head_scores
    panel.probe_edit.setText("repeated:4:x")
    panel.open_probe()
    assert "repeated:N or repeated:N:SEED" in panel.status.text() and window.run.text == TEXT
    panel.probe_edit.setText("repeated:6:2")
    panel.open_probe()
    qtbot.waitUntil(lambda: window.run.text == "repeated:6:2" or bool(win.errors), timeout=120000)
    assert not win.errors, win.errors
    loaded, run = window.loaded, window.run
    probe = make_probe(loaded, "repeated:6:2")
    assert run.ids == probe.ids and len(run.tokens) == 12 and run.tokens[:6] == run.tokens[6:]
    assert tuple(win.document.session.tokens) == run.tokens and win.document.model.layer == 1
    scorer = HeadScores(parse_scores("induction"), probe.ids, loaded.num_layers, loaded.num_heads, probe)
    loaded.run_ids(list(probe.ids), list(run.pieces), probe.name, observe=scorer)
    panel.colour_by("induction")
    assert np.abs(window.grid.colouring[1] - scorer.result()["induction"]).max() < 1e-12
    # the probe's thumbnails: one per layer and head, each where the grid says it is
    grid = window.grid
    cells = [(layer, head) for layer in range(loaded.num_layers) for head in range(loaded.num_heads)]
    assert all(grid.cell_at(grid.cell_rect(*cell).center().x(), grid.cell_rect(*cell).center().y()) == cell
               for cell in cells)
    past = grid.cell_rect(loaded.num_layers, 0).center()   # where a layer more would be: nothing
    assert grid.cell_at(past.x(), past.y()) is None
    # the Heads tab's patch sweep takes each head from a second text; another length is said in the tab
    panel.target_edit.setText(" ball")
    panel.kind_box.setCurrentText("patch each head")
    assert panel.patch_edit.isEnabled()
    panel.attribute()
    assert "second text" in panel.status.text() and panel.run_button.isEnabled()
    panel.patch_edit.setText("the dog")
    panel.attribute()
    qtbot.waitUntil(lambda: "same token length" in panel.status.text(), timeout=30000)
    assert panel.run_button.isEnabled() and panel.colour_box.findText("ablate:patch ' ball'") < 0
    panel.patch_edit.setText("repeated:6:5")
    panel.attribute()
    qtbot.waitUntil(lambda: panel.colour_box.currentText() == "ablate:patch ' ball'", timeout=60000)
    from attnexplorer.models.head_attribution import ablation_sweep, pick

    behaviour = panel.behaviour
    effects, _base = ablation_sweep(behaviour, pick(behaviour, " ball"), "patch", patch_text="repeated:6:5")
    assert np.abs(window.grid.colouring[1] - effects).max() < 1e-9 and np.abs(effects).max() > 1e-6


def test_the_model_view_and_the_head_view_export_as_figures(win, qtbot, tiny_gpt2, tmp_path):
    """Through the window's Export figure… dialog and the figure route (portable SVG): the model view
    with its rings, the head view of one head and of all heads; the SVG drawn by cairosvg too."""
    import cairosvg
    from PySide6.QtGui import QImage

    from attnexplorer.ui.model.controller import ModelController

    win.model_controller = controller = ModelController(win, win.document, win.actions)
    controller.start(str(tiny_gpt2), TEXT, 1)
    qtbot.waitUntil(lambda: controller.window.run is not None or bool(win.errors), timeout=120000)
    window = controller.window
    window.head_scores.colour_by("first-token")
    # The prediction is a job of its own: the dashboard holds its panel once it is drawn.
    qtbot.waitUntil(lambda: window.predictions.export_item() is not None or bool(win.errors), timeout=60000)
    assert not win.errors
    dialog = controller.behaviour.export_dialog()
    titles = [dialog.figure_box.itemText(i) for i in range(dialog.figure_box.count())]
    assert titles[0].endswith(": model view, rings by first-token") and titles[1] == "Head view: layer 1, head 0"
    written = {}
    dialog.scale_spin.setValue(1.0)   # the PNG at the figure's own size: its pixels are the twin's
    for index, name in ((0, "model"), (1, "head")):
        dialog.figure_box.setCurrentIndex(index)
        for fmt in ("png", "svg", "pdf"):
            dialog.set_format(fmt)
            dialog.path_edit.setText(str(tmp_path / f"{name}.{fmt}"))
            dialog.export()
            assert dialog.error_label.isHidden(), dialog.error_label.text()
            written[name, fmt] = tmp_path / f"{name}.{fmt}"
    from attnexplorer.ui.exports.figure_dialog import DASHBOARD

    dialog.set_target(DASHBOARD)   # every figure of the window in one, each laid out in its cell
    dialog.set_format("svg")
    dialog.path_edit.setText(str(tmp_path / "dashboard.svg"))
    dialog.export()
    assert dialog.error_label.isHidden(), dialog.error_label.text()
    dashboard = (tmp_path / "dashboard.svg").read_text()
    assert ">L1</text>" in dashboard and ">queries</text>" in dashboard and "Predictions" in dashboard
    dialog.close()
    assert written["model", "pdf"].read_bytes().startswith(b"%PDF")
    svg = written["model", "svg"].read_text()
    assert all(f">{label}</text>" in svg for label in ("L0", "L1", "H0", "H3")) and "rings by first-token</text>" in svg
    head_svg = written["head", "svg"].read_text()
    assert all(token in head_svg for token in ("queries", "keys", "fetched"))
    # the figure is the on-screen view's picture: the model view's strongest ring is orange in it
    png = QImage(str(written["model", "png"]))
    top = np.unravel_index(np.argmax(window.grid.colouring[1]), window.grid.colouring[1].shape)
    twin = window.model_view_figure.twin
    ring = twin.cell_rect(*top).adjusted(-1, -1, 1, 1)
    band = 30   # the title band above the figure's body
    colour = png.pixelColor(int(ring.left()), int(ring.center().y()) + band)
    assert (colour.red(), colour.green() < 160, colour.blue() < 80) == (255, True, True), colour.name()
    cairosvg.svg2png(url=str(written["model", "svg"]), write_to=str(tmp_path / "model-cairo.png"))
    drawn = QImage(str(tmp_path / "model-cairo.png"))
    assert drawn.width() == png.width() and drawn.height() == png.height()
    # all heads: the head box's "all heads" is the figure's too; a long run has no head view figure
    window.head_box.setCurrentIndex(0)
    assert window.head_view_figure.export_item() is not None and window.head_view_figure.title.endswith("all heads")
