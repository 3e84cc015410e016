"""File ▸ Open model…: pick a model and a text, load it off the GUI thread, and explore it.

``ModelController`` (owned by the main window) runs the whole path:
1. ``open_model_dialog.OpenModelDialog`` asks for the model (a packaged one, a folder or a
   .gguf file), the text and the layer, and refuses what ``models.resolve`` refuses before
   anything is loaded;
2. a background job (``app.jobs.JobRunner``) opens the model (kept in the runner's state for
   the next open of the same model) and runs it on the text, reporting progress to a
   cancellable progress dialog (while the model runs, layer by layer; a long text stops at the
   next layer or block when cancelled); a cancelled or superseded load's result is dropped;
3. ``window.ModelWindow`` shows the model view (every layer × head) and the head view,
   and the chosen layer goes into the tables as a session, unsaved, with the head selected:
   the document is then of the model (``document.model``: the model, the run on the text, the
   layer). The window's badge follows every compute of the tables.

Every refusal is a message in the dialog or a message box; nothing in the document changes
until a layer is ready.
"""

from __future__ import annotations

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtWidgets import QDialog, QProgressBar, QProgressDialog

from ...app.document import ModelLayer
from ...app.jobs import JobRunner
from ...core.errors import AttnExplorerError
from ...models import missing_dependencies, resolve
from ..gui_thread import GuiThread
from .window import ModelWindow
from .open_model_dialog import DEFAULT_TEXT, OpenModelDialog


def open_and_run(job, models: dict, spec: str, text: str, layer: int):
    """On the loader's worker: open ``spec`` (or reuse it from ``models``, the runner's state),
    run it on ``text`` and build ``layer``'s session here too: at 4,096 tokens checking and
    freezing its arrays takes a quarter of a second that the GUI thread would otherwise block.
    Returns (loaded, run, session, behaviour, head scores); a cancelled load raises and its answer is dropped."""
    from ...io.session_file import session_from_dict
    from ...models.loading import Cancelled, load_model

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
    from ...models.head_scores import DEFAULT, HeadScores, document, parse_scores

    # a text, or a repeated:N[:SEED] probe (its random ids shown as tokens like any text's)
    ids, pieces, label, probe = document(loaded, text)
    # every head score, made during the forward from each block of rows (nothing n × n kept)
    scorer = HeadScores(parse_scores(DEFAULT), ids, loaded.num_layers, loaded.num_heads, probe)
    run = loaded.run_ids(ids, pieces, label, job.progress, check, observe=scorer)
    session = None
    if 0 <= layer < loaded.num_layers:
        session = session_from_dict(loaded.layer_parts(run, layer), f"{loaded.source.label} layer {layer}")
    from ...models.interventions import Behaviour

    return loaded, run, session, Behaviour(loaded, run), scorer.result()


class ModelController(QObject):
    """Owns the loader (a ``JobRunner`` whose state keeps the models opened), the progress
    dialog and the model window for a main window. ``progressed(fraction, message)`` follows
    the load that is shown."""

    progressed = Signal(float, str)

    def __init__(self, main_window, document, actions):
        super().__init__(main_window)
        self.main_window, self.document, self.actions = main_window, document, actions
        self._progress: QProgressDialog | None = None
        self._progress_bar: QProgressBar | None = None   # the dialog's bar, which reports move
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
        self._close_progress()   # a load started over another (Open probe while loading): one dialog
        self._progress = QProgressDialog(f"Opening {spec}…", "Cancel", 0, 100, self.main_window)
        self._progress.setWindowTitle("Open model")
        self._progress.setMinimumDuration(300)
        self._progress.setWindowModality(Qt.WindowModality.WindowModal)
        # Reports move this bar, never the dialog's setValue: on a shown modal dialog setValue
        # runs processEvents, where the queued end of the load closes and deletes the dialog
        # while setValue is still on the stack (it then reads the dead bar: a segfault).
        self._progress_bar = QProgressBar(self._progress)
        self._progress_bar.setRange(0, 100)
        self._progress.setBar(self._progress_bar)
        self._progress.canceled.connect(self.cancel)
        self._progress.setValue(0)   # the first (not yet shown) only starts the minimum-duration timer
        models = self._loader.state.setdefault("models", {})   # opened models, by their file or folder
        job = self._loader.submit(lambda job: open_and_run(job, models, spec, text, layer),
                                  self._on_done, self._on_failed, self.show_progress)
        return job.generation

    def open_probe(self, probe: str) -> int:
        """The Heads tab's Open probe: the same model run on ``repeated:N[:SEED]`` (its layer kept)."""
        spec, _text, layer = self._request
        return self.start(spec, probe, layer)

    def cancel(self) -> None:
        self._loader.cancel()   # a load in progress stops at its next step; what it sends is dropped
        self._close_progress()

    @property
    def progress_dialog(self) -> QProgressDialog | None:
        """The open load's progress dialog (None when no load is in progress)."""
        return self._progress

    def wait(self, timeout_s: float = 30.0) -> bool:
        """Block until the load in progress has finished on its thread (what it sends the
        window is still queued); False when ``timeout_s`` passes first."""
        return self._loader.wait(timeout_s)

    def _close_progress(self) -> None:
        if self._progress is not None:
            self._progress.canceled.disconnect(self.cancel)
            self._progress.close()
            self._progress.deleteLater()
            self._progress = self._progress_bar = None

    def show_progress(self, fraction: float, message: str) -> None:
        self.progressed.emit(fraction, message)
        # Nothing here runs the event loop, so the load's end (queued behind this report)
        # cannot close the dialog under it; a report after the end finds no dialog.
        if self._progress is not None:
            self._progress.setLabelText(message)
            self._progress_bar.setValue(int(round(100 * fraction)))

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
        from ...io.session_file import session_from_dict

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
                from .views import thumbnail_rgb

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
