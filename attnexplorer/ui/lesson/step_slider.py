"""A lesson step's preset slider in the lesson bar (``Step.slider``: one parameter of the
session's preset, e.g. the sine preset's τ), kept in step with the session; a drag is one
undo step (``SliderDrags``)."""

from __future__ import annotations

from ..controls.value_slider import SliderDrags, ValueSlider


class StepSlider:
    """The slider ``bar`` shows for the step, on ``document``'s preset."""

    def __init__(self, document, bar):
        self.document, self.bar = document, bar
        self.drags = SliderDrags(document, bar)
        self._for: tuple | None = None   # (preset name, parameter) the slider shows, or None

    def show_for(self, step) -> None:
        """The step's slider in the bar (none when the step names none or the session's preset
        has no such parameter); the one shown stays when it is the same."""
        session = self.document.session
        want = None
        if step.slider and session.preset is not None and step.slider in session.preset.params:
            want = (session.preset.name, step.slider)
        if want == self._for:
            return
        self._for = want
        if want is None:
            self.bar.show_slider(None)
            return
        from ...core.inputs.presets import get_preset

        param = get_preset(want[0]).param(want[1])
        slider = ValueSlider(param.minimum, param.maximum, integer=param.kind == "int", log=param.log)
        slider.set_value(session.preset.params[want[1]])
        slider.drag_started.connect(self.drags.started)
        slider.drag_finished.connect(self.document.flush)
        slider.value_edited.connect(lambda v, dragging, p=param: self._on_slider(p, v, dragging))
        self.bar.show_slider(param.label or param.name, slider)

    def follow(self, session) -> None:
        """Show the session's value (an undo, the Controls' own slider)."""
        if self.bar.slider is not None and session.preset is not None and self._for is not None:
            value = session.preset.params.get(self._for[1])
            if value is not None:
                self.bar.slider.set_value(value)

    def hide(self) -> None:
        self.bar.show_slider(None)
        self._for = None

    def _on_slider(self, param, value: float, dragging: bool) -> None:
        from ..user_actions import set_preset_param

        value = int(value) if param.kind == "int" else value
        key = self.drags.key("lesson-slider", param.name) if dragging else None
        set_preset_param(self.document, param.name, value, param.label or param.name, key)
