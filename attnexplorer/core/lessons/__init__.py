"""Lessons: a session and the steps a teacher walks a class through (Qt-free).

``model`` holds the lesson, its steps and questions, and checks them against the session;
``quotes`` the numbers a step's text quotes, bound to the session so they follow edits;
``runtime`` a lesson being taught (the current step, what is hidden, guesses and reveals).
Files and the built-in lessons are read in ``io/lesson_file.py``.
"""

from .model import (INPUT_KINDS, PANEL_KINDS, STAGES, Ask, Lesson, LessonError, Stage, Step, default_steps,
                    ref_label, step_to_dict, steps_from_list)
from .quotes import QuoteError, Ref, fill, parse_ref

__all__ = ["INPUT_KINDS", "PANEL_KINDS", "STAGES", "Ask", "Lesson", "LessonError", "QuoteError", "Ref", "Stage",
           "Step", "default_steps", "fill", "parse_ref", "ref_label", "step_to_dict", "steps_from_list"]
