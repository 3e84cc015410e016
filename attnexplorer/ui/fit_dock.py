"""The Fit dock: choose a target pattern, watch W_q and W_k learn it.

``FitDock(document)`` holds the target chooser (built-ins, another head, or a matrix drawn by
click-and-drag on the target heatmap or imported from CSV/NPY), what trains, the optimiser,
learning rate and steps, Start / Pause-Resume / Stop, and a live loss curve on a log scale
with the step count and the largest |weights − target|. Targets go through
``core.fit.check_target`` and the settings through ``core.fit.Fitter``, exactly as the CLI's
do, so the window and ``attnexplorer fit`` accept and refuse the same things; a refusal is one
line in the dock's report and the status bar, and nothing starts.

The fit itself runs on ``FitRunner``'s worker thread; the panels, tables and Explain follow
through the document (one undo step for the whole fit).

Drawing: a stroke over row i makes row i's target uniform over the cells the stroke touched
(rows always sum to 1); a masked cell cannot be drawn on (the report says so). In
cross-attention the target is n×n_k, a column per source token.

What trains for "the selected head" with grouped K/V heads is ``core.fit``'s rule (its W_q,
and the W_k of the K/V head it reads, which other query heads share): the report names the
heads that change with it (``Fitter.notes``) while the fit runs and when it ends.
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import (
    QCheckBox, QComboBox, QDoubleSpinBox, QFileDialog, QFrame, QGridLayout, QHBoxLayout, QLabel, QPlainTextEdit,
    QPushButton, QSizePolicy, QSpinBox, QVBoxLayout, QWidget,
)

from ..core.errors import AttnExplorerError
from ..core.fit import DEFAULT_LR, Fitter, blocked_cells, check_target, target_for
from ..core.fit.settings import FitError, check_fit_memory
from ..core.long.result import is_long
from .fit_runner import FitRunner
from .panels.matrix_view import MatrixView

# (key, label): the built-in targets, then a drawn or imported matrix.
TARGETS = (("previous-token", "Previous token"), ("first-token", "First token (sink)"), ("self", "Self (diagonal)"),
           ("uniform", "Uniform over visible keys"), ("window", "Window band W"), ("head", "Another head's weights"),
           ("custom", "Drawn / imported"))


class FitDock(QWidget):
    def __init__(self, document, parent=None):
        super().__init__(parent)
        self.document = document
        self.runner = FitRunner(document, self)
        self._custom: np.ndarray | None = None  # the drawn/imported matrix (n×n_k)
        self._stroke: dict[int, set[int]] = {}  # row → the columns the current stroke touched
        self._last_cell: tuple[int, int] | None = None
        self.shown_target = None  # the validated Target drawn in the heatmap, or None
        self._stale = False  # the session or selection changed while the dock was hidden
        self._drawn_for = None  # the session the shown target was made for
        self.report = ""
        self._notes: tuple[str, ...] = ()  # what the running fit changes besides its heads (shared K/V)
        self._curve = np.empty((0, 2))  # (step, loss) of the loss curve, grown by doubling
        self._curve_count = 0

        self.target_combo = QComboBox()
        for key, label in TARGETS:
            self.target_combo.addItem(label, key)
        self.param_spin = QSpinBox()
        self.param_spin.setRange(0, 8192)
        self.param_spin.setValue(2)
        self.scope_combo = QComboBox()
        self.scope_combo.addItem("Selected head", "selected")
        self.scope_combo.addItem("Every head (one target each)", "all")
        self.import_button = QPushButton("Import…")
        self.import_button.setToolTip("Read a target matrix from a CSV/TSV/NPY file (rows renormalised)")
        self.clear_button = QPushButton("Clear")
        self.clear_button.setToolTip("Start a drawing from the diagonal")

        self.view = MatrixView("Target (drag to draw)", colorbar=False, signed=False, on_click=self._on_cell_clicked,
                               on_drag=self._on_drag, on_hover=self._on_hover)
        self.canvas = pg.GraphicsLayoutWidget()
        self.canvas.addItem(self.view)
        self.canvas.setMinimumSize(150, 130)

        self.train_q = QCheckBox("W_q")
        self.train_k = QCheckBox("W_k")
        self.train_b = QCheckBox("biases")
        self.train_b.setToolTip("Also train b_q and b_k (a session without them starts from zero biases)")
        self.train_q.setChecked(True)
        self.train_k.setChecked(True)
        self.optimizer_combo = QComboBox()
        self.optimizer_combo.addItem("Adam", "adam")
        self.optimizer_combo.addItem("SGD", "sgd")
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
        # No word-wrapped QLabel in this dock: a label that wraps gives the dock a height-for-width,
        # and the scroll area around the dock then sizes it to its preferred height, not the
        # height there is, pushing the plots out of view. The report (a plateau's reasons can
        # run to three lines) is a small read-only text box instead.
        self.status_label = QLabel("step 0")
        # Its text must not set the dock's width (a long figure is cut, the tooltip explains).
        self.status_label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        for combo in (self.target_combo, self.scope_combo, self.optimizer_combo):
            combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
            combo.setMinimumContentsLength(8)
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
        target_row.addWidget(self.target_combo, 1)
        target_row.addWidget(self.param_spin)
        grid.addLayout(target_row, 0, 1, 1, 3)
        grid.addWidget(QLabel("For"), 1, 0)
        grid.addWidget(self.scope_combo, 1, 1)
        grid.addWidget(self.import_button, 1, 2)
        grid.addWidget(self.clear_button, 1, 3)
        grid.addWidget(QLabel("Train"), 2, 0)
        trains = QHBoxLayout()
        for box in (self.train_q, self.train_k, self.train_b):
            trains.addWidget(box)
        trains.addStretch(1)
        grid.addLayout(trains, 2, 1, 1, 3)
        # The optimiser, lr and steps on two rows: on one they made the dock wider than the
        # left column of a 1280×800 window, and Stop and the steps box were cut off.
        grid.addWidget(QLabel("Optimiser"), 3, 0)
        grid.addWidget(self.optimizer_combo, 3, 1)
        grid.addWidget(QLabel("lr"), 3, 2)
        grid.addWidget(self.lr_spin, 3, 3)
        grid.addWidget(QLabel("Steps"), 4, 0)
        grid.addWidget(self.steps_spin, 4, 1)
        grid.setColumnStretch(1, 1)
        controls = QHBoxLayout()
        for b in (self.start_button, self.pause_button, self.stop_button):
            controls.addWidget(b)
        plots = QHBoxLayout()
        plots.addWidget(self.canvas, 1)
        plots.addWidget(self.loss_plot, 1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addLayout(grid)
        layout.addLayout(controls)
        layout.addWidget(self.status_label)
        layout.addLayout(plots, 1)
        layout.addWidget(self.report_label)

        self.target_combo.currentIndexChanged.connect(self._on_target_kind)
        self.param_spin.valueChanged.connect(lambda _v: self.refresh_target())
        self.scope_combo.currentIndexChanged.connect(lambda _i: self.refresh_target())
        self.optimizer_combo.currentIndexChanged.connect(self._on_optimizer)
        self.import_button.clicked.connect(self._on_import)
        self.clear_button.clicked.connect(self._on_clear)
        self.start_button.clicked.connect(self.start)
        self.pause_button.clicked.connect(self._on_pause)
        self.stop_button.clicked.connect(self.runner.stop)
        self.runner.progressed.connect(self._on_progress)
        self.runner.finished.connect(self._on_finished)
        self.runner.state_changed.connect(self._sync_buttons)
        # The target is validated and drawn only while the dock is on screen, once per turn of
        # the event loop: every edit of the session would otherwise pay for it (an n×n check
        # and heatmap, and a whole compute for "another head's weights").
        self._refresh_timer = QTimer(self)
        self._refresh_timer.setSingleShot(True)
        self._refresh_timer.setInterval(0)
        self._refresh_timer.timeout.connect(self.refresh_target)
        document.session_changed.connect(self._on_session_changed)
        document.selection.changed.connect(lambda _s: self._refresh_later())
        self._on_target_kind()
        self._sync_buttons(self.runner.state)

    # -- the target --------------------------------------------------------------------------
    @property
    def target_kind(self) -> str:
        return self.target_combo.currentData()

    def target_spec(self) -> str:
        kind = self.target_kind
        return f"{kind}:{self.param_spin.value()}" if kind in ("window", "head") else kind

    def heads(self) -> list[int]:
        s = self.document.session
        if self.scope_combo.currentData() == "all":
            return list(range(s.heads))
        return [self.document.selection.current.head]

    def targets(self) -> dict:
        """{head: Target} from the chooser; raises AttnExplorerError naming what is wrong."""
        s = self.document.session
        if self.target_kind == "custom":
            return {h: check_target(s, self._custom_matrix(), source="the drawn target") for h in self.heads()}
        return {h: target_for(s, self.target_spec(), head=h, device=self.document.compute.device) for h in self.heads()}

    def _custom_matrix(self) -> np.ndarray:
        s = self.document.session
        if self._custom is None or self._custom.shape != (s.n, s.n_keys):
            self._custom = _diagonal(s.n, s.n_keys)
        return self._custom

    def set_custom_target(self, matrix) -> None:
        """Use ``matrix`` (drawn or imported) as the target; refused as the CLI refuses it."""
        target = check_target(self.document.session, matrix, source="the imported target")
        self._custom = np.array(target.matrix)
        self.target_combo.setCurrentIndex(self.target_combo.findData("custom"))
        self.refresh_target()

    def refresh_target(self) -> None:
        """Validate the chosen target for the selected head and draw it (a refusal is reported)."""
        self._refresh_timer.stop()
        self._stale = False
        if self.runner.running:
            return
        s = self.document.session
        self._drawn_for = s
        head = self.document.selection.current.head
        refused = self._long_refusal()
        if refused is not None:
            # A target is n × n, and the fit runs the dense engine with its gradients.
            self.shown_target = None
            self.view.clear_matrix()
            self._report(refused)
            return
        try:
            if self.target_kind == "custom":
                target = check_target(s, self._custom_matrix(), source="the drawn target")
            else:
                target = target_for(s, self.target_spec(), head=head, device=self.document.compute.device)
        except AttnExplorerError as err:
            self.shown_target = None
            self.view.clear_matrix()
            self._report(str(err))
            return
        self.shown_target = target
        blocked = blocked_cells(s)
        self.view.set_matrix(target.matrix, row_labels=s.tokens, col_labels=s.key_tokens, levels=(0.0, 1.0),
                             blocked=blocked, blocked_rows=blocked.all(axis=1))
        self._report("; ".join(target.notes))

    def _long_refusal(self) -> str | None:
        """Why a fit cannot run on this session (a long input), or None."""
        s = self.document.session
        if not is_long(s, self.document.compute.dtype, self.document.compute.device):
            dtype = "float64" if self.document.compute.dtype == "float64" else "float32"
            try:   # the same estimate as ``attnexplorer fit``'s, before a target is made
                check_fit_memory(s, len(self.heads()), dtype, self.document.compute.device)
            except FitError as err:
                return str(err)
            return None
        return (f"fitting works on whole n × n matrices: {s.n:,} tokens × {s.heads} heads is a long input "
                f"(computed in tiles); use fewer tokens or heads to fit")

    def _on_target_kind(self) -> None:
        kind = self.target_kind
        self.param_spin.setVisible(kind in ("window", "head"))
        if kind == "window":
            self.param_spin.setRange(1, 8192)
            self.param_spin.setPrefix("W = ")
        elif kind == "head":
            self.param_spin.setRange(0, 63)
            self.param_spin.setPrefix("head ")
        if kind == "custom" and self._custom is None and self.shown_target is not None:
            self._custom = np.array(self.shown_target.matrix)  # start drawing from what is shown
        self.clear_button.setVisible(kind == "custom")
        self.refresh_target()

    # -- drawing -------------------------------------------------------------------------------
    def paint_cell(self, row: int, col: int, new_stroke: bool = False) -> bool:
        """Add (row, col) to the stroke: row's target becomes uniform over the cells touched."""
        s = self.document.session
        if self.runner.running or not (0 <= row < s.n and 0 <= col < s.n_keys):
            return False
        if blocked_cells(s)[row, col]:
            self._report(f"cell ({s.tokens[row]!r}, {s.key_tokens[col]!r}) is masked: the head can never attend there")
            return False
        if self.target_kind != "custom":
            if self._refresh_timer.isActive() or self._stale:
                self.refresh_target()  # draw from the target as it is now
            self._custom = np.array(self.shown_target.matrix) if self.shown_target is not None else None
            self.target_combo.setCurrentIndex(self.target_combo.findData("custom"))
        m = np.array(self._custom_matrix())
        if new_stroke:
            self._stroke = {}
        # The first touch of a row in a stroke redraws that row: uniform over the cells touched.
        cells = self._stroke.setdefault(row, set())
        cells.add(col)
        m[row] = 0.0
        m[row, sorted(cells)] = 1.0 / len(cells)
        self._custom = m
        self.refresh_target()
        return True

    def _on_cell_clicked(self, row: int, col: int) -> None:
        self.paint_cell(row, col, new_stroke=True)

    def _on_drag(self, cell, start: bool, finish: bool) -> None:
        if start:
            self._stroke = {}
            self._last_cell = None
        if cell is None:
            self._last_cell = None
            return
        # Mouse moves arrive a few pixels apart, and fewer when the machine is busy: every cell
        # on the line from the previous one is part of the stroke.
        for r, c in _cells_between(self._last_cell or cell, cell):
            self.paint_cell(r, c)
        self._last_cell = cell

    def _on_hover(self, text: str) -> None:
        self.view.setToolTip(text)

    def _on_clear(self) -> None:
        s = self.document.session
        self._custom = _diagonal(s.n, s.n_keys)
        self.refresh_target()

    def _on_import(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Import a target matrix", "", "Matrices (*.csv *.tsv *.txt *.npy)")
        if path:
            self.import_file(path)

    def import_file(self, path) -> bool:
        from ..io.matrices import read_matrix

        try:
            self.set_custom_target(read_matrix(path))
        except AttnExplorerError as err:
            self._report(str(err))
            return False
        return True

    # -- running -------------------------------------------------------------------------------
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
        refused = self._long_refusal()
        if refused is not None:
            self._report(refused)
            return False
        dtype = "float64" if doc.compute.dtype == "float64" else "float32"  # half types fit in float32
        try:
            targets = self.targets()
            fitter = Fitter(doc.session, targets, train=self.train(), optimizer=self.optimizer_combo.currentData(),
                            lr=self.lr_spin.value(), steps=self.steps_spin.value(), device=doc.compute.device, dtype=dtype,
                            single_thread=True, shown_weights=self._shown_weights(dtype))
        except AttnExplorerError as err:
            self._report(str(err))
            return False
        self.loss_curve.setData([], [])
        self._curve_count = 0
        heads = ", ".join(map(str, sorted(targets)))
        self._notes = fitter.notes
        self._report("; ".join(fitter.notes))
        self.runner.start(fitter, f"Fit head{'s' if len(targets) > 1 else ''} {heads} to {self.target_combo.currentText().lower()}")
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
        self.status_label.setText(f"step {progress.step}/{self.runner.fitter.steps} · loss {progress.loss:.3g} · "
                                  f"max |w − t| {progress.max_error:.2g}")
        self.status_label.setToolTip("loss: mean over query rows of KL(target ‖ weights); "
                                     "max |w − t|: the largest |weights − target| of any cell")

    def _on_finished(self, progress) -> None:
        if progress is not None:
            self._on_progress(progress)
        self._report("; ".join((self.runner.message,) + self._notes))
        self.document.message.emit(self.runner.message)

    def _sync_buttons(self, state: str) -> None:
        idle = state == "idle"
        self.start_button.setEnabled(idle)
        self.pause_button.setEnabled(not idle)
        self.pause_button.setText("Resume" if state == "paused" else "Pause")
        self.stop_button.setEnabled(not idle)
        for w in (self.target_combo, self.param_spin, self.scope_combo, self.import_button, self.clear_button,
                  self.train_q, self.train_k, self.train_b, self.optimizer_combo, self.lr_spin, self.steps_spin):
            w.setEnabled(idle)
        if idle:
            self.refresh_target()

    def _on_session_changed(self, session) -> None:
        if self.runner.running:
            return
        if self.target_kind != "head" and self._drawn_for is not None and _same_target_inputs(self._drawn_for, session):
            return  # a weight or embedding edit: the target shown is still the one (no redraw)
        self._refresh_later()

    def _refresh_later(self) -> None:
        if self.isVisible() and not self.runner.running:
            self._refresh_timer.start()
        else:
            self._stale = True

    def showEvent(self, event) -> None:
        super().showEvent(event)
        if self._stale:
            self._stale = False
            self.refresh_target()

    def _report(self, text: str) -> None:
        self.report = text
        self.report_label.setPlainText(text)


def _same_target_inputs(old, new) -> bool:
    """Whether a target made for session ``old`` is also ``new``'s: every target but head:H is
    made from the tokens, the mask and the source (and whether the input is long, from its
    sizes and positions), not from the numbers of the weights or embeddings."""
    if new is old:
        return True
    return (new.tokens == old.tokens and new.source is old.source and new.positions is old.positions
            and (new.mask is old.mask or new.mask == old.mask)
            and (new.heads, new.kv_heads, new.d, new.d_k, new.d_v) == (old.heads, old.kv_heads, old.d, old.d_k, old.d_v))


def _diagonal(n: int, n_k: int) -> np.ndarray:
    """Query i → key i (the last key for queries beyond the source's length): a drawing's start."""
    t = np.zeros((n, n_k))
    t[np.arange(n), np.minimum(np.arange(n), n_k - 1)] = 1.0
    return t


def _cells_between(a: tuple[int, int], b: tuple[int, int]) -> list[tuple[int, int]]:
    """The cells on the straight line from cell ``a`` to cell ``b``, both included."""
    steps = max(abs(b[0] - a[0]), abs(b[1] - a[1]))
    if steps == 0:
        return [b]
    return list(dict.fromkeys((round(a[0] + (b[0] - a[0]) * t / steps), round(a[1] + (b[1] - a[1]) * t / steps))
                              for t in range(steps + 1)))
