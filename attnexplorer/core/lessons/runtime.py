"""A lesson being taught: which step is on, what the class guessed, what has been revealed.

Qt-free, so the window's lesson bar, the presenter's notes and the handouts all read the
same state. Quoted numbers and answers are always read from a result (the session as it is
now), never stored: an edit in step 3 shows in step 7's text and answer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import AttnExplorerError
from . import quotes
from .model import Ask, Lesson, Step


@dataclass(frozen=True)
class Answer:
    """The answer to a step's question in ``result``: ``shown`` as the class reads it (``dog
    (0.883)`` or ``0.883``), ``key`` the right key (key questions) or ``number`` the value."""

    shown: str
    key: str | None = None
    number: float | None = None


def answer(ask: Ask, result) -> Answer:
    """The answer to ``ask`` for ``result`` (QuoteError if the session lost the row or cell)."""
    if ask.kind == "key":
        row = np.asarray(quotes.value(quotes.Ref(ask.of.text, ask.of.name, ask.of.head, ask.of.row), result))
        j = int(np.argmax(row))
        key = result.key_tokens[j]
        return Answer(f"{key} ({quotes.format_value(float(row[j]), ask.of.fmt)})", key=key)
    number = float(quotes.value(ask.of, result))
    return Answer(quotes.format_value(number, ask.of.fmt), number=number)


class LessonRun:
    """The state of one lesson in front of a class.

    ``index`` is the current step (0-based); ``guesses`` holds each step's guess (a key token
    or a number); ``revealed`` the steps whose hidden values are shown. Moving between steps
    keeps both, so Back shows the guess and the answer again.
    """

    def __init__(self, lesson: Lesson):
        self.lesson = lesson
        self.index = 0
        self.guesses: dict[int, str | float] = {}
        self.revealed: set[int] = set()

    @property
    def step(self) -> Step:
        return self.lesson.steps[self.index]

    @property
    def count(self) -> int:
        return len(self.lesson.steps)

    def counter(self, result=None) -> str:
        """``Step 4 of 9: scores = Q·Kᵀ`` (the title's quotes filled from ``result``)."""
        title = self.step.title if result is None else quotes.fill(self.step.title, result, self.hidden()).text
        return f"Step {self.index + 1} of {self.count}: {title}"

    def go(self, index: int) -> bool:
        """Move to step ``index`` (clamped); True when the step changed."""
        index = max(0, min(int(index), self.count - 1))
        if index == self.index:
            return False
        self.index = index
        return True

    def next(self) -> bool:
        return self.go(self.index + 1)

    def back(self) -> bool:
        return self.go(self.index - 1)

    @property
    def next_step(self) -> Step | None:
        return self.lesson.steps[self.index + 1] if self.index + 1 < self.count else None

    def hidden(self) -> tuple[quotes.Ref, ...]:
        """What the current step keeps hidden now (nothing once revealed)."""
        return () if self.index in self.revealed else self.step.hidden

    def guess_key(self, token: str) -> None:
        self.guesses[self.index] = token

    def guess_number(self, text: str) -> float:
        """The class's typed guess, parsed like a cell (``0.9``, ``1/3``); AttnExplorerError
        naming the text when it is not a number."""
        from ..numbers.expr import parse_number

        value = parse_number(text)
        self.guesses[self.index] = value
        return value

    def reveal(self) -> None:
        self.revealed.add(self.index)

    def is_revealed(self) -> bool:
        return self.index in self.revealed

    def verdict(self, result) -> str:
        """After Reveal: the answer beside the guess, e.g. ``Your guess: ball · answer: dog
        (0.883) ✗`` (or just the answer when nobody guessed)."""
        ask = self.step.ask
        if ask is None:
            return ""
        try:
            right = answer(ask, result)
        except AttnExplorerError as err:
            return f"No answer: {err}"
        guess = self.guesses.get(self.index)
        if guess is None:
            return f"Answer: {right.shown}"
        if ask.kind == "key":
            mark = "✓ right" if guess == right.key else "✗"
            return f"Your guess: {guess} · answer: {right.shown} {mark}"
        shown_guess = quotes.format_value(float(guess), ask.of.fmt)
        off = abs(float(guess) - right.number)
        close = off <= ask.tolerance or math.isclose(float(guess), right.number, rel_tol=1e-9, abs_tol=1e-12)
        mark = "✓ right" if close else f"✗ off by {quotes.format_value(off, None)}"
        return f"Your guess: {shown_guess} · answer: {right.shown} {mark}"
