"""RoPE: the selected query and key in one rotated pair's plane, before and after rotation.

RoPE turns each pair of dimensions of q and k by position × ω (ω = θ^(−2p/r) for pair p).
The left plot shows the chosen pair of the selected query (red) and key (blue) as arrows,
dashed before and solid after the rotation; the table on the right gives the angle of every
pair at every position. The offset shifts every position: both arrows turn by the same
extra angle, so the angle between them, and every score, stays the same (the line under
the plots gives the score q·k before and after RoPE: change the offset and watch it).

The offset is session data (one undo step per change); the pair shown is this panel's own
choice. Everything drawn is read from the result: Q and K after RoPE, Q_unrotated and
K_unrotated before (``core.reading.stage_views.rope_pair``), the angles ``core.inputs.stages.rope_angles``.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QSignalBlocker, Qt
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QSpinBox

from ...core.numbers.number_text import fmt
from ...core.reading.stage_views import rope_pair, rope_pair_names
from ...core.inputs.stages import MAX_OFFSET, rope_angles
from . import theme
from .common import FigurePanel, clamp_selection
from .embedding_panel import arrow_segments
from .matrix_view import MatrixView
from .token_axis import ShrinkingLabel

_CIRCLE = np.linspace(0.0, 2.0 * np.pi, 97)


def chosen_key(result, head: int, query: int, key: int | None) -> int:
    """The selected key, or with none selected the key the query weights most (as Explain)."""
    if key is not None:
        return key
    if result.weights is not None:
        return int(np.argmax(result.weights[head, query]))
    return query


class RopePanel(FigurePanel):
    kind = "rope"
    title = "RoPE: query and key turned in one pair's plane"
    short_title = "RoPE"
    needs = frozenset({"Q", "K", "Q_unrotated", "K_unrotated"})
    minimum_size = (420, 300)

    def __init__(self, document, parent=None):
        # The row of controls is made with the panel, as its canvas is (Qt lays both out and
        # shows them before the panel is built); the plots wait for build().
        super().__init__(document, parent)
        self.setToolTip(__doc__.split("\n\n")[1].replace("\n", " "))
        self.pair_combo = QComboBox()
        self.pair_combo.setToolTip("The rotated pair of dimensions drawn in the plane")
        # A long name ("pair 31 · dims 31, 63 · ω = 0.000133") must not widen the panel.
        self.pair_combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.pair_combo.setMinimumContentsLength(14)
        self.offset_spin = QSpinBox()
        self.offset_spin.setRange(0, MAX_OFFSET)
        self.offset_spin.setKeyboardTracking(False)  # typing 100 is one edit, not 1, 10, 100
        self.offset_spin.setToolTip("Shift every position by this much (positions.offset): q and k turn "
                                    "further, the scores stay the same. One undo step per change.")
        controls = QHBoxLayout()
        controls.setContentsMargins(4, 2, 4, 0)
        controls.addWidget(QLabel("pair"))
        controls.addWidget(self.pair_combo, 1)
        controls.addSpacing(8)
        controls.addWidget(QLabel("position offset"))
        controls.addWidget(self.offset_spin)
        self.layout().insertLayout(0, controls)
        self.pair_combo.currentIndexChanged.connect(self._on_pair_changed)
        self.offset_spin.valueChanged.connect(self._on_offset_changed)

    def build(self) -> None:
        super().build()
        self.plane = self.figure.addPlot(row=1, col=0, enableMenu=False)  # no menu: never built
        self.plane.setAspectLocked(True)
        self.plane.hideButtons()
        self.plane.setMouseEnabled(False, False)  # the arrows' frame stays put while the offset turns them
        theme.light_grid(self.plane, x=True, y=True)
        self.plane.setTitle("", size="10pt")
        self.circles = [pg.PlotDataItem(pen=theme.cosmetic_pen(color, 1.0, Qt.PenStyle.DotLine))
                        for color in (theme.QUERY_COLOR, theme.KEY_COLOR)]
        self.q_before = pg.PlotDataItem(connect="pairs", pen=theme.cosmetic_pen(theme.QUERY_COLOR, 1.5, Qt.PenStyle.DashLine))
        self.k_before = pg.PlotDataItem(connect="pairs", pen=theme.cosmetic_pen(theme.KEY_COLOR, 1.5, Qt.PenStyle.DashLine))
        self.q_after = pg.PlotDataItem(connect="pairs", pen=theme.cosmetic_pen(theme.QUERY_COLOR, 2.5))
        self.k_after = pg.PlotDataItem(connect="pairs", pen=theme.cosmetic_pen(theme.KEY_COLOR, 2.5))
        for item in (*self.circles, self.q_before, self.k_before, self.q_after, self.k_after):
            self.plane.addItem(item)
        # q's labels below their tips and k's above: after RoPE the two may point the same way
        # (the rope preset's previous-token head does exactly that), and both stay readable.
        self.tips = {name: pg.TextItem(color=color) for name, color in (
            ("q", theme.QUERY_COLOR), ("k", theme.KEY_COLOR), ("q′", theme.QUERY_COLOR), ("k′", theme.KEY_COLOR))}
        for item in self.tips.values():
            self.plane.addItem(item, ignoreBounds=True)

        self.angles = MatrixView("angle = pos · ω (rad)", signed=False, row_name="token", col_name="pair",
                                 colorbar=False, on_click=self._on_angle_clicked, on_hover=self.show_readout)
        # Rows read "token @position": no axis titles needed, and the room goes to the cells.
        self.angles.setLabel("bottom", None)
        self.angles.setLabel("left", None)
        self.figure.addItem(self.angles, row=1, col=1)
        self.note = ShrinkingLabel("", size="9pt", justify="left")
        self.figure.addItem(self.note, row=2, col=0, colspan=2)
        self.figure.layout.setRowStretchFactor(1, 1)
        # Half the width each: the locked aspect would let the plane take most of it, and the
        # table's title would shrink to nothing.
        for item in (self.plane, self.angles):
            item.setPreferredWidth(100)
        self.figure.layout.setColumnStretchFactor(0, 1)
        self.figure.layout.setColumnStretchFactor(1, 1)
        self._pair = 0
        self._pair_names: list[str] = []
        self.drawn = None  # the RopePair on screen (its numbers: the angles, the scores before and after)

    def applies_to(self, session) -> bool:
        return session.positions is not None and session.positions.kind == "rope"

    def views(self) -> list[MatrixView]:
        return [self.angles]

    def selection_marks(self) -> list:
        return [self.angles.row_frame]

    # -- drawing ----------------------------------------------------------------------------
    def redraw(self) -> None:
        result = self.document.result
        if result is None or not self.applies_to(result.session) or result.Q_unrotated is None:
            self.angles.clear_matrix()
            return
        session = result.session
        positions = session.positions
        names = rope_pair_names(positions, session.d_k)
        if names != self._pair_names:
            self._pair_names = names
            self._pair = min(self._pair, len(names) - 1)
            with QSignalBlocker(self.pair_combo):
                self.pair_combo.clear()
                self.pair_combo.addItems(names)
                self.pair_combo.setCurrentIndex(self._pair)
        if self.offset_spin.value() != positions.offset:
            with QSignalBlocker(self.offset_spin):
                self.offset_spin.setValue(positions.offset)
        dims = positions.rope_dims(session.d_k)
        angles = rope_angles(result.n, dims, positions.theta, positions.offset)
        top = float(angles.max()) if angles.size else 1.0
        self.angles.set_matrix(angles, row_labels=[f"{t} @{positions.offset + i}" for i, t in enumerate(result.tokens)],
                               col_labels=[f"p{m}" for m in range(dims // 2)], levels=(0.0, top if top > 0 else 1.0))
        self.redraw_selection()

    def redraw_selection(self) -> None:
        result = self.document.result
        if result is None or not self.applies_to(result.session):
            return
        head, query, selected = clamp_selection(self.document, result)
        key = chosen_key(result, head, query, selected)
        pair = rope_pair(result, head, query, key, self._pair)
        if pair is None:
            return
        self.drawn = pair
        self.angles.set_selection(query, pair.pair)
        extent = max(float(np.hypot(*v)) for v in (pair.q_before, pair.k_before)) or 1.0
        head_size = 0.08 * extent
        for item, vector in ((self.q_before, pair.q_before), (self.k_before, pair.k_before),
                             (self.q_after, pair.q_after), (self.k_after, pair.k_after)):
            item.setData(*arrow_segments(vector[None, :], head_size))
        for circle, vector in zip(self.circles, (pair.q_before, pair.k_before)):
            r = float(np.hypot(*vector))
            circle.setData(r * np.cos(_CIRCLE), r * np.sin(_CIRCLE))
        # At angle 0 (position 0) before and after are one arrow: one label says so.
        moved = {v: not np.allclose(before, after, atol=1e-6 * extent)
                 for v, before, after in (("q", pair.q_before, pair.q_after), ("k", pair.k_before, pair.k_after))}
        for name, vector in (("q", pair.q_before), ("k", pair.k_before), ("q′", pair.q_after), ("k′", pair.k_after)):
            # The label just beyond the tip, so it does not sit on the arrow head.
            length = float(np.hypot(*vector))
            place = vector * (1.0 + 0.12 * extent / length) if length > 0 else vector
            after = name.endswith("′")
            self.tips[name].setText(name if moved[name[0]] else (f"{name[0]} = {name}" if after else ""))
            # The text runs back toward the centre from a tip near the plot's left or right edge.
            self.tips[name].setAnchor((0.5 + 0.5 * float(vector[0]) / length if length > 0 else 0.5,
                                       0.0 if name[0] == "q" else 1.0))
            self.tips[name].setPos(*place)
        span = 1.25 * extent
        self.plane.setRange(xRange=(-span, span), yRange=(-span, span), padding=0)
        # Two short lines: the plane's column is the panel's half, and one line of this ran into
        # the angle table's title at 1280 px.
        self.plane.setTitle(f"dims {pair.a}, {pair.b}<br>dashed before, solid after", size="9pt")
        qt, kt = result.tokens[query], result.key_tokens[key]
        heads = result.Q.shape[0]
        where = f" — head {head}" if heads > 1 else ""
        which = "" if selected is not None else ", weighted most"  # no key selected: as Explain
        self.set_heading(f"RoPE: {qt!r} (position {pair.query_position}) and {kt!r} "
                         f"(position {pair.key_position}{which}){where}")
        # Short lines: a label's minimum width is half its longest line, and a long one would
        # push the angle table out of a narrow dock.
        self.note.setText(
            f"pair {pair.pair}: q turned {fmt(pair.query_angle)} rad, k turned {fmt(pair.key_angle)} rad "
            f"(difference {fmt(pair.key_angle - pair.query_angle)} rad)<br>"
            f"the pair's q·k: {fmt(pair.pair_before)} before, {fmt(pair.pair_after)} after RoPE<br>"
            f"score q·k: <b>{fmt(pair.score_before)}</b> before RoPE, <b>{fmt(pair.score_after)}</b> after "
            f"— the same at any offset", size="9pt")

    # -- user actions ------------------------------------------------------------------------
    def _on_pair_changed(self, index: int) -> None:
        if index >= 0:
            self._pair = index
            self.redraw_selection()

    def _on_angle_clicked(self, row: int, col: int) -> None:
        if col != self._pair:
            with QSignalBlocker(self.pair_combo):
                self.pair_combo.setCurrentIndex(col)
            self._pair = col
        self.document.selection.set(query=row)
        self.redraw_selection()

    def _on_offset_changed(self, value: int) -> None:
        positions = self.document.session.positions
        if positions is None or positions.kind != "rope" or positions.offset == value:
            return
        from ..user_actions import set_positions

        if not set_positions(self.document, dataclasses.replace(positions, offset=int(value))):
            with QSignalBlocker(self.offset_spin):
                self.offset_spin.setValue(positions.offset)
