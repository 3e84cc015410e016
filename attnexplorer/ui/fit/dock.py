"""The Fit dock: choose a target pattern, watch W_q and W_k learn it.

``FitDock(document)`` lays out two parts: the target editor (``target.FitTargetEditor``:
built-ins, another head, or a matrix drawn by click-and-drag on the target heatmap or imported
from CSV/NPY) and the run controls (``FitRunControls``, here: what trains, the optimiser,
learning rate and steps, Start / Pause-Resume / Stop, and a live loss curve on a log scale with
the step count and the largest |weights − target|), with one report box for both. Targets go
through ``core.fit.check_target`` and the settings through ``core.fit.Fitter``, exactly as the
CLI's do, so the window and ``attnexplorer fit`` accept and refuse the same things; a refusal
is one line in the dock's report and the status bar, and nothing starts.

The fit itself runs on ``FitRunner``'s worker thread; the panels, tables and Explain follow
through the document (one undo step for the whole fit).

What trains for "the selected head" with grouped K/V heads is ``core.fit``'s rule (its W_q,
and the W_k of the K/V head it reads, which other query heads share): the report names the
heads that change with it (``Fitter.notes``) while the fit runs and when it ends.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QObject
from PySide6.QtWidgets import (
    QCheckBox, QComboBox, QDoubleSpinBox, QFrame, QGridLayout, QHBoxLayout, QLabel, QPlainTextEdit, QPushButton,
    QSizePolicy, QSpinBox, QVBoxLayout, QWidget,
)

from ...core.errors import AttnExplorerError
from ...core.fit import DEFAULT_LR, Fitter
from .runner import FitRunner
from .target import FitTargetEditor
from ..panels import theme


class FitRunControls(QObject):
    """What trains and how, Start / Pause-Resume / Stop, the loss curve and the step line
    (widgets laid out by ``FitDock``, its ``parent``). ``editor`` gives the targets;
    ``report(text)``: the dock's one-line report."""

    def __init__(self, document, runner, editor: FitTargetEditor, report: Callable[[str], None], parent):
        super().__init__(parent)
        self.document = document
        self.runner = runner
        self.editor = editor
        self._report = report
        self._notes: tuple[str, ...] = ()  # what the running fit changes besides its heads (shared K/V)
        self._curve = np.empty((0, 2))  # (step, loss) of the loss curve, grown by doubling
        self._curve_count = 0
        self._curve_ranges = None  # the loss plot's (x, y) ranges, set in steps (_follow_curve)

        self.train_q = QCheckBox("W_q")
        self.train_k = QCheckBox("W_k")
        self.train_b = QCheckBox("biases")
        self.train_b.setToolTip("Also train b_q and b_k (a session without them starts from zero biases)")
        self.train_q.setChecked(True)
        self.train_k.setChecked(True)
        self.optimizer_combo = QComboBox()
        self.optimizer_combo.addItem("Adam", "adam")
        self.optimizer_combo.addItem("SGD", "sgd")
        self.optimizer_combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.optimizer_combo.setMinimumContentsLength(8)
        self.lr_spin = QDoubleSpinBox()
        self.lr_spin.setDecimals(4)
        self.lr_spin.setRange(0.0001, 1000.0)
        self.lr_spin.setValue(DEFAULT_LR["adam"])
        self.steps_spin = QSpinBox()
        self.steps_spin.setRange(1, 1_000_000)
        self.steps_spin.setValue(500)

        self.start_button = QPushButton("Start")
        self.pause_button = QPushButton("Pause")
        self.stop_button = QPushButton("Stop")

        self.loss_plot = pg.PlotWidget()
        self.loss_plot.setLogMode(x=False, y=True)
        self.loss_plot.setLabel("bottom", "step")
        self.loss_plot.setLabel("left", "loss (KL)")
        self.loss_plot.setMinimumSize(150, 130)
        self.loss_plot.setMenuEnabled(False)
        self.loss_curve = self.loss_plot.plot([], [], pen=pg.mkPen("#1f77b4", width=2))
        self.loss_plot.getPlotItem().setClipToView(True)
        self.loss_plot.getPlotItem().setDownsampling(auto=True, mode="peak")
        self.loss_plot.setTitle("loss, log scale", size="9pt")
        self.status_label = QLabel("step 0")
        # Its text must not set the dock's width (a long figure is cut, the tooltip explains).
        self.status_label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)

        self.optimizer_combo.currentIndexChanged.connect(self._on_optimizer)
        self.start_button.clicked.connect(self.start)
        self.pause_button.clicked.connect(self._on_pause)
        self.stop_button.clicked.connect(self.runner.stop)
        self.runner.progressed.connect(self._on_progress)
        self.runner.finished.connect(self._on_finished)

    def widgets(self) -> tuple:
        """What a running fit disables: the settings (the buttons follow the runner's state)."""
        return (self.train_q, self.train_k, self.train_b, self.optimizer_combo, self.lr_spin, self.steps_spin)

    def _on_optimizer(self) -> None:
        self.lr_spin.setValue(DEFAULT_LR[self.optimizer_combo.currentData()])

    def train(self) -> tuple[str, ...]:
        return tuple(name for box, name in ((self.train_q, "q"), (self.train_k, "k"), (self.train_b, "biases"))
                     if box.isChecked() and box.isEnabled())

    def start(self) -> bool:
        """Start a fit with the dock's settings; False (and one line saying why) if refused."""
        if self.runner.running:
            return False
        doc = self.document
        doc.flush()
        refused = self.editor.refusal()
        if refused is not None:
            self._report(refused)
            return False
        dtype = "float64" if doc.compute.dtype == "float64" else "float32"  # half types fit in float32
        try:
            targets = self.editor.targets()
            fitter = Fitter(doc.session, targets, train=self.train(), optimizer=self.optimizer_combo.currentData(),
                            lr=self.lr_spin.value(), steps=self.steps_spin.value(), device=doc.compute.device, dtype=dtype,
                            single_thread=True, shown_weights=self._shown_weights(dtype))
        except AttnExplorerError as err:
            self._report(str(err))
            return False
        self.loss_curve.setData([], [])
        self._curve_count = 0
        self._curve_ranges = None  # the loss plot's (x, y) ranges, set in steps (_follow_curve)
        heads = ", ".join(map(str, sorted(targets)))
        self._notes = fitter.notes
        self._report("; ".join(fitter.notes))
        self.runner.start(fitter, f"Fit head{'s' if len(targets) > 1 else ''} {heads} to {self.editor.target_combo.currentText().lower()}")
        return True

    def _shown_weights(self, dtype: str):
        """The weights the window shows for exactly this session at the fit's precision, for
        the fit to check itself against on its own thread; None (it computes them) else."""
        result = self.document.result
        if result is None or result.session is not self.document.session or result.weights is None:
            return None
        if self.document.compute.dtype != dtype or result.weights.shape[0] != self.document.session.heads:
            return None
        return result.weights

    def _on_pause(self) -> None:
        if self.runner.state == "running":
            self.runner.pause()
        else:
            self.runner.resume()

    def _on_progress(self, progress) -> None:
        history = self.runner.history
        if len(history) > self._curve_count:
            # Only the points since the last frame are converted: a long fit's history grows
            # by thousands of points, and converting all of it on every frame grew with it.
            new = history[self._curve_count:]
            end = self._curve_count + len(new)
            if end > len(self._curve):
                grown = np.empty((max(2 * len(self._curve), end, 1024), 2))
                grown[: self._curve_count] = self._curve[: self._curve_count]
                self._curve = grown
            self._curve[self._curve_count:end, 0] = [p[0] for p in new]
            self._curve[self._curve_count:end, 1] = [max(p[1], 1e-12) for p in new]
            self._curve_count = end
            self.loss_curve.setData(self._curve[:end, 0], self._curve[:end, 1])
            self._follow_curve(end)
        self.status_label.setText(f"step {progress.step}/{self.runner.fitter.steps} · loss {progress.loss:.3g} · "
                                  f"max |w − t| {progress.max_error:.2g}")
        self.status_label.setToolTip("loss: mean over query rows of KL(target ‖ weights); "
                                     "max |w − t|: the largest |weights − target| of any cell")

    def _follow_curve(self, count: int) -> None:
        """Keep the loss curve in view with ranges that stay still: the steps axis spans the
        fit's steps (the curve grows along it like a progress bar), the loss axis whole decades.
        Auto-range moved both on every frame of a fit, and each move re-labelled and repainted
        both axes (the Fit dock's plots painted 3.8 times a frame of a fit at n = 512, 8.5 ms
        of the GUI thread's time; 4.9 ms with this)."""
        last_step = float(self._curve[count - 1, 0])
        losses = self._curve[:count, 1]
        planned = getattr(self.runner.fitter, "steps", 0) or 0
        x_range = (0.0, float(max(planned, theme.nice_bound(max(last_step, 10.0)))))
        y_range = (math.floor(math.log10(float(losses.min()))), math.ceil(math.log10(float(losses.max()))))
        if y_range[1] <= y_range[0]:
            y_range = (y_range[0], y_range[0] + 1)
        if (x_range, y_range) != self._curve_ranges:
            self._curve_ranges = (x_range, y_range)
            self.loss_plot.setRange(xRange=x_range, yRange=y_range, padding=0.02)

    def _on_finished(self, progress) -> None:
        if progress is not None:
            self._on_progress(progress)
        self._report("; ".join((self.runner.message,) + self._notes))
        self.document.message.emit(self.runner.message)

    def follow_state(self, state: str) -> None:
        """The buttons for the runner's ``state`` (idle, running or paused)."""
        idle = state == "idle"
        self.start_button.setEnabled(idle)
        self.pause_button.setEnabled(not idle)
        self.pause_button.setText("Resume" if state == "paused" else "Pause")
        self.stop_button.setEnabled(not idle)


class FitDock(QWidget):
    """The target editor (``editor``) and the run controls (``controls``) of one ``runner``,
    laid out in one dock, with the report both write to (``report``, the text shown)."""

    def __init__(self, document, parent=None):
        super().__init__(parent)
        self.document = document
        self.runner = FitRunner(document, self)
        self.report = ""
        self.editor = FitTargetEditor(document, self.runner, self._report, self)
        self.controls = FitRunControls(document, self.runner, self.editor, self._report, self)
        e, c = self.editor, self.controls
        # No word-wrapped QLabel in this dock: a label that wraps gives the dock a height-for-width,
        # and the scroll area around the dock then sizes it to its preferred height, not the
        # height there is, pushing the plots out of view. The report (a plateau's reasons can
        # run to three lines) is a small read-only text box instead.
        self.report_label = QPlainTextEdit()
        self.report_label.setReadOnly(True)
        self.report_label.setFixedHeight(3 * self.report_label.fontMetrics().lineSpacing() + 12)
        self.report_label.setFrameShape(QFrame.Shape.NoFrame)

        # Compact rows, then the target and the loss curve side by side: the dock shares the
        # left column with the inputs, so height is what it has least of.
        grid = QGridLayout()
        grid.setContentsMargins(0, 0, 0, 0)
        grid.addWidget(QLabel("Target"), 0, 0)
        target_row = QHBoxLayout()
        target_row.addWidget(e.target_combo, 1)
        target_row.addWidget(e.param_spin)
        grid.addLayout(target_row, 0, 1, 1, 3)
        grid.addWidget(QLabel("For"), 1, 0)
        grid.addWidget(e.scope_combo, 1, 1)
        grid.addWidget(e.import_button, 1, 2)
        grid.addWidget(e.clear_button, 1, 3)
        grid.addWidget(QLabel("Train"), 2, 0)
        trains = QHBoxLayout()
        for box in (c.train_q, c.train_k, c.train_b):
            trains.addWidget(box)
        trains.addStretch(1)
        grid.addLayout(trains, 2, 1, 1, 3)
        # The optimiser, lr and steps on two rows: on one they made the dock wider than the
        # left column of a 1280×800 window, and Stop and the steps box were cut off.
        grid.addWidget(QLabel("Optimiser"), 3, 0)
        grid.addWidget(c.optimizer_combo, 3, 1)
        grid.addWidget(QLabel("lr"), 3, 2)
        grid.addWidget(c.lr_spin, 3, 3)
        grid.addWidget(QLabel("Steps"), 4, 0)
        grid.addWidget(c.steps_spin, 4, 1)
        grid.setColumnStretch(1, 1)
        buttons = QHBoxLayout()
        for b in (c.start_button, c.pause_button, c.stop_button):
            buttons.addWidget(b)
        plots = QHBoxLayout()
        plots.addWidget(e.canvas, 1)
        plots.addWidget(c.loss_plot, 1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addLayout(grid)
        layout.addLayout(buttons)
        layout.addWidget(c.status_label)
        layout.addLayout(plots, 1)
        layout.addWidget(self.report_label)

        self.runner.state_changed.connect(self._sync_buttons)
        e.follow_kind()
        self._sync_buttons(self.runner.state)

    def _sync_buttons(self, state: str) -> None:
        idle = state == "idle"
        self.controls.follow_state(state)
        for w in self.editor.widgets() + self.controls.widgets():
            w.setEnabled(idle)
        if idle:
            self.editor.refresh_target()

    def showEvent(self, event) -> None:
        super().showEvent(event)
        self.editor.shown()

    def _report(self, text: str) -> None:
        self.report = text
        self.report_label.setPlainText(text)
