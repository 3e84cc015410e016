"""File ▸ Open model…: pick a model and a text, load it off the GUI thread, and explore it.

``ModelController`` (owned by the main window) runs the whole path:
1. ``OpenModelDialog`` asks for the model (a packaged one, a folder or a .gguf file), the text
   and the layer, and refuses what ``models.resolve`` refuses before anything is loaded;
2. a background job (``app.jobs.JobRunner``) opens the model (kept in the runner's state for
   the next open of the same model) and runs it on the text, reporting progress to a
   cancellable progress dialog (while the model runs, layer by layer; a long text stops at the
   next layer or block when cancelled); a cancelled or superseded load's result is dropped;
3. ``ModelWindow`` shows the model view (every layer × head) and the head view, and the chosen
   layer goes into the tables as a session, unsaved, with the head selected: the document is
   then of the model (``document.model``: the model, the run on the text, the layer). A badge
   says how far the tables' weights are from the model's for that layer. A long text (``ModelRun.long``)
   keeps no n × n weights: the thumbnails are max-pooled, the head view (one line per query-key
   pair) is not drawn, and the badge compares the tables' attention output and row normalisers
   with the model's (``models.views.long_differences``).

Every refusal is a message in the dialog or a message box; nothing in the document changes
until a layer is ready.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtWidgets import (QComboBox, QDialog, QDialogButtonBox, QFileDialog, QFormLayout, QHBoxLayout,
                               QLabel, QLineEdit, QProgressDialog, QPushButton, QScrollArea, QSpinBox, QSplitter,
                               QTabWidget, QVBoxLayout, QWidget)

from ..app.document import ModelLayer
from ..app.jobs import JobRunner
from ..core.errors import AttnExplorerError
from ..models import missing_dependencies, packaged_models, resolve
from ..models.views import badge_text, long_badge_text, long_differences, max_difference
from .gui_thread import GuiThread
from .model_views import HeadView, ModelGrid

DEFAULT_TEXT = "The dog fetched the ball and she was happy"
# How much of a text the window title and the header quote: a 4,096-token text is a book page.
QUOTED_CHARS, QUOTED_TOKENS = 60, 48


def _quote(text: str, limit: int = QUOTED_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


class OpenModelDialog(QDialog):
    """Model, text, layer. ``accept`` only once the model resolves and the text is not empty."""

    def __init__(self, parent=None, spec: str = "minilm", text: str = DEFAULT_TEXT, layer: int = 0):
        super().__init__(parent)
        self.setWindowTitle("Open model")
        self.model_box = QComboBox()
        self.model_box.setEditable(True)
        for name, what, installed in packaged_models():
            self.model_box.addItem(name if installed else f"{name} (not installed)", name)
            self.model_box.setItemData(self.model_box.count() - 1, what, Qt.ItemDataRole.ToolTipRole)
        self.model_box.setCurrentText(spec)
        folder = QPushButton("Folder…")
        folder.clicked.connect(self._browse_folder)
        gguf = QPushButton(".gguf file…")
        gguf.clicked.connect(self._browse_gguf)
        row = QHBoxLayout()
        row.addWidget(self.model_box, 1)
        row.addWidget(folder)
        row.addWidget(gguf)
        self.text_edit = QLineEdit(text)
        self.text_edit.setMaxLength(1 << 24)   # Qt's default, 32,767 characters, is ~7,000 tokens
        self.text_edit.setToolTip("The text the model reads, or repeated:N[:SEED]: N random tokens then the same N "
                                  "again (the induction probe)")
        from_file = QPushButton("Text file…")
        from_file.setToolTip("Read the text from a UTF-8 text file (a long document)")
        from_file.clicked.connect(self._browse_text)
        text_row = QHBoxLayout()
        text_row.addWidget(self.text_edit, 1)
        text_row.addWidget(from_file)
        self.layer_spin = QSpinBox()
        self.layer_spin.setRange(0, 999)
        self.layer_spin.setValue(layer)
        self.problem = QLabel("")
        self.problem.setWordWrap(True)
        self.problem.setStyleSheet("color: #b00020")
        form = QFormLayout()
        form.addRow("Model", row)
        form.addRow("Text", text_row)
        form.addRow("Layer", self.layer_spin)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Open | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(self.problem)
        layout.addWidget(buttons)
        self.resize(560, self.sizeHint().height())

    def spec(self) -> str:
        index = self.model_box.findText(self.model_box.currentText())
        data = self.model_box.itemData(index) if index >= 0 else None
        return str(data or self.model_box.currentText()).strip()

    def _browse_folder(self) -> None:
        path = QFileDialog.getExistingDirectory(self, "A model folder (config.json, *.safetensors)")
        if path:
            self.model_box.setCurrentText(path)

    def _browse_gguf(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "A GGUF model file", "", "GGUF models (*.gguf)")
        if path:
            self.model_box.setCurrentText(path)

    def _browse_text(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "A text for the model to read", "", "Text (*.txt);;All files (*)")
        if path:
            self.read_text(path)

    def read_text(self, path: str) -> bool:
        """Put the file's text into the box; a message under the form when it cannot be read."""
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            reason = err.strerror if isinstance(err, OSError) and err.strerror else "not UTF-8 text"
            self.problem.setText(f"{Path(path).name}: cannot read it: {reason}")
            return False
        self.text_edit.setText(" ".join(text.split()))
        self.problem.setText("")
        return True

    def check(self) -> str | None:
        """Why the dialog cannot be accepted as filled in, or None."""
        from ..models.head_scores import is_probe, parse_probe

        if not self.text_edit.text().strip():
            return "the text is empty: type a sentence for the model to read"
        if is_probe(self.text_edit.text()):
            try:
                parse_probe(self.text_edit.text())   # refused in the words `heads --probe` uses
            except AttnExplorerError as err:
                return str(err)
        try:
            resolve(self.spec())
        except AttnExplorerError as err:
            return str(err)
        return None

    def accept(self) -> None:
        problem = self.check()
        if problem:
            self.problem.setText(problem)
            return
        super().accept()


def _open_and_run(job, models: dict, spec: str, text: str, layer: int):
    """On the loader's worker: open ``spec`` (or reuse it from ``models``, the runner's state),
    run it on ``text`` and build ``layer``'s session here too: at 4,096 tokens checking and
    freezing its arrays takes a quarter of a second that the GUI thread would otherwise block.
    Returns (loaded, run, session, behaviour, head scores); a cancelled load raises and its answer is dropped."""
    from ..io.session_file import session_from_dict
    from ..models.loading import Cancelled, load_model

    def check() -> bool:
        return job.cancelled

    source = resolve(spec)
    loaded = models.get(source.path)
    if loaded is None:
        loaded = load_model(source, job.progress, check)
        models[source.path] = loaded
    if job.cancelled:
        raise Cancelled()
    job.progress(0.0, f"running {source.label} on the text")
    from ..models.head_scores import DEFAULT, HeadScores, document, parse_scores

    # a text, or a repeated:N[:SEED] probe (its random ids shown as tokens like any text's)
    ids, pieces, label, probe = document(loaded, text)
    # every head score, made during the forward from each block of rows (nothing n × n kept)
    scorer = HeadScores(parse_scores(DEFAULT), ids, loaded.num_layers, loaded.num_heads, probe)
    run = loaded.run_ids(ids, pieces, label, job.progress, check, observe=scorer)
    session = None
    if 0 <= layer < loaded.num_layers:
        session = session_from_dict(loaded.layer_parts(run, layer), f"{loaded.source.label} layer {layer}")
    from ..models.interventions import Behaviour

    return loaded, run, session, Behaviour(loaded, run), scorer.result()


class ModelWindow(QWidget):
    """The model view and the head view of one model run, and the badge."""

    layer_chosen = Signal(int, int)   # layer, head

    def __init__(self, parent=None):
        super().__init__(parent, Qt.WindowType.Window)
        self.loaded = None
        self.run = None
        self.layer = 0
        self.header = QLabel("")
        self.header.setWordWrap(True)
        self.grid = ModelGrid()
        self.grid.chosen.connect(self.layer_chosen)
        scroll = QScrollArea()
        scroll.setWidget(self.grid)
        scroll.setWidgetResizable(True)
        self.head_view = HeadView()
        from .model_figures import HeadViewFigure, ModelViewFigure

        # the two views as figures, exported by the window's Export figure… with the side panels
        self.model_view_figure = ModelViewFigure(self.grid)
        self.head_view_figure = HeadViewFigure(self.head_view)
        self.head_box = QComboBox()
        self.head_box.currentIndexChanged.connect(self._on_head_box)
        self.layer_label = QLabel("")
        head_page = QWidget()
        controls = QHBoxLayout()
        controls.addWidget(self.layer_label)
        controls.addStretch(1)
        controls.addWidget(QLabel("Show"))
        controls.addWidget(self.head_box)
        page = QVBoxLayout(head_page)
        page.addLayout(controls)
        page.addWidget(self.head_view, 1)
        self.tabs = QTabWidget()
        self.tabs.addTab(scroll, "Model view")
        self.tabs.addTab(head_page, "Head view")
        self.badge = QLabel("")
        self.badge.setObjectName("modelBadge")
        from .behaviour_bar import BehaviourBar
        from .predictions import LogitLensPanel, PredictionsPanel

        self.predictions = PredictionsPanel()
        self.lens = LogitLensPanel()
        self.behaviour_bar = BehaviourBar()
        side = QTabWidget()
        side.addTab(self.predictions, "Predictions")
        side.addTab(self.lens, "Logit lens")
        from .head_scores_panel import HeadScoresPanel

        self.head_scores = HeadScoresPanel()
        self.head_scores.coloured.connect(self.grid.set_colouring)
        self.head_scores.chosen.connect(self._on_ranked_head)
        side.addTab(self.head_scores, "Heads")
        from .generation_panel import GenerationPanel

        self.generation = GenerationPanel()
        side.addTab(self.generation, "Generate")
        self.side_tabs = side
        split = QSplitter(Qt.Orientation.Horizontal)
        split.addWidget(self.tabs)
        split.addWidget(side)
        split.setStretchFactor(0, 2)
        split.setStretchFactor(1, 1)
        split.setSizes([850, 430])   # SmolLM2's 30 × 9 thumbnails still fold into two bands at 1280 wide
        self.splitter = split
        layout = QVBoxLayout(self)
        layout.addWidget(self.header)
        layout.addWidget(self.behaviour_bar)
        layout.addWidget(split, 1)
        layout.addWidget(self.badge)
        self.resize(1280, 800)

    def show_run(self, loaded, run, layer: int, head: int = 0, scores=None) -> None:
        """``scores``: the head scores made during the run (name → layers × heads), for the Heads tab."""
        self.loaded, self.run = loaded, run
        self.setWindowTitle(f"{loaded.source.label}: attention on “{_quote(run.text)}”")
        shown = " ".join(run.tokens[:QUOTED_TOKENS]) + (" …" if len(run.tokens) > QUOTED_TOKENS else "")
        pooled = (" Thumbnails are max-pooled (each pixel the largest weight of its block); the tables "
                  "show the layer exactly.") if run.long else ""
        self.header.setText(f"{loaded.describe()}. {len(run.tokens):,} tokens: {shown}.{pooled} "
                            "Click a thumbnail to load that layer into the tables.")
        self.grid.set_attentions(run.thumbnails)
        self.model_view_figure.heading = f"{loaded.source.label}: model view"
        self.head_scores.set_scores(scores or {})
        # One line per query-key pair: at thousands of tokens that draws nothing readable.
        self.tabs.setTabEnabled(1, not run.long)
        self.tabs.setTabToolTip(1, f"not drawn at {len(run.tokens):,} tokens: one line per query–key pair; "
                                "the tables' heatmaps show this layer" if run.long else "")
        with_all = ["all heads"] + [f"head {h}" for h in range(loaded.num_heads)]
        self.head_box.blockSignals(True)
        self.head_box.clear()
        self.head_box.addItems(with_all)
        self.head_box.blockSignals(False)
        self.set_layer(layer, head)

    def set_layer(self, layer: int, head: int) -> None:
        self.layer = layer
        self.head_view_figure.layer = layer
        self.grid.set_selected(layer, head)
        self.layer_label.setText(f"Layer {layer}: lines from each query (left) to each key (right), "
                                 "opacity = weight; hover a token to isolate its lines")
        if self.run.long:
            self.head_view.set_layer((), np.zeros((0, 0, 0)))
        else:
            self.head_view.set_layer(self.run.tokens, self.run.attentions[layer])
        self.head_box.setCurrentIndex(head + 1)
        self.head_view.set_head(head)

    def _on_ranked_head(self, layer: int, head: int) -> None:
        self.grid.set_selected(layer, head)
        self.layer_chosen.emit(layer, head)

    def _on_head_box(self, index: int) -> None:
        self.head_view.set_head(None if index <= 0 else index - 1)

    def update_badge(self, weights, layer: int, result=None) -> None:
        """Compare the tables' weights (H, n, n) with the model's at ``layer``; for a long run,
        the ``result``'s attention output and row normalisers."""
        if self.run is not None and self.run.long:
            if result is None:
                self.badge.setText("")
                return
            found = long_differences(self.run, layer, getattr(result, "output", None),
                                     getattr(result, "log_sum_exp", None))
            self.badge.setText(f"Tables: layer {layer}: " + long_badge_text(found))
            return
        if self.run is None or weights is None:
            self.badge.setText("")
            return
        self.badge.setText(f"Tables: layer {layer}: "
                           + badge_text(max_difference(weights, self.run.attentions[layer])))


class ModelController(QObject):
    """Owns the loader (a ``JobRunner`` whose state keeps the models opened), the progress
    dialog and the model window for a main window. ``progressed(fraction, message)`` follows
    the load that is shown."""

    progressed = Signal(float, str)

    def __init__(self, main_window, document, actions):
        super().__init__(main_window)
        self.main_window, self.document, self.actions = main_window, document, actions
        self._progress: QProgressDialog | None = None
        self._request = ("minilm", DEFAULT_TEXT, 0)
        # Every report goes (one per layer or block); the models opened stay in the runner's state.
        self._loader = JobRunner("attnexplorer-model-loader", GuiThread(self).post, progress_s=0.0,
                                 stop_timeout_s=120)
        self.window = ModelWindow(main_window)
        self.window.layer_chosen.connect(self.load_layer)
        self.window.head_scores.probe_requested.connect(self.open_probe)
        from .behaviour_control import BehaviourControl

        self.behaviour = BehaviourControl(self, main_window, document)
        from .generation_panel import GenerationControl

        self.generation = GenerationControl(self, self.window.generation,
                                            lambda: (self.behaviour.behaviour, self.behaviour.interventions()),
                                            self._followed_layer, self._follow_text, self._on_generated)
        document.session_changed.connect(self._on_session)
        document.result_changed.connect(self._on_result)

    @property
    def tables_layer(self) -> int | None:
        """The layer of the window's run that the tables hold (the document is of that run), or None."""
        model = self.document.model
        return model.layer if model is not None and model.run is self.window.run else None

    def shutdown(self) -> None:
        self.behaviour.shutdown()
        self.window.head_scores.shutdown()
        self.generation.shutdown()
        self._loader.shutdown()   # a load in progress stops at its next step

    def open_dialog(self) -> None:
        problem = missing_dependencies()
        if problem:
            self.main_window.show_error("Open model", problem)
            return
        dialog = OpenModelDialog(self.main_window, *self._request)
        if dialog.exec() != QDialog.DialogCode.Accepted:
            return
        self.start(dialog.spec(), dialog.text_edit.text(), dialog.layer_spin.value())

    def start(self, spec: str, text: str, layer: int) -> int:
        """Load (or reuse) ``spec`` and run it on ``text`` off the GUI thread; returns the generation."""
        self._request = (spec, text, layer)
        self._progress = QProgressDialog(f"Opening {spec}…", "Cancel", 0, 100, self.main_window)
        self._progress.setWindowTitle("Open model")
        self._progress.setMinimumDuration(300)
        self._progress.setWindowModality(Qt.WindowModality.WindowModal)
        self._progress.canceled.connect(self.cancel)
        self._progress.setValue(0)
        models = self._loader.state.setdefault("models", {})   # opened models, by their file or folder
        job = self._loader.submit(lambda job: _open_and_run(job, models, spec, text, layer),
                                  self._on_done, self._on_failed, self._on_progress)
        return job.generation

    def open_probe(self, probe: str) -> int:
        """The Heads tab's Open probe: the same model run on ``repeated:N[:SEED]`` (its layer kept)."""
        spec, _text, layer = self._request
        return self.start(spec, probe, layer)

    def cancel(self) -> None:
        self._loader.cancel()   # a load in progress stops at its next step; what it sends is dropped
        self._close_progress()

    def _close_progress(self) -> None:
        if self._progress is not None:
            self._progress.canceled.disconnect(self.cancel)
            self._progress.close()
            self._progress.deleteLater()
            self._progress = None

    def _on_progress(self, fraction: float, message: str) -> None:
        self.progressed.emit(fraction, message)
        if self._progress is not None:
            self._progress.setLabelText(message)
            self._progress.setValue(int(round(100 * fraction)))

    def _on_failed(self, err: BaseException) -> None:
        self._close_progress()
        # A model that breaks transformers must not take the window down.
        error = str(err) if isinstance(err, AttnExplorerError) else f"the model failed to run: {err}"
        self.main_window.show_error("Open model", error)

    def _on_done(self, payload) -> None:
        self._close_progress()
        loaded, run, session, behaviour, scores = payload
        spec, text, layer = self._request
        if layer >= loaded.num_layers:
            self.main_window.show_error("Open model", f"layer {layer} is out of range: "
                                        f"{loaded.source.label} has layers 0..{loaded.num_layers - 1}")
            return
        self.window.show_run(loaded, run, layer, scores=scores)
        self.window.show()
        self.window.raise_()
        self.behaviour.start(behaviour)
        self.window.head_scores.set_behaviour(behaviour)
        self.generation.start(loaded)
        self.load_layer(layer, 0, session)

    def load_layer(self, layer: int, head: int, session=None) -> bool:
        """Put ``layer`` of the current run into the tables (asking about unsaved work first);
        ``session``, when given, is that layer's, already built."""
        from ..io.session_file import session_from_dict

        loaded, run = self.window.loaded, self.window.run
        if session is None:
            session = self.behaviour.kept_edit(layer)   # an edited layer stays edited when it comes back
        if session is None:
            try:
                session = session_from_dict(loaded.layer_parts(run, layer), f"{loaded.source.label} layer {layer}")
            except AttnExplorerError as err:
                self.main_window.show_error("Open model", str(err))
                return False
        self.window.set_layer(layer, head)
        self.behaviour.tables_loading()   # the selection moves with the new session: not a click
        # The document becomes of this model's run (in place before the first result comes).
        if not self.actions.adopt_session(session, ModelLayer(loaded, run, layer)):
            return False
        self.document.selection.set(head=head)
        self.behaviour.tables_loaded(layer)
        return True

    def _on_generated(self, snap: dict) -> None:
        """The model view's thumbnails follow the generated text, the generated rows marked."""
        run = self.window.run
        if run is None or run.long or tuple(snap["ids"][:snap["prompt_length"]]) != tuple(run.ids):
            return   # another run's generation (superseded by an open): its thumbnails are not these
        grown = snap.get("grown")
        if grown is None:
            if self.window.grid.generated is not None:   # back to the prompt (or too long to grow)
                from .model_views import thumbnail_rgb

                self.window.grid.set_generated(thumbnail_rgb(run.attentions), None)
        else:
            self.window.grid.set_generated(grown, snap["prompt_length"])

    def _followed_layer(self) -> int | None:
        """The layer the tables hold of this run (else the one the window shows), for the tables
        to follow the generated text."""
        if self.window.run is None:
            return None
        return self.tables_layer if self.tables_layer is not None else self.window.layer

    def _follow_text(self, layer: int, session) -> bool:
        """The tables take ``layer`` on the generated text: one undo step in the document, as
        any other change of the tables (Edit ▸ Undo brings back what they held)."""
        head = min(self.document.selection.current.head, self.window.loaded.num_heads - 1)
        # tables holding something else take the layer first, as a click on its thumbnail does
        # (asking about unsaved work: kept, nothing follows)
        if self.tables_layer != layer and not self.load_layer(layer, head):
            return False
        self.document.edit(session, f"Layer {layer} on the generated text ({len(session.tokens)} tokens)")
        return True

    def _on_session(self, session) -> None:
        """An edit of the tables' layer starts its prediction at once: the prediction needs the
        session only, and waiting for the tables' own compute put that compute and the
        panels' redraw (~20-25 ms of the GUI thread) in front of it. The result that follows
        names the same session, which asks for nothing more."""
        run = self.window.run
        if run is None or self.tables_layer is None or tuple(session.tokens) != tuple(run.tokens):
            return
        self.behaviour.tables_edited(self.tables_layer, session)

    def _on_result(self, result) -> None:
        """The badge follows every compute of the tables; the head view draws the tables'
        weights while they hold this run's layer, so an edit shows in its lines too."""
        run = self.window.run
        if run is None or result is None:
            return
        session = getattr(result, "session", None) or self.document.session
        if tuple(session.tokens) != tuple(run.tokens):
            grown = (len(session.tokens) > len(run.tokens)
                     and tuple(session.tokens[:len(run.tokens)]) == tuple(run.tokens))
            self.window.badge.setText(f"Tables: layer {self.tables_layer} on the generated text "
                                      f"({len(session.tokens)} tokens)" if grown and self.tables_layer is not None
                                      else "the tables hold another session")
            return
        weights = getattr(result, "weights", None)
        if self.tables_layer is None:
            return
        self.behaviour.tables_edited(self.tables_layer, session)
        self.window.update_badge(weights, self.tables_layer, result)
        if (weights is not None and not run.long and self.window.layer == self.tables_layer
                and weights.shape == run.attentions[self.tables_layer].shape):
            self.window.head_view.set_layer(run.tokens, weights)
