"""The Fit dock's target editor: which pattern the head should learn, shown as a heatmap.

The built-in targets (previous token, first token, self, uniform, a window band, another
head's weights), one target per head or for the selected head, and a matrix drawn by
click-and-drag on the heatmap or imported from CSV/NPY. Targets go through
``core.fit.check_target`` and ``core.fit.target_for``, exactly as the CLI's do. A refusal is
one line in the dock's report (``report``).

Drawing: a stroke over row i makes row i's target uniform over the cells the stroke touched
(rows always sum to 1); a masked cell cannot be drawn on (the report says so). In
cross-attention the target is n×n_k, a column per source token.

The target is validated and drawn only while the dock is on screen, once per turn of the
event loop, and never while a fit runs (``FitDock`` lays the widgets out and says when it is
shown).
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QObject, QTimer
from PySide6.QtWidgets import QComboBox, QFileDialog, QPushButton, QSpinBox

from ...core.errors import AttnExplorerError
from ...core.fit import blocked_cells, check_target, target_for
from ...core.fit.settings import FitError, check_fit_memory
from ...core.compute.long.result import is_long
from ..panels.matrix_view import MatrixView

# (key, label): the built-in targets, then a drawn or imported matrix.
TARGETS = (("previous-token", "Previous token"), ("first-token", "First token (sink)"), ("self", "Self (diagonal)"),
           ("uniform", "Uniform over visible keys"), ("window", "Window band W"), ("head", "Another head's weights"),
           ("custom", "Drawn / imported"))


class FitTargetEditor(QObject):
    """The target chooser's widgets (laid out by ``FitDock``, its ``parent``) and what they do.
    ``runner``: the dock's ``FitRunner`` (nothing changes while it runs); ``report(text)``: the
    dock's one-line report."""

    def __init__(self, document, runner, report: Callable[[str], None], parent):
        super().__init__(parent)
        self.document = document
        self.runner = runner
        self._report = report
        self._custom: np.ndarray | None = None  # the drawn/imported matrix (n×n_k)
        self._stroke: dict[int, set[int]] = {}  # row → the columns the current stroke touched
        self._last_cell: tuple[int, int] | None = None
        self.shown_target = None  # the validated Target drawn in the heatmap, or None
        self._stale = False  # the session or selection changed while the dock was hidden
        self._drawn_for = None  # the session the shown target was made for

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
        for combo in (self.target_combo, self.scope_combo):
            combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
            combo.setMinimumContentsLength(8)

        self.view = MatrixView("Target (drag to draw)", colorbar=False, signed=False, on_click=self._on_cell_clicked,
                               on_drag=self._on_drag, on_hover=self._on_hover)
        self.canvas = pg.GraphicsLayoutWidget()
        self.canvas.addItem(self.view)
        self.canvas.setMinimumSize(150, 130)

        self.target_combo.currentIndexChanged.connect(self.follow_kind)
        self.param_spin.valueChanged.connect(lambda _v: self.refresh_target())
        self.scope_combo.currentIndexChanged.connect(lambda _i: self.refresh_target())
        self.import_button.clicked.connect(self._on_import)
        self.clear_button.clicked.connect(self._on_clear)
        # The target is validated and drawn only while the dock is on screen, once per turn of
        # the event loop: every edit of the session would otherwise pay for it (an n×n check
        # and heatmap, and a whole compute for "another head's weights").
        self._refresh_timer = QTimer(self)
        self._refresh_timer.setSingleShot(True)
        self._refresh_timer.setInterval(0)
        self._refresh_timer.timeout.connect(self.refresh_target)
        document.session_changed.connect(self._on_session_changed)
        # A method, not a lambda: PySide holds a lambda strongly, out of the collector's sight,
        # so the document's selection kept this editor (and through it the closed window's
        # document and plots) alive after the window was gone.
        document.selection.changed.connect(self._on_selection_changed)

    def widgets(self) -> tuple:
        """What a running fit disables: every control of the target."""
        return (self.target_combo, self.param_spin, self.scope_combo, self.import_button, self.clear_button)

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
        refused = self.refusal()
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

    def refusal(self) -> str | None:
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

    def follow_kind(self) -> None:
        """Show the parameter box (and Clear) the chosen kind of target has, and draw it."""
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
        path, _ = QFileDialog.getOpenFileName(self.parent(), "Import a target matrix", "",
                                              "Matrices (*.csv *.tsv *.txt *.npy)")
        if path:
            self.import_file(path)

    def import_file(self, path) -> bool:
        from ...io.matrices import read_matrix

        try:
            self.set_custom_target(read_matrix(path))
        except AttnExplorerError as err:
            self._report(str(err))
            return False
        return True

    def _on_session_changed(self, session) -> None:
        if self.runner.running:
            return
        if self.target_kind != "head" and self._drawn_for is not None and _same_target_inputs(self._drawn_for, session):
            return  # a weight or embedding edit: the target shown is still the one (no redraw)
        self._refresh_later()

    def _on_selection_changed(self, _selection) -> None:
        self._refresh_later()

    def _refresh_later(self) -> None:
        if self.canvas.isVisible() and not self.runner.running:
            self._refresh_timer.start()
        else:
            self._stale = True

    def shown(self) -> None:
        """The dock came on screen: draw what changed while it was hidden."""
        if self._stale:
            self._stale = False
            self.refresh_target()


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
