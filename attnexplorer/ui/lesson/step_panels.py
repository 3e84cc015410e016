"""Which panels each step of a lesson shows, and laying them out in the main window.

A step names its panels (``Step.panels``); the teacher may bring up others or close some
while teaching, and that choice is kept for the step (``remember``) and saved with the lesson
(``as_taught``). ``arrange`` puts a step's panels side by side, large, and hides every other
result panel; the Inputs stay (the tables are editable on every step) unless presenter mode
hides the editing chrome.
"""

from __future__ import annotations

import dataclasses

from PySide6.QtCore import Qt

from ...core.lessons import Lesson
from ...core.lessons.runtime import LessonRun

# Panels that spell out the selected query's scores and weights: while a step keeps a value
# hidden they would give it away, so they wait for Reveal.
TELLING_KINDS = ("explain", "query")


class StepPanels:
    """The panels of the steps of the lesson taught in ``window`` (``presenter``: its
    presenter mode, which hides the Inputs)."""

    def __init__(self, window, presenter):
        self.window, self.presenter = window, presenter
        self._chosen: dict[int, tuple[str, ...]] = {}   # step → the panels the teacher showed

    def reset(self) -> None:
        """A new lesson: every step shows its own panels."""
        self._chosen = {}

    def panels_of(self, run: LessonRun, index: int) -> tuple[str, ...]:
        """The panels step ``index`` shows: the teacher's choice when they changed it."""
        return self._chosen.get(index, run.lesson.steps[index].panels)

    def applicable(self, kinds) -> list[str]:
        """``kinds`` less the panels that do not apply to the document's session."""
        session = self.window.document.session
        panels = {p.kind: p for p in self.window.panels}
        return [k for k in kinds if k in panels and panels[k].applies_to(session)]

    def arrange(self, run: LessonRun) -> None:
        """Show the step's panels side by side, large; every other result panel hidden."""
        window, docks = self.window, self.window.docks
        kinds = self.panels_of(run, run.index)
        if run.hidden():
            kinds = [k for k in kinds if k not in TELLING_KINDS]
        shown = self.applicable(kinds)
        if not shown:   # a step whose panels do not apply to this session shows the weights
            shown = self.applicable(["weights"])
        inputs = "inputs" in kinds or not self.presenter.active
        for kind, dock in docks.items():
            if kind not in shown:
                dock.hide()
        right = Qt.DockWidgetArea.RightDockWidgetArea
        for kind in shown:
            window.removeDockWidget(docks[kind])
        for i, kind in enumerate(shown):
            dock = docks[kind]
            dock.setFloating(False)
            if i == 0:
                window.addDockWidget(right, dock)
            else:
                window.splitDockWidget(docks[shown[i - 1]], dock, Qt.Orientation.Horizontal)
            dock.show()
        left = Qt.DockWidgetArea.LeftDockWidgetArea
        for kind, wanted in (("inputs", inputs), ("controls", "controls" in kinds)):
            if wanted:
                if window.dockWidgetArea(docks[kind]) != left:
                    window.addDockWidget(left, docks[kind])
                docks[kind].show()
        if shown:
            width = max(window.width() - (420 if inputs else 0), 1)
            window.resizeDocks([docks[k] for k in shown], [width // len(shown)] * len(shown), Qt.Orientation.Horizontal)

    def remember(self, run: LessonRun) -> None:
        """Keep the panels the teacher has on screen for the step, when they changed them."""
        docks = self.window.docks
        step_panels = self.panels_of(run, run.index)
        order = list(step_panels) + [k for k in docks if k not in step_panels]
        visible = tuple(k for k in order if k in docks and docks[k].isVisible() and k != "controls"
                        and (k != "inputs" or "inputs" in step_panels))
        if set(visible) != set(self.applicable(step_panels)) | ({"inputs"} & set(step_panels)) and visible:
            self._chosen[run.index] = visible

    def as_taught(self, run: LessonRun) -> Lesson:
        """The lesson with each step's panels as the teacher showed them."""
        lesson = run.lesson
        steps = tuple(dataclasses.replace(s, panels=self.panels_of(run, i)) for i, s in enumerate(lesson.steps))
        return dataclasses.replace(lesson, steps=steps)
