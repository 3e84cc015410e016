"""Controls: mask, scale (with a temperature slider), device, dtype and the preset's parameters.

``ControlsPanel(document)`` stacks four small groups that fit a narrow dock: the preset's
parameters (``preset_controls.PresetBox``), the mask and the scale (here), and the compute
options (``compute_controls.ComputeBox``). Each control changes the session through
``user_actions`` (one undo step; dragging a slider is one step per drag) or the compute
options through ``user_actions.set_compute_options``; each is synced back from the document
with its signals blocked. While a slider is dragged its values go through
``document.edit_later`` (``value_slider.SliderDrags``): when they come faster than the window
redraws, only the newest is computed and drawn, and the release applies the last one.
"""

from __future__ import annotations

import math

from PySide6.QtCore import QSignalBlocker
from PySide6.QtWidgets import QComboBox, QFormLayout, QGroupBox, QLabel, QSpinBox, QVBoxLayout, QWidget

from ...core.errors import AttnExplorerError
from ...core.inputs.session import MAX_TOKENS, Mask, Scale
from .. import user_actions
from .compute_controls import ComputeBox
from ..document import SessionDocument
from .preset_controls import PresetBox
from .value_slider import SliderDrags, ValueSlider

MASKS = (("none", "None"), ("causal", "Causal"), ("window", "Sliding window"),
         ("padding", "Padding (click tokens)"), ("custom", "Custom (click cells)"))
SCALES = (("inv_sqrt_dk", "1/√d_k"), ("none", "None"), ("temperature", "Temperature τ"), ("factor", "Factor ×"))
TEMPERATURE_RANGE = (1e-4, 1e4)


class ControlsPanel(QWidget):
    """The Controls dock (see the module)."""

    def __init__(self, document: SessionDocument, parent=None):
        super().__init__(parent)
        self.document = document
        self.drags = SliderDrags(document, self)  # one undo step per slider drag

        # Mask
        self.mask_combo = QComboBox()
        for key, label in MASKS:
            self.mask_combo.addItem(label, key)
        self.mask_combo.setToolTip("Which (query, key) cells are blocked before the softmax")
        self.window_spin = QSpinBox()
        self.window_spin.setRange(1, MAX_TOKENS)
        self.window_spin.setKeyboardTracking(False)
        self.window_spin.setToolTip("Sliding window w: a query sees itself and the w − 1 tokens before it")
        self.mask_combo.currentIndexChanged.connect(self._on_mask_kind)
        self.window_spin.valueChanged.connect(self._on_window)
        mask_box = QGroupBox("Mask")
        mask_form = self._form(mask_box)
        mask_form.addRow("kind", self.mask_combo)
        mask_form.addRow("window w", self.window_spin)

        # Scale
        self.scale_combo = QComboBox()
        for key, label in SCALES:
            self.scale_combo.addItem(label, key)
        self.scale_combo.setToolTip("What the raw scores are multiplied by before the softmax")
        self.temperature = ValueSlider(*TEMPERATURE_RANGE, log=True, decimals=5)
        self.temperature.setToolTip("softmax(scores / τ): small τ sharpens, large τ flattens")
        self.scale_combo.currentIndexChanged.connect(self._on_scale_kind)
        self.temperature.drag_started.connect(self.drags.started)
        self.temperature.drag_finished.connect(document.flush)
        self.temperature.value_edited.connect(self._on_temperature)
        from ..inputs.widgets import NumberEdit

        self.factor_edit = NumberEdit("The number the raw scores are multiplied by (Gemma: query_pre_attn_scalar^−½, "
                                      "e.g. 256**-0.5)")
        self.factor_edit.committed.connect(self._on_factor)
        self.factor_edit.invalid.connect(lambda why: document.refuse(f"Scale not changed: {why}"))
        scale_box = QGroupBox("Scale")
        scale_form = self._form(scale_box)
        scale_form.addRow("scale", self.scale_combo)
        scale_form.addRow("τ", self.temperature)
        self.factor_label = QLabel("factor")
        scale_form.addRow(self.factor_label, self.factor_edit)

        self.compute_box = ComputeBox(document, self._form)
        self.device_combo, self.dtype_combo = self.compute_box.device_combo, self.compute_box.dtype_combo
        self.preset_box = PresetBox(document, self._form, self.drags)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        # The preset's own sliders first: they are what a walkthrough invites you to play with.
        for box in (self.preset_box, mask_box, scale_box, self.compute_box):
            layout.addWidget(box)
        layout.addStretch(1)
        self.setMinimumWidth(260)  # labels and spin boxes clip below this in a narrow dock

        document.session_changed.connect(self._on_session_changed)
        self._on_session_changed(document.session)

    @property
    def param_widgets(self) -> dict[str, ValueSlider]:
        """The preset's parameters' sliders, by name."""
        return self.preset_box.param_widgets

    @staticmethod
    def _form(box: QGroupBox) -> QFormLayout:
        form = QFormLayout(box)
        form.setRowWrapPolicy(QFormLayout.RowWrapPolicy.WrapLongRows)
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        form.setContentsMargins(6, 6, 6, 6)
        return form

    # -- mask -----------------------------------------------------------------------------
    def _on_mask_kind(self, _index: int) -> None:
        kind = self.mask_combo.currentData()
        s = self.document.session
        if kind == s.mask.kind:
            return
        if kind == "window":
            mask = Mask("window", window=self.window_spin.value())
        elif kind == "padding":
            mask = Mask("padding")
        elif kind == "custom":
            # Start from what is blocked now, so switching to custom changes nothing yet.
            mask = Mask("custom", blocked=s.mask.matrix(s.n))
        else:
            mask = Mask(kind)
        if not user_actions.set_mask(self.document, mask, f"Mask: {self.mask_combo.currentText()}"):
            self._sync_mask(s)

    def _on_window(self, w: int) -> None:
        if self.document.session.mask.kind != "window":
            return
        user_actions.set_mask(self.document, Mask("window", window=int(w)), f"Window w = {w}",
                              merge_key=("mask", "window"))

    def _sync_mask(self, session) -> None:
        with QSignalBlocker(self.mask_combo), QSignalBlocker(self.window_spin):
            self.mask_combo.setCurrentIndex(self.mask_combo.findData(session.mask.kind))
            if session.mask.kind == "window":
                self.window_spin.setValue(session.mask.window)
            self.window_spin.setEnabled(session.mask.kind == "window")

    # -- scale ----------------------------------------------------------------------------
    def _on_scale_kind(self, _index: int) -> None:
        kind = self.scale_combo.currentData()
        s = self.document.session
        if kind == s.scale.kind:
            return
        if kind == "temperature":
            # Start where the weights stay as they are: τ = √d_k after 1/√d_k, τ = 1 after none.
            tau = math.sqrt(s.d_k) if s.scale.kind == "inv_sqrt_dk" else 1.0
            scale = Scale(kind, min(max(tau, TEMPERATURE_RANGE[0]), TEMPERATURE_RANGE[1]))
        elif kind == "factor":
            scale = Scale(kind, multiplier=s.scale.factor(s.d_k))   # the weights stay as they are
        else:
            scale = Scale(kind)
        if not user_actions.set_scale(self.document, scale, f"Scale: {self.scale_combo.currentText()}"):
            self._sync_scale(s)

    def _on_temperature(self, tau: float, dragging: bool) -> None:
        if dragging:
            key = self.drags.key("scale", "temperature")
            self.drags.post(lambda: self._apply_temperature(tau, key))
        else:
            self._apply_temperature(tau, None)

    def _apply_temperature(self, tau: float, key) -> None:
        if self.document.session.scale.kind != "temperature":
            return
        user_actions.set_scale(self.document, Scale("temperature", tau), f"Temperature τ = {tau:g}", merge_key=key)

    def _on_factor(self, factor: float) -> None:
        s = self.document.session
        if s.scale.kind != "factor" or factor == s.scale.multiplier:
            return
        try:
            scale = Scale("factor", multiplier=factor)
        except AttnExplorerError as err:
            self.document.refuse(f"Scale not changed: {err}")
            self._sync_scale(s)
            return
        if not user_actions.set_scale(self.document, scale, f"Scale factor = {factor:g}", merge_key=("scale", "factor")):
            self._sync_scale(s)

    def _sync_scale(self, session) -> None:
        with QSignalBlocker(self.scale_combo):
            self.scale_combo.setCurrentIndex(self.scale_combo.findData(session.scale.kind))
        is_temperature = session.scale.kind == "temperature"
        if is_temperature:
            self.temperature.set_value(session.scale.temperature)
        self.temperature.setEnabled(is_temperature)
        is_factor = session.scale.kind == "factor"
        self.factor_label.setVisible(is_factor)
        self.factor_edit.setVisible(is_factor)
        if is_factor:
            self.factor_edit.set_value(session.scale.multiplier)

    # -- following the document --------------------------------------------------------------------
    def _on_session_changed(self, session) -> None:
        self._sync_mask(session)
        self._sync_scale(session)
        self.preset_box.follow(session)
