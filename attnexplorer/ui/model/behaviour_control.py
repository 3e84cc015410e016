"""From attention to behaviour in the window: the user's interventions on an opened model, and
the prediction they lead to, recomputed live off the GUI thread.

``BehaviourControl`` (owned by the ``ModelController``) holds the interventions: the head
ablations (from the model view: Ctrl+click, or its context menu), the patch text, and the
edited layers (the layer in the tables is read as an edit whenever the tables compute; a
layer edited and left for another stays edited, and comes back edited). Ablations, the patch
text and Reset interventions are undo steps on the model window's own stack, its Undo and Redo
buttons and Ctrl+Z / Ctrl+Shift+Z there (the document's history starts again at each layer
switch, the interventions outlive it).

Every change submits one prediction job to the app's job primitive (``app.jobs.JobRunner``):
the newest replaces one waiting, a running one stops at its next layer (its cancel token), and
only the newest answer is drawn in the model window's Predictions and Logit lens tabs and in
the main window's Predictions dock. Save edited model… writes the folder ``models.saving``
makes, as a job of a runner of its own (a prediction does not supersede a save).
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QObject, Qt
from PySide6.QtGui import QKeySequence, QUndoCommand, QUndoStack
from PySide6.QtWidgets import QDockWidget, QFileDialog

from ...app.jobs import JobRunner
from ...core.errors import AttnExplorerError
from ...models.interventions import Interventions
from ..gui_thread import GuiThread
from .predictions import PredictionsPanel

TOP = 10


class InterventionStep(QUndoCommand):
    """One change of the ablations, the patch text or the kept edits (Reset interventions)."""

    def __init__(self, control: "BehaviourControl", before: dict, after: dict, text: str):
        super().__init__(text)
        self._control, self._before, self._after = control, before, after

    def redo(self) -> None:
        self._control._apply(self._after)

    def undo(self) -> None:
        self._control._apply(self._before)


class BehaviourControl(QObject):
    def __init__(self, controller, main_window, document):
        super().__init__(controller)
        self.controller, self.main_window, self.document = controller, main_window, document
        self.window = controller.window
        self.behaviour = None
        self.ablations: dict[tuple[int, int], str] = {}
        self.edits: dict = {}            # layer → the tables' session of that layer, as last seen
        self.patch_text = ""
        self.target = self.versus = ""
        self.position: int | None = None
        self._query_at_load: int | None = None
        self._following = False   # the tables' selected query is the position once a layer is in
        self.stack = QUndoStack(self)
        self.last_result: dict | None = None       # the newest answer, its logit lens included
        self.last_prediction: dict | None = None   # the newest prediction drawn (its lens may follow)
        self.last_error: str | None = None
        gui = GuiThread(self)
        self.jobs = JobRunner("attnexplorer-predictions", gui.post)
        self.saver = JobRunner("attnexplorer-save-model", gui.post, stop_timeout_s=120)
        self.dock_panel = PredictionsPanel(tables_row=True)
        self.dock_panel.ablate_selected.connect(self.ablate_tables_head)
        self.dock = QDockWidget("Predictions", main_window)
        self.dock.setObjectName("dock-predictions")
        self.dock.setWidget(self.dock_panel)
        self.dock.hide()
        main_window.addDockWidget(Qt.DockWidgetArea.RightDockWidgetArea, self.dock)
        # a tab beside Explain: a dock of its own squeezed the bars into a strip at 1280 × 800
        beside = getattr(main_window, "docks", {}).get("explain")
        if beside is not None:
            main_window.tabifyDockWidget(beside, self.dock)
        bar = self.window.behaviour_bar
        bar.undo_button.clicked.connect(self.stack.undo)
        bar.redo_button.clicked.connect(self.stack.redo)
        self.stack.canUndoChanged.connect(bar.undo_button.setEnabled)
        self.stack.canRedoChanged.connect(bar.redo_button.setEnabled)
        bar.undo_button.setEnabled(False)
        bar.redo_button.setEnabled(False)
        # Ctrl+Z in the model window: its own stack (the main window's Edit ▸ Undo is the tables')
        self.undo_action = self.stack.createUndoAction(self.window, "Undo intervention")
        self.undo_action.setShortcut(QKeySequence.StandardKey.Undo)
        self.redo_action = self.stack.createRedoAction(self.window, "Redo intervention")
        self.redo_action.setShortcuts([QKeySequence("Ctrl+Shift+Z"), QKeySequence("Ctrl+Y")])
        self.window.addActions([self.undo_action, self.redo_action])
        bar.reset_button.clicked.connect(self.reset)
        bar.patch_edit.editingFinished.connect(lambda: self.set_patch_text(bar.patch_edit.text()))
        bar.save_button.clicked.connect(self.save_dialog)
        bar.export_button.clicked.connect(self.export_dialog)
        self.window.grid.ablate.connect(self.set_ablation)
        self.window.grid.reset.connect(self.reset)
        for panel in (self.window.predictions, self.dock_panel):
            panel.target_changed.connect(self._on_target)
        document.selection.changed.connect(self._on_selection)

    def shutdown(self) -> None:
        self.jobs.shutdown()
        self.saver.shutdown()

    # -- state ----------------------------------------------------------------------------
    def start(self, behaviour) -> None:
        """A new run (another model or text): nothing of the old one's interventions applies."""
        self.behaviour = behaviour
        self.ablations, self.edits, self.position = {}, {}, None
        self.stack.clear()
        self.window.grid.set_ablations({})
        self.dock.show()
        self.dock.raise_()
        self.request()

    def interventions(self) -> Interventions:
        out = Interventions(patch_text=self.patch_text or None)
        for (layer, head), kind in sorted(self.ablations.items()):
            out = out.with_ablation(layer, head, kind)
        for layer, session in sorted(self.edits.items(), key=lambda kv: kv[0]):
            out = out.with_edit(layer, session)
        return out

    def _state(self) -> dict:
        return {"ablations": dict(self.ablations), "edits": dict(self.edits), "patch": self.patch_text}

    def _push(self, after: dict, text: str) -> None:
        self.stack.push(InterventionStep(self, self._state(), after, text))

    def _apply(self, state: dict) -> None:
        reload = state["edits"] != self.edits
        self.ablations, self.edits, self.patch_text = dict(state["ablations"]), dict(state["edits"]), state["patch"]
        self.window.grid.set_ablations(self.ablations)
        bar = self.window.behaviour_bar
        if bar.patch_edit.text() != self.patch_text:
            bar.patch_edit.blockSignals(True)
            bar.patch_edit.setText(self.patch_text)
            bar.patch_edit.blockSignals(False)
        layer = self.controller.tables_layer
        if reload and layer is not None and self.window.run is not None:
            # the tables show the layer as the interventions now have it
            self.controller.load_layer(layer, self.document.selection.current.head)
        self.request()

    def set_ablation(self, layer: int, head: int, kind) -> None:
        ablations = dict(self.ablations)
        if kind is None:
            ablations.pop((layer, head), None)
            text = f"Restore L{layer}H{head}"
        else:
            ablations[(layer, head)] = kind
            text = f"{kind.capitalize()}-ablate L{layer}H{head}"
        if ablations != self.ablations:
            self._push(dict(self._state(), ablations=ablations), text)

    def ablate_tables_head(self, kind) -> None:
        """The dock's buttons: the head selected in the tables, of the layer they hold."""
        layer = self.controller.tables_layer
        if self.behaviour is None or layer is None:
            self.main_window.show_error("Ablate a head", "the tables hold no layer of the opened model")
            return
        self.set_ablation(layer, self.document.selection.current.head, kind)

    def set_patch_text(self, text: str) -> None:
        if text != self.patch_text:
            self._push(dict(self._state(), patch=text), "Patch text")

    def reset(self) -> None:
        if self.ablations or self.edits:
            self._push({"ablations": {}, "edits": {}, "patch": self.patch_text}, "Reset interventions")

    def kept_edit(self, layer: int):
        return self.edits.get(layer)

    def tables_loading(self) -> None:
        self._following = False

    def tables_loaded(self, layer: int) -> None:
        self._query_at_load = self.document.selection.current.query
        self._following = True

    def tables_edited(self, layer: int, session) -> None:
        """The tables computed ``session`` for ``layer``: the layer's edit, if it is one."""
        if self.edits.get(layer) is session:
            return
        self.edits[layer] = session
        self.request()

    def _on_selection(self, selection) -> None:
        if self.behaviour is None or self.controller.tables_layer is None or not self._following:
            return
        if selection.query != self._query_at_load:
            self._query_at_load = None
            if selection.query != self.position and selection.query < len(self.behaviour.run.ids):
                self.position = selection.query
                self.request()

    def _on_target(self, target: str, versus: str) -> None:
        for panel in (self.window.predictions, self.dock_panel):
            if (panel.target_edit.text(), panel.versus_edit.text()) != (target, versus):
                panel.target_edit.blockSignals(True)
                panel.versus_edit.blockSignals(True)
                panel.set_target(target, versus)
                panel.target_edit.blockSignals(False)
                panel.versus_edit.blockSignals(False)
        self.target, self.versus = target, versus
        self.request()

    # -- the prediction -------------------------------------------------------------------
    def request(self) -> int | None:
        """Submit the prediction for the current state; returns its generation."""
        if self.behaviour is None:
            return None
        behaviour, interventions = self.behaviour, self.interventions()
        position, target, versus = self.position, self.target, self.versus
        self.window.behaviour_bar.state.setText("computing…")

        def work(job):
            # the prediction goes to the panels as soon as it is made (the job's one progress
            # report), the logit lens after it
            return predict(behaviour, interventions, position, target, versus, lambda: job.cancelled, job.progress)

        return self.jobs.submit(work, lambda result: self._on_done(result, None),
                                lambda err: self._on_done(None, _reason(err, "the prediction failed")),
                                self._on_prediction).generation

    def _on_prediction(self, result) -> None:
        """The prediction, before its logit lens: the Predictions panels drawn at once."""
        self.last_prediction = result
        self._show_prediction(result)

    def _show_prediction(self, result) -> None:
        edited = result.get("intervened")
        self.window.behaviour_bar.state.setText(
            "no interventions" if edited is None else "in effect: " + ", ".join(edited["interventions"]))
        for panel in (self.window.predictions, self.dock_panel):
            panel.show_result(result)

    def _on_done(self, result, error) -> None:
        drawn = self.last_prediction
        self.last_result, self.last_error = result, error
        bar = self.window.behaviour_bar
        if error:
            self.last_prediction = None
            bar.state.setText("")
            for panel in (self.window.predictions, self.dock_panel):
                panel.show_message(error)
            self.window.grid.set_lens(None)
            return
        if drawn is None or not _same_prediction(drawn, result):
            self._show_prediction(result)   # not drawn before its lens (a model without an LM head)
        self.last_prediction = result
        self.window.lens.show_result(result)
        self.window.grid.set_lens(result)   # the lens strip beside the model view

    # -- saving and figures ---------------------------------------------------------------
    def save_dialog(self) -> None:
        if self.behaviour is None:
            self.main_window.show_error("Save edited model", "open a model first (File ▸ Open model…)")
            return
        path, _ = QFileDialog.getSaveFileName(self.window, "Save edited model as a new folder", "edited-model")
        if path:
            self.save(path)

    def save(self, path) -> int:
        behaviour, interventions = self.behaviour, self.interventions()

        def work(_job):
            from ...models.saving import save_edited_model

            save_edited_model(behaviour, behaviour.effective(interventions), Path(path))
            return str(path)

        self.window.behaviour_bar.state.setText(f"saving {path}…")
        return self.saver.submit(work, lambda done: self._on_saved(done, None),
                                 lambda err: self._on_saved(None, _reason(err, "the model was not saved"))).generation

    def _on_saved(self, path, error) -> None:
        if error:
            self.main_window.show_error("Save edited model", error)
            self.window.behaviour_bar.state.setText("not saved")
        else:
            self.window.behaviour_bar.state.setText(f"saved {path}")

    def export_dialog(self):
        """The window's Export figure dialog over the model view (with its colouring), the head
        view, the Predictions, Logit lens and Heads panels (and their dashboard), the side panel
        on show chosen; nothing drawn yet is said, not opened."""
        from ..exports.figure_dialog import open_export_dialog

        window = self.window
        panels = [window.model_view_figure, window.head_view_figure, window.predictions, window.lens,
                  window.head_scores]
        if all(p.export_item() is None for p in panels):
            self.main_window.show_error("Export figure", "the prediction has not been drawn yet")
            return None
        current = self.window.side_tabs.currentWidget()
        loaded = self.window.loaded
        title = None if loaded is None else f"{loaded.source.label}: “{self.behaviour.run.text}”"
        return open_export_dialog(panels, self.window, current=current, title=title)


def _reason(err: BaseException, what: str) -> str:
    """One line for the panel or a message box: a refusal says itself; anything else is named
    (a model that breaks must not take the window down)."""
    return str(err) if isinstance(err, AttnExplorerError) else f"{what}: {err}"


def _same_prediction(drawn: dict, result: dict) -> bool:
    """Whether ``result`` (a job's answer) is the prediction already drawn from its progress."""
    return all(drawn.get(key) is result.get(key) for key in ("baseline", "intervened", "target"))


def predict(behaviour, interventions, position, target, versus, cancelled, on_prediction=None) -> dict:
    """The panel's prediction: a target that is not one token is said in the panel, and the
    rest still shown. ``on_prediction(result)``: as ``Behaviour.predict``'s."""
    from ...models.sources import ModelError

    problem = None
    target, versus = (target or None), (versus or None)
    try:
        if target is not None:
            behaviour.target_id(target, "the token")
        if versus is not None:
            behaviour.target_id(versus, "the second token")
    except ModelError as err:
        problem, target, versus = str(err), None, None
    if target is None:
        versus = None
    def drawn_first(result):
        if problem:
            result["target_error"] = problem
        on_prediction(result)

    result = behaviour.predict(behaviour.effective(interventions), position, TOP, target, versus, lens=True,
                               cancelled=cancelled, on_prediction=None if on_prediction is None else drawn_first)
    if problem:
        result["target_error"] = problem
    return result
