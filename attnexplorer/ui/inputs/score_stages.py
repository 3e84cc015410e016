"""The Stages page's inputs for the stages of newer models (session format version 3).

- ``RopeScalingInputs``: under RoPE, how its angles are made (float64, or float32 as a model
  makes them) and how long-context models stretch its frequencies (none, linear, llama3,
  yarn, with each kind's fields).
- ``QKNormBox``: QK-norm (Qwen3, Gemma 3, OLMo 2): RMSNorm or LayerNorm of each query and key,
  over each head or the whole projection, eps, a weight shared by the heads or one per head,
  and the query and key weight (and bias) rows.
- ``ScoresBox``: soft-capping of the scaled scores (Gemma 2) and attention sinks (GPT-OSS),
  with the sinks' row (one logit per head).

Built as ``stages_page`` builds its own inputs: every change is one undo step through
``user_actions``, a refused one says why through ``document.refuse`` and the control snaps
back, and the controls are synced from ``document.session_changed`` with signals blocked.
"""

from __future__ import annotations

from PySide6.QtCore import QObject, QSignalBlocker
from PySide6.QtWidgets import QCheckBox, QGroupBox, QLabel, QVBoxLayout

from ...core.inputs.stages import SCALING_FIELDS
from .. import user_actions
from ..document import SessionDocument
from .widgets import NumberEdit, StageTable, combo_box, form_layout, select_data

ANGLES = (("float64", "float64 (exact)"), ("float32", "float32, as the model makes them"))
SCALINGS = (("none", "None"), ("linear", "linear (÷ factor)"), ("llama3", "llama3 (Llama 3.1)"), ("yarn", "YaRN"))
QK_NORMS = (("none", "None"), ("rms", "RMSNorm"), ("layer", "LayerNorm"))
QK_OVER = (("head", "each head (Qwen3, Gemma 3)"), ("all", "the whole projection (OLMo 2)"))
SCALING_TIPS = {
    "factor": "How much longer the context is than the original: frequencies are divided by it (linear: all; "
              "llama3: the low ones; YaRN: blended)",
    "low_freq_factor": "llama3: wavelengths longer than original / low_freq_factor are divided by the factor",
    "high_freq_factor": "llama3: wavelengths shorter than original / high_freq_factor are kept",
    "original_max_position_embeddings": "The context length the model was trained with",
    "beta_fast": "YaRN: pairs turning more than β_fast times over the original length are kept",
    "beta_slow": "YaRN: pairs turning fewer than β_slow times are divided by the factor",
    "attention_factor": "YaRN: cos and sin are multiplied by this (empty: 0.1·ln(factor) + 1)",
}
SCALING_LABELS = {"factor": "factor", "low_freq_factor": "low freq factor", "high_freq_factor": "high freq factor",
                  "original_max_position_embeddings": "original length", "beta_fast": "β fast",
                  "beta_slow": "β slow", "attention_factor": "attention factor"}


class RopeScalingInputs(QObject):
    """RoPE's angle convention and frequency scaling: rows added to the RoPE ``form`` (so their
    labels line up with θ's and dims')."""

    def __init__(self, document: SessionDocument, form, parent=None):
        super().__init__(parent)
        self.document = document
        self.angles_combo = combo_box(ANGLES, "How RoPE's angles are computed: in float64, or in float32 as transformers "
                                           "makes them (an imported layer then matches its model at every length)")
        self.angles_combo.currentIndexChanged.connect(self._on_angles)
        self.scaling_combo = combo_box(SCALINGS, "How a long-context model stretches RoPE's frequencies")
        self.scaling_combo.currentIndexChanged.connect(self._on_kind)
        form.addRow("angles", self.angles_combo)
        form.addRow("scaling", self.scaling_combo)
        self.edits: dict[str, tuple[QLabel, NumberEdit]] = {}
        for name, tip in SCALING_TIPS.items():
            edit = NumberEdit(tip)
            edit.committed.connect(lambda v, name=name: self._change(name, v))
            edit.invalid.connect(lambda why: document.refuse(f"RoPE scaling not changed: {why}"))
            if name == "attention_factor":
                edit.setPlaceholderText("0.1·ln(factor) + 1")
            label = QLabel(SCALING_LABELS[name])
            label.setToolTip(tip)
            form.addRow(label, edit)
            self.edits[name] = (label, edit)
        self.truncate = QCheckBox("truncate the blend's ends to whole pairs")
        self.truncate.setToolTip("YaRN: round the blended range outwards to whole pairs (transformers' default; "
                                 "GPT-OSS does not)")
        self.truncate.toggled.connect(lambda on: self._change("truncate", on))
        form.addRow(self.truncate)
        document.session_changed.connect(self._sync)
        self._sync(document.session)

    def _on_angles(self, _i: int) -> None:
        p = self.document.session.positions
        angles = self.angles_combo.currentData()
        if p is not None and p.angles != angles and not user_actions.change_positions(self.document, angles=angles):
            self._sync(self.document.session)

    def _on_kind(self, _i: int) -> None:
        p = self.document.session.positions
        kind = self.scaling_combo.currentData()
        if p is None or kind == ("none" if p.scaling is None else p.scaling.kind):
            return
        if not user_actions.set_scaling_kind(self.document, kind):
            self._sync(self.document.session)

    def _change(self, name: str, value) -> None:
        p = self.document.session.positions
        if p is None or p.scaling is None or getattr(p.scaling, name) == value:
            return
        if name == "original_max_position_embeddings":
            if value != int(value):
                self.document.refuse(f"RoPE scaling not changed: the original length must be a whole number, got {value:g}")
                self._sync(self.document.session)
                return
            value = int(value)
        if not user_actions.change_scaling(self.document, merge_key=("rope scaling", name), **{name: value}):
            self._sync(self.document.session)

    def _sync(self, session) -> None:
        p = session.positions
        if p is None or p.kind != "rope":
            return
        select_data(self.angles_combo, p.angles)
        scaling = p.scaling
        select_data(self.scaling_combo, "none" if scaling is None else scaling.kind)
        fields = () if scaling is None else SCALING_FIELDS[scaling.kind]
        for name, (label, edit) in self.edits.items():
            on = name in fields
            label.setVisible(on)
            edit.setVisible(on)
            if on:
                value = getattr(scaling, name)
                if value is None:
                    with QSignalBlocker(edit):
                        edit.clear()
                else:
                    edit.set_value(value)
        self.truncate.setVisible("truncate" in fields)
        if scaling is not None and self.truncate.isChecked() != scaling.truncate:
            with QSignalBlocker(self.truncate):
                self.truncate.setChecked(scaling.truncate)


class QKNormBox(QGroupBox):
    """QK-norm: kind, reach, eps, shared or per-head weight, the weight and bias rows."""

    def __init__(self, document: SessionDocument, parent=None):
        super().__init__("QK-norm (each query and key, before RoPE)", parent)
        self.document = document
        self.kind_combo = combo_box(QK_NORMS, "Normalise every query and key after its projection and before RoPE")
        self.kind_combo.currentIndexChanged.connect(self._on_kind)
        self.over_combo = combo_box(QK_OVER, "Which numbers form one norm's row: each head's d_k, or a token's whole "
                                          "projection across every head")
        self.over_combo.currentIndexChanged.connect(self._on_over)
        self.eps_edit = NumberEdit("eps: added to the mean square (RMSNorm) or the variance (LayerNorm)")
        self.eps_edit.committed.connect(lambda v: user_actions.set_qk_norm_eps(document, v) or self._sync(document.session))
        self.eps_edit.invalid.connect(lambda why: document.refuse(f"QK-norm not changed: {why}"))
        self.per_head = QCheckBox("a weight per head")
        self.per_head.setToolTip("Each head its own weight (heads·d_k numbers) rather than one d_k weight shared "
                                 "by every head")
        self.per_head.toggled.connect(self._on_per_head)
        tables = (("qk_norm.query_weight", "query weight", "Multiplies each normalised query dimension; grey: ones"),
                  ("qk_norm.key_weight", "key weight", "Multiplies each normalised key dimension; grey: ones"),
                  ("qk_norm.query_bias", "query bias (LayerNorm)", "Added to each normalised query; grey: zeros"),
                  ("qk_norm.key_bias", "key bias (LayerNorm)", "Added to each normalised key; grey: zeros"))
        self.tables = {table: StageTable(document, table, title, tip, one_row=True) for table, title, tip in tables}
        self.note = QLabel("A model whose RMSNorm multiplies by 1 + w (Gemma) is held with its weight 1 + w.")
        self.note.setWordWrap(True)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        form = form_layout()
        form.addRow("kind", self.kind_combo)
        self.over_label = QLabel("over")
        form.addRow(self.over_label, self.over_combo)
        self.eps_label = QLabel("eps")
        form.addRow(self.eps_label, self.eps_edit)
        form.addRow(self.per_head)
        layout.addLayout(form)
        for table in self.tables.values():
            layout.addWidget(table)
        layout.addWidget(self.note)
        document.session_changed.connect(self._sync)
        self._sync(document.session)

    def _on_kind(self, _i: int) -> None:
        qk = self.document.session.qk_norm
        kind = self.kind_combo.currentData()
        if kind != ("none" if qk is None else qk.kind) and not user_actions.set_qk_norm_kind(self.document, kind):
            self._sync(self.document.session)

    def _on_over(self, _i: int) -> None:
        qk = self.document.session.qk_norm
        over = self.over_combo.currentData()
        if qk is not None and qk.over != over and not user_actions.set_qk_norm_over(self.document, over):
            self._sync(self.document.session)

    def _on_per_head(self, on: bool) -> None:
        if on != self._per_head(self.document.session) and not user_actions.set_qk_norm_per_head(self.document, on):
            self._sync(self.document.session)

    @staticmethod
    def _per_head(session) -> bool:
        qk = session.qk_norm
        return qk is not None and qk.over == "head" and qk.query_weight is not None and \
            qk.query_weight.shape[0] != session.d_k

    def _sync(self, session) -> None:
        qk = session.qk_norm
        select_data(self.kind_combo, "none" if qk is None else qk.kind)
        on = qk is not None
        for w in (self.over_label, self.over_combo, self.eps_label, self.eps_edit, self.note):
            w.setVisible(on)
        self.per_head.setVisible(on and qk.over == "head")
        for table, widget in self.tables.items():
            widget.setVisible(on and (table.endswith("weight") or qk.kind == "layer"))
        if not on:
            return
        select_data(self.over_combo, qk.over)
        self.eps_edit.set_value(qk.eps)
        per_head = self._per_head(session)
        if self.per_head.isChecked() != per_head:
            with QSignalBlocker(self.per_head):
                self.per_head.setChecked(per_head)


class ScoresBox(QGroupBox):
    """Soft-capping of the scaled scores and the attention sinks."""

    def __init__(self, document: SessionDocument, parent=None):
        super().__init__("Scores and softmax", parent)
        self.document = document
        self.cap_check = QCheckBox("soft-cap: scaled score s → c·tanh(s / c)")
        self.cap_check.setToolTip("Gemma 2: every scaled score is squashed into (−c, c) before the mask and softmax")
        self.cap_check.toggled.connect(self._on_cap_toggled)
        self.cap_edit = NumberEdit("The cap c > 0 (Gemma 2: 50)")
        self.cap_edit.committed.connect(self._on_cap)
        self.cap_edit.invalid.connect(lambda why: document.refuse(f"Soft-capping not changed: {why}"))
        self.sinks_check = QCheckBox("attention sinks (one logit per head)")
        self.sinks_check.setToolTip("GPT-OSS: each head's sink joins every row's softmax as a key with no value, so the "
                                    "weights shown over the real keys sum to less than 1; the rest is the sink's share")
        self.sinks_check.toggled.connect(self._on_sinks)
        self.sinks = StageTable(document, "sinks", "sink logits (1 × heads)",
                                "Head h's sink logit: the larger, the more of each row the sink takes", one_row=True)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        form = form_layout()
        form.addRow(self.cap_check)
        self.cap_label = QLabel("cap c")
        form.addRow(self.cap_label, self.cap_edit)
        form.addRow(self.sinks_check)
        layout.addLayout(form)
        layout.addWidget(self.sinks)
        document.session_changed.connect(self._sync)
        self._sync(document.session)

    def _on_cap_toggled(self, on: bool) -> None:
        s = self.document.session
        if on == (s.softcap is not None):
            return
        # A new cap starts at Gemma 2's 50; the box shows it for editing.
        cap = (self.cap_edit.value() or 50.0) if on else None
        if not user_actions.set_softcap(self.document, cap):
            self._sync(self.document.session)

    def _on_cap(self, value: float) -> None:
        if self.document.session.softcap is None:
            self.cap_edit.set_value(value)
            return
        if not user_actions.set_softcap(self.document, value):
            self._sync(self.document.session)

    def _on_sinks(self, on: bool) -> None:
        if on != (self.document.session.sinks is not None) and not user_actions.set_sinks(self.document, on):
            self._sync(self.document.session)

    def _sync(self, session) -> None:
        capped = session.softcap is not None
        if self.cap_check.isChecked() != capped:
            with QSignalBlocker(self.cap_check):
                self.cap_check.setChecked(capped)
        self.cap_label.setVisible(capped)
        self.cap_edit.setVisible(capped)
        if capped:
            self.cap_edit.set_value(session.softcap)
        sinks = session.sinks is not None
        if self.sinks_check.isChecked() != sinks:
            with QSignalBlocker(self.sinks_check):
                self.sinks_check.setChecked(sinks)
        self.sinks.setVisible(sinks)
