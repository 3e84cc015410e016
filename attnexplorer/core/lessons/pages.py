"""What a handout shows of each step, Qt-free: its heading, formula, text, the numbers it
quotes as a table, and the answer to the step before it (a hidden value appears on the next
page as the answer). ``ui/lesson/handout.py`` draws these pages as PDF, beamer or Markdown.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import AttnExplorerError
from . import quotes
from .runtime import LessonRun, answer


@dataclass(frozen=True)
class Page:
    number: int                      # 1-based step number (an answers-only last page: count + 1)
    heading: str                     # "Step 4 of 9: score(she, dog)"
    formula: str
    latex: str
    text: str                        # quotes filled, hidden ones as quotes.HIDDEN_MARK
    question: str                    # the step's question, or ""
    numbers: tuple[tuple[str, str], ...]   # (what, value) per distinct quote of the step
    answer: str                      # the answer to the previous step's question, or ""
    panels: tuple[str, ...]
    select: tuple[str | None, str | None]
    hidden: tuple[quotes.Ref, ...]


def _answer_text(step_number: int, step, result) -> str:
    try:
        shown = answer(step.ask, result).shown
    except AttnExplorerError as err:
        shown = f"? ({err})"
    return f"Answer to step {step_number} ({quotes.fill(step.ask.prompt, result).text}): {shown}"


def handout_pages(lesson, result) -> list[Page]:
    """One page per step of ``lesson`` with its numbers from ``result``; when the last step
    asks a question, one more page with its answer."""
    run = LessonRun(lesson)
    pages = []
    for i, step in enumerate(lesson.steps):
        run.go(i)
        hidden = step.hidden
        texts = [step.text] + ([step.ask.prompt] if step.ask else [])
        numbers: dict[str, str] = {}
        for text in texts:
            for ref, shown, _problem in quotes.fill(text, result, hidden).quotes:
                if ref is not None and ref.name not in ("n", "d", "d_k", "d_v", "heads"):
                    numbers.setdefault(ref.text.split(":")[0].strip(), shown)
        previous = lesson.steps[i - 1] if i else None
        pages.append(Page(
            number=i + 1, heading=run.counter(result),
            formula=step.formula, latex=step.latex, text=quotes.fill(step.text, result, hidden).text,
            question=quotes.fill(step.ask.prompt, result, hidden).text if step.ask else "",
            numbers=tuple(numbers.items()),
            answer=_answer_text(i, previous, result) if previous is not None and previous.ask else "",
            panels=step.panels, select=step.select, hidden=hidden))
    last = lesson.steps[-1]
    if last.ask is not None:
        n = len(lesson.steps)
        pages.append(Page(number=n + 1, heading="Answers", formula="", latex="", text="", question="", numbers=(),
                          answer=_answer_text(n, last, result), panels=(), select=(None, None), hidden=()))
    return pages
