"""The stages of a real head in the Inputs: biases under their matrices, and the Stages page.

- ``BiasRow``: a bias as a one-row table right under its matrix (b_q under W_q, …, b_o under
  W_o). x·W + b adds b to every row of x·W, so b's columns are W's columns: the row shares the
  matrix's column widths and horizontal scrolling. Its tick box, in the matrix's header, adds
  the bias (at zeros, which changes nothing) and shows the row, or removes it (absent = zero).
- ``StagesPage``: positions (none, sinusoidal with its base, learned with its table, RoPE
  with θ, dims, layout and offset, its angles and scaling, ALiBi with its per-head slopes),
  the norm before the projections (LayerNorm or RMSNorm, eps, weight and bias rows), QK-norm,
  grouped-query K/V heads (which query heads share each), soft-capping and attention sinks,
  and the output projection W_o with b_o (the version-3 stages' inputs: ``score_stages``).

Every change is one undo step through ``user_actions``; a refused one (RoPE with a source,
K/V heads that do not divide the heads, an odd RoPE dims…) says why through
``document.refuse`` and the control snaps back. Controls are synced from
``document.session_changed`` with their signals blocked.
"""

from __future__ import annotations

from PySide6.QtCore import QSignalBlocker, Qt
from PySide6.QtWidgets import QAbstractItemView, QCheckBox, QComboBox, QFormLayout, QGroupBox, QLabel, QVBoxLayout, QWidget

from ...core.editing import stage_edits, stage_tables
from ...core.inputs.session import MAX_DIM, MAX_TOKENS
from ...core.inputs.stages import MAX_OFFSET
from .. import user_actions
from ..document import SessionDocument
from .widgets import NumberEdit, StageTable, combo_box, form_layout, select_data, set_spin, spin_box, tool_button
from .table_models import MatrixModel
from .table_view import MatrixTableView

POSITIONS = (("none", "None"), ("sinusoidal", "Sinusoidal"), ("learned", "Learned table"), ("rope", "RoPE (rotary)"),
             ("alibi", "ALiBi (distance bias)"))
NORMS = (("none", "None (X = E + P)"), ("layer", "LayerNorm"), ("rms", "RMSNorm"))
LAYOUTS = (("half", "half: pairs (i, i + r/2), Llama, NeoX"), ("interleaved", "interleaved: pairs (2i, 2i+1), GPT-J"))
BIAS_TIPS = {
    "b_q": "b_q: added to every query, Q = X·W_q + b_q. Unticked: absent (zero).",
    "b_k": "b_k: added to every key, K = X·W_k + b_k. Unticked: absent (zero).",
    "b_v": "b_v: added to every value, V = X·W_v + b_v. Unticked: absent (zero).",
    "b_o": "b_o: added to the output, output = concat·W_o + b_o. Unticked: absent (zero).",
}


class BiasRow(QWidget):
    """A bias as a one-row table under ``matrix_view`` (its columns), with ``check`` — a tick
    box the owner places in its header — that adds or removes it; the row shows while the
    bias is present."""

    def __init__(self, document: SessionDocument, table: str, matrix_view: MatrixTableView,
                 follow_selection: bool = True, parent=None):
        super().__init__(parent)
        self.document, self.table = document, table
        self.check = QCheckBox(table)
        self.check.setToolTip(BIAS_TIPS[table])
        self.check.toggled.connect(self._on_toggled)
        self.model = MatrixModel(document, table, follow_selection=follow_selection, parent=self)
        self.view = MatrixTableView(self.model)
        self.view.setToolTip(BIAS_TIPS[table])
        self.view.horizontalHeader().hide()  # the matrix above numbers the columns
        self.view.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.view.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.view.setVerticalScrollMode(QAbstractItemView.ScrollMode.ScrollPerItem)
        self.view.setFixedHeight(self.view.verticalHeader().defaultSectionSize() + 2 * self.view.frameWidth())
        # Line the row's columns up with the matrix's: the same row-header width (the
        # matrix's own, so that its columns keep their room; the row's header says just "b"),
        # column widths and horizontal scroll.
        matrix_view.verticalHeader().geometriesChanged.connect(self._match_header)
        bar, own = matrix_view.horizontalScrollBar(), self.view.horizontalScrollBar()
        bar.valueChanged.connect(own.setValue)
        own.valueChanged.connect(bar.setValue)
        self._matrix_view = matrix_view
        matrix_view.horizontalHeader().sectionResized.connect(lambda i, _old, new: self.view.setColumnWidth(i, new))
        self.model.modelReset.connect(self._match_columns)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.view)
        document.session_changed.connect(self._on_session_changed)
        self._on_session_changed(document.session)

    def _match_header(self) -> None:
        width = self._matrix_view.verticalHeader().width()
        if width > 0 and self.view.verticalHeader().width() != width:
            self.view.verticalHeader().setFixedWidth(width)

    def showEvent(self, event) -> None:
        super().showEvent(event)
        self._match_header()
        self._match_columns()

    def _match_columns(self) -> None:
        header = self._matrix_view.horizontalHeader()
        for i in range(min(header.count(), self.model.columnCount())):
            self.view.setColumnWidth(i, header.sectionSize(i))

    def _on_toggled(self, on: bool) -> None:
        done = user_actions.add_bias(self.document, self.table) if on else user_actions.remove_bias(self.document, self.table)
        if not done:
            self._on_session_changed(self.document.session)

    def _on_session_changed(self, session) -> None:
        available = stage_tables.has_table(session, self.table)
        stored = available and stage_tables.is_stored(session, self.table)
        if self.check.isChecked() != stored:
            with QSignalBlocker(self.check):
                self.check.setChecked(stored)
        self.check.setEnabled(available)
        # Shown only when present: a head without biases keeps its matrices' room (at
        # 1280×800 the three weight tables show every row), and ticking the box shows it.
        self.setVisible(stored)


def kv_note(session, table: str, head: int) -> str:
    """What a W_k/W_v title adds with grouped-query attention: ``K/V head 1, shared by query
    heads 2, 3``; empty otherwise."""
    if table not in ("W_k", "W_v") or session.kv_heads == session.heads:
        return ""
    heads = ", ".join(str(h) for h in stage_edits.sharing_heads(session, head))
    return f"K/V head {int(session.kv_head_of[head])}, shared by query heads {heads}"


def sharing_text(session) -> str:
    """``K/V head 0: query heads 0, 1 · K/V head 1: 2, 3``, or the one-per-head sentence."""
    if session.kv_heads == session.heads:
        return "Every query head has its own K and V."
    groups = []
    for g in range(session.kv_heads):
        heads = [str(h) for h in range(session.heads) if session.kv_head_of[h] == g]
        groups.append(f"K/V head {g}: query heads {', '.join(heads)}")
    return " · ".join(groups)


class StagesPage(QWidget):
    """Positions, norm, grouped-query K/V heads and the output projection."""

    def __init__(self, document: SessionDocument, parent=None):
        super().__init__(parent)
        self.document = document
        refuse = document.refuse

        # -- positions ---------------------------------------------------------------------
        self.positions_combo = combo_box(POSITIONS, "Where position enters: added to E (sinusoidal, learned), "
                                                 "rotating Q and K (RoPE) or a bias on the scores (ALiBi)")
        self.positions_combo.currentIndexChanged.connect(
            lambda _i: self._kind_changed(self.positions_combo, self.document.session.positions,
                                          user_actions.set_positions_kind))
        self.base_edit = NumberEdit("Sinusoidal base: PE[pos, 2i] = sin(pos / base^(2i/d)), 10000 in the paper")
        self.base_edit.committed.connect(lambda v: self._change_positions(base=v))
        self.theta_edit = NumberEdit("RoPE θ: pair i turns by position · θ^(−2i/dims); 10000 in Llama 2, 500000 in Llama 3")
        self.theta_edit.committed.connect(lambda v: self._change_positions(theta=v))
        self.dims_spin = spin_box(0, MAX_DIM, "How many of d_k's dimensions RoPE rotates (even); the rest pass unchanged")
        self.dims_spin.setSpecialValueText("all of d_k")
        self.dims_spin.setSingleStep(2)
        self.dims_spin.valueChanged.connect(lambda v: self._change_positions(dims=None if v == 0 else v))
        self.layout_combo = combo_box(LAYOUTS, "Which dimensions RoPE pairs up and rotates together")
        self.layout_combo.currentIndexChanged.connect(lambda _i: self._change_positions(layout=self.layout_combo.currentData()))
        self.offset_spin = spin_box(0, MAX_OFFSET, "RoPE position offset: every position shifted by this much; the "
                                                "scores stay the same (they depend only on i − j)")
        self.offset_spin.valueChanged.connect(lambda v: self._change_positions(offset=v, merge_key=("rope offset",)))
        for edit in (self.base_edit, self.theta_edit):
            edit.invalid.connect(lambda why: refuse(f"Positions not changed: {why}"))
        self.rows_spin = spin_box(1, MAX_TOKENS, "Rows of the learned table: at least one per token")
        self.rows_spin.valueChanged.connect(self._on_rows)
        self.positions_table = StageTable(document, "positions.table", "learned positions P (positions × d)",
                                          "P: row p is added to the embedding of the token at position p")
        self.positions_table.header.insertWidget(1, QLabel("rows"))
        self.positions_table.header.insertWidget(2, self.rows_spin)
        self.slopes_table = StageTable(document, "positions.slopes", "ALiBi slopes (one per head)",
                                       "position_bias[h, i, j] = −slope_h · |i − j|; grey: the paper's geometric "
                                       "slopes (type to set your own)", one_row=True)
        self.geometric_button = tool_button("Geometric", "Back to the paper's geometric slopes 2^(−8h/H)",
                                             slot=lambda: user_actions.change_positions(document, slopes=None))
        self.slopes_table.header.insertWidget(1, self.geometric_button)

        positions_box = QGroupBox("Positions")
        positions_layout = QVBoxLayout(positions_box)
        positions_layout.setContentsMargins(6, 6, 6, 6)
        form = form_layout()
        form.addRow("kind", self.positions_combo)
        self.sinusoidal_row = self._row(form, "base", self.base_edit)
        rope = QWidget()
        rope_form = form_layout()
        rope.setLayout(rope_form)
        rope_form.addRow("θ", self.theta_edit)
        rope_form.addRow("dims", self.dims_spin)
        rope_form.addRow("layout", self.layout_combo)
        rope_form.addRow("offset", self.offset_spin)
        # The later stages' inputs live in their own module, which builds on this one's pieces.
        from .score_stages import QKNormBox, RopeScalingInputs, ScoresBox

        self.rope_scaling = RopeScalingInputs(document, rope_form, self)
        self.rope_row = rope
        positions_layout.addLayout(form)
        positions_layout.addWidget(rope)
        positions_layout.addWidget(self.positions_table)
        positions_layout.addWidget(self.slopes_table)

        # -- norm ------------------------------------------------------------------------------
        self.norm_combo = combo_box(NORMS, "Normalise each row of E + P before the projections (pre-norm)")
        self.norm_combo.currentIndexChanged.connect(
            lambda _i: self._kind_changed(self.norm_combo, self.document.session.norm, user_actions.set_norm_kind))
        self.eps_edit = NumberEdit("eps: added to the variance (LayerNorm) or the mean square (RMSNorm) "
                                   "before the square root")
        self.eps_edit.committed.connect(lambda v: user_actions.set_norm_eps(document, v) or self._sync(document.session))
        self.eps_edit.invalid.connect(lambda why: refuse(f"eps not changed: {why}"))
        self.norm_weight = StageTable(document, "norm.weight", "weight (scale, 1 × d)",
                                      "Multiplies each normalised dimension; grey: absent, so ones", one_row=True)
        self.norm_bias = StageTable(document, "norm.bias", "bias (shift, 1 × d)",
                                    "Added after scaling (LayerNorm only); grey: absent, so zeros", one_row=True)
        norm_box = QGroupBox("Norm (before the projections)")
        norm_layout = QVBoxLayout(norm_box)
        norm_layout.setContentsMargins(6, 6, 6, 6)
        norm_form = form_layout()
        norm_form.addRow("kind", self.norm_combo)
        self.eps_row = self._row(norm_form, "eps", self.eps_edit)
        norm_layout.addLayout(norm_form)
        norm_layout.addWidget(self.norm_weight)
        norm_layout.addWidget(self.norm_bias)

        # -- grouped-query attention -------------------------------------------------------------
        self.kv_spin = spin_box(1, 64, "K/V heads shared by the query heads (must divide the heads): query head h "
                                    "uses K/V head h // (heads / K/V heads). As many as the heads: no sharing")
        self.kv_spin.valueChanged.connect(self._on_kv)
        self.sharing = QLabel()
        self.sharing.setWordWrap(True)
        kv_box = QGroupBox("Grouped-query attention")
        kv_form = form_layout()
        kv_box.setLayout(kv_form)
        kv_form.setContentsMargins(6, 6, 6, 6)
        kv_form.addRow("K/V heads", self.kv_spin)
        kv_form.addRow(self.sharing)

        # -- output projection ---------------------------------------------------------------------
        self.output_check = QCheckBox("W_o: output = concat · W_o + b_o")
        self.output_check.setToolTip("The output projection. Unticked: the output is the heads' outputs side by side")
        self.output_check.toggled.connect(self._on_output)
        self.d_out_spin = spin_box(1, MAX_DIM, "Output width d_out (W_o's columns)")
        self.d_out_spin.valueChanged.connect(self._on_d_out)
        self.w_out = StageTable(document, "W_o", "W_o (heads·d_v × d_out)",
                                "Rows: the heads' value dimensions side by side; columns: the output dimensions")
        self.b_out = BiasRow(document, "b_o", self.w_out.view, follow_selection=False)
        self.w_out.header.insertWidget(1, self.b_out.check)
        output_box = QGroupBox("Output projection")
        output_layout = QVBoxLayout(output_box)
        output_layout.setContentsMargins(6, 6, 6, 6)
        out_form = form_layout()
        out_form.addRow(self.output_check)
        self.d_out_row = self._row(out_form, "d_out", self.d_out_spin)
        output_layout.addLayout(out_form)
        output_layout.addWidget(self.w_out)
        output_layout.addWidget(self.b_out)

        self.qk_norm = QKNormBox(document)
        self.scores = ScoresBox(document)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        for box in (positions_box, norm_box, self.qk_norm, kv_box, self.scores, output_box):
            layout.addWidget(box)
        layout.addStretch(1)
        document.session_changed.connect(self._sync)
        self._sync(document.session)

    @staticmethod
    def _row(form: QFormLayout, label: str, field: QWidget) -> tuple[QLabel, QWidget]:
        text = QLabel(label)
        form.addRow(text, field)
        return text, field

    # -- changes --------------------------------------------------------------------------------
    def _kind_changed(self, combo: QComboBox, current, action) -> None:
        kind = combo.currentData()
        if kind == (current.kind if current is not None else "none"):
            return
        if not action(self.document, kind):
            self._sync(self.document.session)

    def _change_positions(self, merge_key=None, **fields) -> None:
        p = self.document.session.positions
        if p is None or all(getattr(p, k) == v for k, v in fields.items()):
            return
        if not user_actions.change_positions(self.document, merge_key=merge_key, **fields):
            self._sync(self.document.session)

    def _on_rows(self, rows: int) -> None:
        p = self.document.session.positions
        if p is not None and p.kind == "learned" and rows != p.table.shape[0]:
            if not user_actions.resize_positions_table(self.document, rows):
                self._sync(self.document.session)

    def _on_kv(self, kv: int) -> None:
        if kv != self.document.session.kv_heads:
            if not user_actions.set_kv_heads(self.document, kv):
                self._sync(self.document.session)

    def _on_output(self, on: bool) -> None:
        if on != (self.document.session.w_out is not None):
            if not (user_actions.add_output(self.document) if on else user_actions.remove_output(self.document)):
                self._sync(self.document.session)

    def _on_d_out(self, d_out: int) -> None:
        s = self.document.session
        if s.w_out is not None and d_out != s.d_out:
            if not user_actions.resize_d_out(self.document, d_out):
                self._sync(self.document.session)

    # -- following the document -----------------------------------------------------------------
    def _sync(self, session) -> None:
        p = session.positions
        kind = "none" if p is None else p.kind
        select_data(self.positions_combo, kind)
        for widget, on in ((self.sinusoidal_row, kind == "sinusoidal"), ((self.rope_row,), kind == "rope"),
                           ((self.positions_table,), kind == "learned"), ((self.slopes_table,), kind == "alibi")):
            for w in widget:
                w.setVisible(on)
        if p is not None:
            self.base_edit.set_value(p.base)
            self.theta_edit.set_value(p.theta)
            with QSignalBlocker(self.dims_spin):
                self.dims_spin.setMaximum(max(session.d_k, 2))
            set_spin(self.dims_spin, p.dims or 0)
            select_data(self.layout_combo, p.layout)
            set_spin(self.offset_spin, p.offset)
            if kind == "learned":
                with QSignalBlocker(self.rows_spin):
                    self.rows_spin.setMinimum(session.n)
                set_spin(self.rows_spin, p.table.shape[0])
            if kind == "alibi":
                self.geometric_button.setEnabled(p.slopes is not None)
        norm = session.norm
        select_data(self.norm_combo, "none" if norm is None else norm.kind)
        for w in self.eps_row:
            w.setVisible(norm is not None)
        self.norm_weight.setVisible(norm is not None)
        self.norm_bias.setVisible(norm is not None and norm.kind == "layer")
        if norm is not None:
            self.eps_edit.set_value(norm.eps)
        with QSignalBlocker(self.kv_spin):
            self.kv_spin.setMaximum(session.heads)
        set_spin(self.kv_spin, session.kv_heads)
        self.kv_spin.setEnabled(session.heads > 1)
        self.sharing.setText(sharing_text(session))
        has_out = session.w_out is not None
        if self.output_check.isChecked() != has_out:
            with QSignalBlocker(self.output_check):
                self.output_check.setChecked(has_out)
        for w in (*self.d_out_row, self.w_out):  # b_o's row shows itself while b_o is present
            w.setVisible(has_out)
        if has_out:
            set_spin(self.d_out_spin, session.d_out)
