"""A slider and a spin box showing one number (the controls' temperature and preset
parameters, a lesson step's slider), and the drags that make one undo step each."""

from __future__ import annotations

import math

from PySide6.QtCore import QSignalBlocker, Qt, Signal
from PySide6.QtWidgets import QDoubleSpinBox, QHBoxLayout, QSlider, QSpinBox, QWidget

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


class SliderDrags:
    """One undo step per slider drag for the sliders of ``owner`` (a widget) on ``document``.

    ``started`` is connected to each slider's ``drag_started``: the drag's number then goes
    into the merge key (``key``), so the edits of one drag merge and the next drag is a step
    of its own. ``post(apply)`` coalesces a dragged slider's edits (``document.edit_later``):
    when they come faster than the window redraws, only the newest is applied; it is dropped
    once ``owner`` is gone."""

    def __init__(self, document, owner: QWidget):
        self.document, self.owner, self.number = document, owner, 0

    def started(self) -> None:
        self.number += 1

    def key(self, *what) -> tuple:
        return (*what, self.number)

    def post(self, apply) -> None:
        from shiboken6 import isValid

        owner = self.owner
        self.document.edit_later(lambda: isValid(owner) and apply())
