"""The model window's Heads tab: colour the model view by a head score or an attribution, and
the heads ranked by it (click a row to open that head). The scores come from the run that
opened the model (``models.head_scores``, computed during its forward, a block of rows at a time
on a long text); an attribution (direct logit attribution, or a zero/mean-ablation sweep) of a
token the user types is computed on request on a background job (``app.jobs.JobRunner``) with
progress and Cancel, and joins the colour choices. A patch-ablation sweep takes each head's
output from the unedited run on the second text typed beside it (the same token length; a
``repeated:N[:SEED]`` probe too): one of another length is refused by the job before the first
head, in the tab's status line, in the words ``heads --patch-text`` uses."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (QAbstractItemView, QComboBox, QHBoxLayout, QLabel, QLineEdit, QPushButton,
                               QTableWidget, QTableWidgetItem, QVBoxLayout, QWidget)

from ...app.jobs import JobRunner
from ..gui_thread import GuiThread
from ..panels.theme import axis_values

ATTRIBUTIONS = {"direct logit attribution": "dla", "zero-ablate each head": "zero", "mean-ablate each head": "mean",
                "patch each head": "patch"}

NONE = "none"


class _Number(QTableWidgetItem):
    """A cell that sorts by its number, not its text."""

    def __init__(self, value: float, text: str):
        super().__init__(text)
        self.value = value
        self.setData(Qt.ItemDataRole.UserRole, value)

    def __lt__(self, other):
        return self.value < getattr(other, "value", 0.0)


class HeadScoresPanel(QWidget):
    """Also a figure panel (``kind``, ``title``, ``export_item``): its layers × heads heatmap of
    the score shown exports through the window's Export figure… like the Predictions panel."""

    coloured = Signal(object, object)   # score name or None, its (layers × heads) values or None
    chosen = Signal(int, int)           # layer, head
    probe_requested = Signal(str)       # a checked repeated:N[:SEED]: reopen the model on it
    kind = "head_scores"
    title = "Head scores"
    short_title = "Heads"
    document = None

    def __init__(self, parent=None):
        super().__init__(parent)
        self.scores: dict[str, np.ndarray] = {}
        self.colour_box = QComboBox()
        self.colour_box.currentTextChanged.connect(self._on_colour)
        self.definition = QLabel("")
        self.definition.setWordWrap(True)
        self.table = QTableWidget(0, 3)
        self.table.setHorizontalHeaderLabels(["layer", "head", "score"])
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.verticalHeader().setVisible(False)
        self.table.horizontalHeader().setStretchLastSection(True)
        self.table.cellClicked.connect(self._on_row)
        self.layer_box = QComboBox()   # the ranked list of every layer, or of one
        self.layer_box.currentIndexChanged.connect(self._on_layer_choice)
        row = QHBoxLayout()
        row.addWidget(QLabel("Colour by"))
        row.addWidget(self.colour_box, 1)
        row.addWidget(self.layer_box)
        self.behaviour = None
        self.target_edit = QLineEdit()
        self.target_edit.setPlaceholderText('token, e.g. " Mary"')
        self.versus_edit = QLineEdit()
        self.versus_edit.setPlaceholderText("versus (optional)")
        self.patch_edit = QLineEdit()
        self.patch_edit.setPlaceholderText("second text, for patching (same token length)")
        self.patch_edit.setToolTip("A patched head takes its output from the unedited model's run on this text "
                                   "(a repeated:N[:SEED] probe too)")
        self.kind_box = QComboBox()
        self.kind_box.addItems(list(ATTRIBUTIONS))
        self.kind_box.setToolTip("patch each head: its output taken from the unedited run on the second text")
        self.kind_box.currentTextChanged.connect(self._on_kind)
        self._on_kind(self.kind_box.currentText())
        self.run_button = QPushButton("Attribute")
        self.run_button.clicked.connect(self.attribute)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setEnabled(False)
        self.cancel_button.clicked.connect(self.cancel)
        self.status = QLabel("")
        self.status.setWordWrap(True)
        tokens = QHBoxLayout()
        tokens.addWidget(QLabel("Token"))
        tokens.addWidget(self.target_edit, 1)
        tokens.addWidget(QLabel("vs"))
        tokens.addWidget(self.versus_edit, 1)
        actions = QHBoxLayout()
        actions.addWidget(self.kind_box, 1)
        actions.addWidget(self.run_button)
        actions.addWidget(self.cancel_button)
        self.probe_edit = QLineEdit("repeated:64")
        self.probe_edit.setToolTip("N random tokens, then the same N again (SEED: which ones): the induction "
                                   "score's probe, opened as the model's text (as `heads --probe` reads it)")
        self.probe_button = QPushButton("Open probe")
        self.probe_button.setToolTip("Run the model on the probe: its tokens, thumbnails and scores replace the text's")
        self.probe_button.clicked.connect(self.open_probe)
        probe_row = QHBoxLayout()
        probe_row.addWidget(QLabel("Probe"))
        probe_row.addWidget(self.probe_edit, 1)
        probe_row.addWidget(self.probe_button)
        self.jobs = JobRunner("attnexplorer-head-attribution", GuiThread(self).post)
        self.plot_widget = pg.GraphicsLayoutWidget()
        self.plot_widget.setBackground("w")
        self.plot_widget.setMinimumHeight(150)
        self.plot = self.plot_widget.addPlot()
        self.plot.setLabel("bottom", "head")
        self.plot.setLabel("left", "layer")
        self.plot.setMouseEnabled(False, False)
        self.plot.hideButtons()
        self.plot.invertY(True)   # layer 0 at the top, as in the model view
        self.image = pg.ImageItem(axisOrder="row-major")
        self.image.setColorMap(pg.colormap.get("viridis"))
        self.plot.addItem(self.image)
        self.colour_bar = pg.ColorBarItem(colorMap=pg.colormap.get("viridis"), interactive=False, width=12)
        self.colour_bar.setImageItem(self.image, insert_in=self.plot)
        # "Colour by: none" (the default) draws the layers × heads grid uncoloured, with a hint,
        # rather than an empty frame that read as a plot that failed to draw
        self.blank = pg.ImageItem(axisOrder="row-major")
        self.plot.addItem(self.blank)
        self.hint = pg.TextItem("", color=(60, 60, 60), anchor=(0.5, 0.5))
        self.hint.setZValue(1)
        self.plot.addItem(self.hint)
        axis_values(self.plot, False)   # no score shown yet
        self.colour_bar.hide()
        self.shown: str | None = None
        layout = QVBoxLayout(self)
        layout.addLayout(probe_row)
        layout.addLayout(tokens)
        layout.addLayout(actions)
        layout.addWidget(self.patch_edit)
        layout.addWidget(self.status)
        layout.addLayout(row)
        layout.addWidget(self.definition)
        layout.addWidget(self.plot_widget, 2)
        layout.addWidget(self.table, 3)

    def set_scores(self, scores: dict[str, np.ndarray]) -> None:
        self.scores = dict(scores)
        layers = next(iter(self.scores.values())).shape[0] if self.scores else 0
        self.set_layers(layers)
        self.colour_box.blockSignals(True)
        self.colour_box.clear()
        self.colour_box.addItems([NONE, *self.scores])
        self.colour_box.blockSignals(False)
        self._on_colour(NONE)

    def set_layers(self, layers: int) -> None:
        self.layer_box.blockSignals(True)
        self.layer_box.clear()
        self.layer_box.addItems(["all layers"] + [f"layer {layer}" for layer in range(layers)])
        self.layer_box.blockSignals(False)

    def set_behaviour(self, behaviour) -> None:
        """The run attributions are computed on (``models.interventions.Behaviour``)."""
        self.jobs.cancel()
        self.behaviour = behaviour
        if self.layer_box.count() <= 1:
            self.set_layers(behaviour.loaded.num_layers)
        self._busy(False)
        self.status.setText("")

    def shutdown(self) -> None:
        self.jobs.shutdown()

    def _busy(self, busy: bool) -> None:
        self.run_button.setEnabled(not busy)
        self.cancel_button.setEnabled(busy)

    def attribute(self) -> None:
        """Attribute the typed token's logit (or the difference) at the last position to each head."""
        from ...models.head_attribution import ablation_sweep, direct_logit_attribution, pick
        from ...models.sources import ModelError

        behaviour = self.behaviour
        target, versus = self.target_edit.text(), self.versus_edit.text() or None
        kind = ATTRIBUTIONS[self.kind_box.currentText()]
        patch_text = self.patch_edit.text() if kind == "patch" else None
        if behaviour is None:
            return
        try:
            picked = pick(behaviour, target, versus)
            if kind == "patch" and not patch_text.strip():
                raise ModelError("patching each head needs the second text (of the same token length) each head "
                                 "takes its output from")
        except ModelError as err:
            self.status.setText(str(err))
            return
        label = repr(target) if versus is None else f"{target!r} − {versus!r}"
        name = f"{'dla' if kind == 'dla' else 'ablate:' + kind} {label}"

        def work(job):
            if kind == "dla":
                values, rest, logit = direct_logit_attribution(behaviour, picked)
                return values, f"{label} at position {picked.position}: {logit:.3f} = heads {values.sum():.3f} + rest {rest:.3f}"
            effects, base = ablation_sweep(behaviour, picked, kind, progress=job.progress, cancelled=lambda: job.cancelled,
                                           patch_text=patch_text)
            return effects, f"{label} at position {picked.position}: {base:.3f} unedited; the change of it per head"

        self._busy(True)
        self.status.setText(f"attributing {label}…")
        self.jobs.submit(work, on_done=lambda answer: self._attributed(name, *answer), on_failed=self._failed,
                         on_progress=lambda done, total: self.status.setText(f"ablating head {done} of {total}…"))

    def open_probe(self) -> None:
        """Ask for the model to be run on the typed probe; a malformed one is said here, nothing run."""
        from ...models.head_scores import parse_probe
        from ...models.sources import ModelError

        text = self.probe_edit.text().strip()
        try:
            parse_probe(text)
        except ModelError as err:
            self.status.setText(str(err))
            return
        self.status.setText(f"opening the probe {text}…")
        self.probe_requested.emit(text)

    def _on_kind(self, text: str) -> None:
        self.patch_edit.setEnabled(ATTRIBUTIONS.get(text) == "patch")

    def cancel(self) -> None:
        self.jobs.cancel()
        self._busy(False)
        self.status.setText("cancelled")

    def _attributed(self, name: str, values: np.ndarray, summary: str) -> None:
        self._busy(False)
        self.status.setText(summary)
        self.scores[name] = values
        if self.colour_box.findText(name) < 0:
            self.colour_box.addItem(name)
        self.colour_box.setCurrentText(name)
        self._on_colour(name)

    def _failed(self, err: BaseException) -> None:
        self._busy(False)
        self.status.setText(str(err))

    def colour_by(self, name: str) -> None:
        self.colour_box.setCurrentText(name)

    def _on_layer_choice(self, _index: int) -> None:
        self._on_colour(self.colour_box.currentText())

    def _on_colour(self, name: str) -> None:
        from ...models.head_scores import definition

        values = self.scores.get(name)
        if values is None:
            text = "Ring each thumbnail by a head score or an attribution; the heads ranked by it below."
        elif name.startswith(("dla ", "ablate:")):
            text = (f"{name}: " + ("each head's output through W_o, the final norm (its scale from the unedited run) "
                                   "and the unembedding" if name.startswith("dla") else
                                   "the change of the logit when that head alone is ablated") + ".")
        else:
            text = definition(name)
        self.definition.setText(text if values is None else text + " Rings: the more orange, the higher.")
        self.table.setSortingEnabled(False)
        self.table.setRowCount(0)
        if values is not None:
            self.table.setHorizontalHeaderLabels(["layer", "head", name])
            order = np.argsort(-values, axis=None, kind="stable")
            only = self.layer_box.currentIndex() - 1   # -1: every layer
            if only >= 0:
                order = [flat for flat in order if flat // values.shape[1] == only]
            self.table.setRowCount(len(order))
            for r, flat in enumerate(order):
                layer, head = divmod(int(flat), values.shape[1])
                value = float(values[layer, head])
                self.table.setItem(r, 0, _Number(layer, f"L{layer}"))
                self.table.setItem(r, 1, _Number(head, f"H{head}"))
                self.table.setItem(r, 2, _Number(value, f"{value:.3f}"))
            self.table.setSortingEnabled(True)
            self.table.sortItems(2, Qt.SortOrder.DescendingOrder)   # enabling sorts by the last column clicked
        self._draw(None if values is None else name, values)
        self.coloured.emit(None if values is None else name, values)

    def _draw(self, name: str | None, values: np.ndarray | None) -> None:
        """The heatmap of the score shown: head across, layer down."""
        self.shown = name
        self.plot.setTitle("" if name is None else name)
        self.colour_bar.setVisible(values is not None)
        self.blank.setVisible(values is None)
        self.hint.setVisible(values is None)
        if values is None:
            self.image.clear()
            self._draw_blank()
            return
        axis_values(self.plot, True)
        layers, heads = values.shape
        low, high = float(np.nanmin(values)), float(np.nanmax(values))
        self.image.setImage(np.asarray(values, dtype=np.float32), levels=(low, high if high > low else low + 1e-9))
        self.colour_bar.setLevels((low, high if high > low else low + 1e-9))
        self.image.setRect(-0.5, -0.5, heads, layers)
        self._grid(layers, heads)

    def _grid(self, layers: int, heads: int) -> None:
        """The axes of a layers × heads map: its ticks and range."""
        step = max(1, -(-layers // 6))   # at most six layer labels: the tab's plot is short
        self.plot.getAxis("left").setTicks([[(float(layer), str(layer)) for layer in range(0, layers, step)]])
        self.plot.getAxis("bottom").setTicks([[(float(head), str(head)) for head in range(heads)]])
        self.plot.setXRange(-0.5, heads - 0.5, padding=0)
        self.plot.setYRange(-0.5, layers - 0.5, padding=0)

    def _draw_blank(self) -> None:
        """No score chosen: the model's heads as light grey cells (white lines between them)
        under a hint; before any scores, the hint alone on an axis-less frame."""
        shape = next(iter(self.scores.values())).shape if self.scores else None
        if shape is None:
            axis_values(self.plot, False)   # no model yet: nothing to count
            self.blank.clear()
            self.hint.setText("")
            return
        layers, heads = shape
        cell = 8 if layers * heads <= 4096 else 1   # SmolLM2: 30 × 9; a huge model needs no lines
        grid = np.full((layers * cell, heads * cell, 3), 232, dtype=np.uint8)
        if cell > 1:
            grid[::cell], grid[:, ::cell] = 255, 255
        self.blank.setImage(grid, levels=(0, 255))
        self.blank.setRect(-0.5, -0.5, heads, layers)
        axis_values(self.plot, True)
        self._grid(layers, heads)
        self.hint.setText("Colour by a score above\nto colour and rank the heads")
        self.hint.setPos((heads - 1) / 2, (layers - 1) / 2)

    def export_item(self):
        return self.plot_widget.ci if self.shown is not None else None

    def figure_item(self):
        return self.export_item()

    def _on_row(self, row: int, _column: int) -> None:
        layer, head = (int(self.table.item(row, c).value) for c in (0, 1))
        self.chosen.emit(layer, head)
