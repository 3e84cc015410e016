"""The Controls dock's Preset group: a slider per parameter of the session's preset, rebuilt
when the preset changes. Dragging one rebuilds the preset live (the newest value at each
turn of the event loop) in one undo step per drag (``SliderDrags``)."""

from __future__ import annotations

from PySide6.QtWidgets import QGroupBox, QLabel

from ...core.errors import AttnExplorerError
from .. import user_actions
from ..document import SessionDocument
from .value_slider import SliderDrags, ValueSlider

# Preset parameters that are sizes of the session (random: n, d, d_k, d_v, heads; sine: N
# samples, one token each), read back from the session itself.
SESSION_SIZES = {"n": "n", "N": "n", "d": "d", "d_k": "d_k", "d_v": "d_v", "heads": "heads"}


class PresetBox(QGroupBox):
    """The preset's parameters as sliders (hidden for a session of no preset, or one
    without parameters); ``param_widgets``: name → its ``ValueSlider``."""

    def __init__(self, document: SessionDocument, form, drags: SliderDrags, parent=None):
        super().__init__("Preset", parent)
        self.document, self.drags = document, drags
        self.form = form(self)
        self.param_widgets: dict[str, ValueSlider] = {}
        self._preset_name = ...  # not built yet: the first session builds the box

    def follow(self, session) -> None:
        """Rebuild the sliders for a new preset, and show the session's values."""
        name = session.preset.name if session.preset else None
        if name != self._preset_name:
            self._rebuild(session)
        self._sync(session)

    def _rebuild(self, session) -> None:
        while self.form.rowCount():
            self.form.removeRow(0)
        self.param_widgets = {}
        ref = session.preset
        self._preset_name = ref.name if ref else None
        preset = None
        if ref is not None:
            from ...core.inputs.presets import get_preset

            try:
                preset = get_preset(ref.name)
            except AttnExplorerError:
                preset = None
        self.setVisible(bool(preset and preset.params))
        if preset is None:
            return
        self.setTitle(f"Preset: {preset.name}")
        self.setToolTip(preset.description)
        for param in preset.params:
            widget = ValueSlider(param.minimum, param.maximum, integer=param.kind == "int", log=param.log)
            tip = f"{param.label or param.name}: {param.help}".rstrip(": ")
            widget.setToolTip(tip)
            widget.drag_started.connect(self.drags.started)
            widget.drag_finished.connect(self.document.flush)
            widget.value_edited.connect(lambda v, dragging, p=param: self._on_param(p, v, dragging))
            label = QLabel(param.label or param.name)
            label.setToolTip(tip)
            label.setWordWrap(True)
            self.form.addRow(label, widget)
            self.param_widgets[param.name] = widget

    def _on_param(self, param, value: float, dragging: bool) -> None:
        """Rebuild the preset with this parameter changed: live while dragging, one undo step
        per drag (or per spin-box change)."""
        if dragging:
            key = self.drags.key("preset", param.name)
            self.drags.post(lambda: self._apply_param(param, value, key))
        else:
            self._apply_param(param, value, None)

    def _apply_param(self, param, value: float, key) -> None:
        if self.document.session.preset is None:
            return
        value = int(value) if param.kind == "int" else value
        if not user_actions.set_preset_param(self.document, param.name, value, param.label or param.name, key):
            self._sync(self.document.session)

    def _sync(self, session) -> None:
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
