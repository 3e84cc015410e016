"""Controls: mask, scale (with a temperature slider), device, dtype and the preset's parameters.

``ControlsPanel(document)`` stacks four small groups that fit a narrow dock. Each control
changes the session through ``user_actions`` (one undo step; dragging a slider is one step
per drag) or the compute options through ``user_actions.set_compute_options``; each is synced
back from the document with its signals blocked. While a slider is dragged its values go
through ``document.edit_later``: when they come faster than the window redraws, only the
newest is computed and drawn, and the release applies the last one.
"""

from __future__ import annotations

import math

from PySide6.QtCore import QSignalBlocker, Qt, Signal
from PySide6.QtWidgets import (
    QComboBox, QDoubleSpinBox, QFormLayout, QGroupBox, QHBoxLayout, QLabel, QSlider, QSpinBox,
    QVBoxLayout, QWidget,
)

from ..core.errors import AttnExplorerError
from ..core.session import MAX_TOKENS, Mask, Scale
from . import user_actions
from .document import SessionDocument

MASKS = (("none", "None"), ("causal", "Causal"), ("window", "Sliding window"),
         ("padding", "Padding (click tokens)"), ("custom", "Custom (click cells)"))
SCALES = (("inv_sqrt_dk", "1/√d_k"), ("none", "None"), ("temperature", "Temperature τ"), ("factor", "Factor ×"))
TEMPERATURE_RANGE = (1e-4, 1e4)
_STEPS = 1000  # slider resolution for float values


class ValueSlider(QWidget):
    """A slider and a spin box showing one number, linear or logarithmic, int or float.

    ``value_edited(value, dragging)`` fires on user changes only (``dragging`` is True while
    the slider is held); ``drag_started`` when the slider is pressed, ``drag_finished`` when
    it is let go. ``set_value`` syncs from the model without firing.
    """

    value_edited = Signal(float, bool)
    drag_started = Signal()
    drag_finished = Signal()

    def __init__(self, minimum: float, maximum: float, integer: bool = False, log: bool = False,
                 decimals: int = 4, parent=None):
        super().__init__(parent)
        self.minimum, self.maximum = float(minimum), float(maximum)
        self.integer = integer
        self.log = log and minimum > 0
        self.slider = QSlider(Qt.Orientation.Horizontal)
        span = int(maximum - minimum) if integer and not self.log else _STEPS
        self._slider_steps = max(1, min(span, 100_000))
        self.slider.setRange(0, self._slider_steps)
        if integer:
            self.spin = QSpinBox()
            self.spin.setRange(int(minimum), int(maximum))
        else:
            self.spin = QDoubleSpinBox()
            self.spin.setDecimals(decimals)
            self.spin.setRange(minimum, maximum)
            step = (maximum - minimum) / 100
            self.spin.setSingleStep(float(f"{step:.1g}") if step > 0 else 0.1)
        self.spin.setKeyboardTracking(False)
        self.spin.setMinimumWidth(self.spin.fontMetrics().horizontalAdvance("0000.0000") + 24)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.slider, 1)
        layout.addWidget(self.spin)
        self.slider.valueChanged.connect(self._on_slider)
        self.slider.sliderPressed.connect(self.drag_started)
        self.slider.sliderReleased.connect(self.drag_finished)
        self.spin.valueChanged.connect(self._on_spin)

    def _to_position(self, value: float) -> int:
        lo, hi = self.minimum, self.maximum
        if hi <= lo:
            return 0
        if self.log:
            t = (math.log(max(value, lo)) - math.log(lo)) / (math.log(hi) - math.log(lo))
        else:
            t = (value - lo) / (hi - lo)
        return int(round(min(max(t, 0.0), 1.0) * self._slider_steps))

    def _from_position(self, position: int) -> float:
        lo, hi = self.minimum, self.maximum
        t = position / self._slider_steps
        value = math.exp(math.log(lo) + t * (math.log(hi) - math.log(lo))) if self.log else lo + t * (hi - lo)
        if self.integer:
            return float(round(value))
        return float(f"{value:.4g}")  # readable values while dragging: 0.1, not 0.0999771

    def value(self) -> float:
        return float(self.spin.value())

    def set_value(self, value: float) -> None:
        shown = int(value) if self.integer else round(float(value), self.spin.decimals())
        if self.spin.value() == shown and (self.slider.isSliderDown() or self.slider.value() == self._to_position(value)):
            return  # every edit syncs the controls; setting a value again would still repaint it
        with QSignalBlocker(self.spin), QSignalBlocker(self.slider):
            self.spin.setValue(int(value) if self.integer else float(value))
            if not self.slider.isSliderDown():
                self.slider.setValue(self._to_position(value))

    def _on_slider(self, position: int) -> None:
        value = self._from_position(position)
        with QSignalBlocker(self.spin):
            self.spin.setValue(int(value) if self.integer else value)
        self.value_edited.emit(value, self.slider.isSliderDown())

    def _on_spin(self, value) -> None:
        with QSignalBlocker(self.slider):
            self.slider.setValue(self._to_position(float(value)))
        self.value_edited.emit(float(value), False)


# Preset parameters that are sizes of the session (random: n, d, d_k, d_v, heads; sine: N
# samples, one token each), read back from the session itself.
SESSION_SIZES = {"n": "n", "N": "n", "d": "d", "d_k": "d_k", "d_v": "d_v", "heads": "heads"}


class ControlsPanel(QWidget):
    def __init__(self, document: SessionDocument, parent=None):
        super().__init__(parent)
        self.document = document
        self._drag = 0  # one undo step per slider drag: the drag number is in the merge key

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
        self.temperature.drag_started.connect(self._next_drag)
        self.temperature.drag_finished.connect(document.flush)
        self.temperature.value_edited.connect(self._on_temperature)
        from .input_widgets import NumberEdit

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

        # Compute. Which devices and dtypes torch offers is asked once torch is in (the first
        # result or failure): asking here would import torch (1-3 s) before the window first
        # paints. Until then the lists hold the document's own device and dtype.
        self._engine_listed = False
        self.device_combo = QComboBox()
        self.device_combo.setToolTip("Where torch computes (only devices present here are listed)")
        self.dtype_combo = QComboBox()
        self.dtype_combo.setToolTip("Number type of the computation")
        self.device_combo.currentIndexChanged.connect(self._on_device)
        self.dtype_combo.currentIndexChanged.connect(self._on_dtype)
        compute_box = QGroupBox("Compute")
        compute_form = self._form(compute_box)
        compute_form.addRow("device", self.device_combo)
        compute_form.addRow("dtype", self.dtype_combo)

        # Preset parameters (rebuilt when the preset changes)
        self.preset_box = QGroupBox("Preset")
        self.preset_form = self._form(self.preset_box)
        self.param_widgets: dict[str, ValueSlider] = {}
        self._preset_name = ...  # not built yet: the first session builds the box

        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        # The preset's own sliders first: they are what a walkthrough invites you to play with.
        for box in (self.preset_box, mask_box, scale_box, compute_box):
            layout.addWidget(box)
        layout.addStretch(1)
        self.setMinimumWidth(260)  # labels and spin boxes clip below this in a narrow dock

        document.session_changed.connect(self._on_session_changed)
        document.compute.failed.connect(lambda _msg: self._sync_compute())
        document.result_changed.connect(self._on_first_result)
        self._sync_compute()
        if document.result is not None:
            self._on_first_result(document.result)
        self._on_session_changed(document.session)

    @staticmethod
    def _form(box: QGroupBox) -> QFormLayout:
        form = QFormLayout(box)
        form.setRowWrapPolicy(QFormLayout.RowWrapPolicy.WrapLongRows)
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        form.setContentsMargins(6, 6, 6, 6)
        return form

    def _next_drag(self) -> None:
        self._drag += 1

    def _post(self, apply) -> None:
        """Coalesce a dragged slider's edits (see ``document.edit_later``)."""
        from shiboken6 import isValid

        self.document.edit_later(lambda: isValid(self) and apply())

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
            key = ("scale", "temperature", self._drag)
            self._post(lambda: self._apply_temperature(tau, key))
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

    # -- compute options ---------------------------------------------------------------------
    def _on_device(self, _index: int) -> None:
        device = self.device_combo.currentData()
        if device and device != self.document.compute.device:
            self._fill_dtypes(device)
            user_actions.set_compute_options(self.document, device=device, dtype=self.dtype_combo.currentData())
            self.document.message.emit(f"Computing on {device}")

    def _on_dtype(self, _index: int) -> None:
        dtype = self.dtype_combo.currentData()
        if dtype and dtype != self.document.compute.dtype:
            user_actions.set_compute_options(self.document, dtype=dtype)

    def _on_first_result(self, _result) -> None:
        """The engine has run, so torch is in: list every device and dtype it offers."""
        self.document.result_changed.disconnect(self._on_first_result)
        self._list_devices()

    def _list_devices(self) -> None:
        from ..core.engine import available_devices

        self._engine_listed = True
        with QSignalBlocker(self.device_combo):
            self.device_combo.clear()
            for device in available_devices():
                self.device_combo.addItem(device, device)
        self._sync_compute()

    def _fill_dtypes(self, device: str) -> None:
        current = self.dtype_combo.currentData() or self.document.compute.dtype
        if self._engine_listed:
            from ..core.engine import supported_dtypes

            dtypes = supported_dtypes(device)
        else:
            dtypes = [self.document.compute.dtype]
        with QSignalBlocker(self.dtype_combo):
            self.dtype_combo.clear()
            for dtype in dtypes:
                self.dtype_combo.addItem(dtype, dtype)
            index = self.dtype_combo.findData(current)
            self.dtype_combo.setCurrentIndex(index if index >= 0 else 0)

    def _sync_compute(self) -> None:
        if not self._engine_listed and self.document.compute.last_error is not None:
            self._list_devices()  # the first compute failed: torch is in (or says why not)
            return
        with QSignalBlocker(self.device_combo):
            index = self.device_combo.findData(self.document.compute.device)
            if index < 0:
                self.device_combo.addItem(self.document.compute.device, self.document.compute.device)
                index = self.device_combo.count() - 1
            self.device_combo.setCurrentIndex(index)
        self._fill_dtypes(self.document.compute.device)
        with QSignalBlocker(self.dtype_combo):
            index = self.dtype_combo.findData(self.document.compute.dtype)
            if index >= 0:
                self.dtype_combo.setCurrentIndex(index)

    # -- preset parameters -----------------------------------------------------------------------
    def _rebuild_preset_controls(self, session) -> None:
        while self.preset_form.rowCount():
            self.preset_form.removeRow(0)
        self.param_widgets = {}
        ref = session.preset
        self._preset_name = ref.name if ref else None
        preset = None
        if ref is not None:
            from ..core.presets import get_preset

            try:
                preset = get_preset(ref.name)
            except AttnExplorerError:
                preset = None
        self.preset_box.setVisible(bool(preset and preset.params))
        if preset is None:
            return
        self.preset_box.setTitle(f"Preset: {preset.name}")
        self.preset_box.setToolTip(preset.description)
        for param in preset.params:
            widget = ValueSlider(param.minimum, param.maximum, integer=param.kind == "int", log=param.log)
            tip = f"{param.label or param.name}: {param.help}".rstrip(": ")
            widget.setToolTip(tip)
            widget.drag_started.connect(self._next_drag)
            widget.drag_finished.connect(self.document.flush)
            widget.value_edited.connect(lambda v, dragging, p=param: self._on_param(p, v, dragging))
            label = QLabel(param.label or param.name)
            label.setToolTip(tip)
            label.setWordWrap(True)
            self.preset_form.addRow(label, widget)
            self.param_widgets[param.name] = widget

    def _on_param(self, param, value: float, dragging: bool) -> None:
        """Rebuild the preset with this parameter changed: live while dragging (the newest
        value at each turn of the event loop), one undo step per drag (or per spin-box change)."""
        if dragging:
            key = ("preset", param.name, self._drag)
            self._post(lambda: self._apply_param(param, value, key))
        else:
            self._apply_param(param, value, None)

    def _apply_param(self, param, value: float, key) -> None:
        if self.document.session.preset is None:
            return
        value = int(value) if param.kind == "int" else value
        if not user_actions.set_preset_param(self.document, param.name, value, param.label or param.name, key):
            self._sync_params(self.document.session)

    def _sync_params(self, session) -> None:
        if session.preset is None:
            return
        for name, widget in self.param_widgets.items():
            if name in SESSION_SIZES:
                # A size the session itself holds: after an edit (a word typed into the
                # sentence) the slider shows the session's, not the one the preset was built
                # with ("tokens 6" for 4 tokens).
                widget.set_value(getattr(session, SESSION_SIZES[name]))
            elif name in session.preset.params:
                widget.set_value(session.preset.params[name])

    # -- following the document --------------------------------------------------------------------
    def _on_session_changed(self, session) -> None:
        self._sync_mask(session)
        self._sync_scale(session)
        name = session.preset.name if session.preset else None
        if name != self._preset_name:
            self._rebuild_preset_controls(session)
        self._sync_params(session)
