"""When autosave writes: a change is in the recovery file within seconds, however edits come.

A change starts a short countdown (``delay_ms``, 3 s) that each further change restarts, so a
burst of edits is written once; but a write starts no later than a deadline after the first
change that is not yet in the file, so steady editing cannot postpone it. Every change is to
be in the file within ``LATENCY_MS`` (5 s): the deadline is 4 s, shortened for a session whose
last write took long (1.5 times that write is left for the next one: a 4,096-token session
takes about a second).

``WriteClock`` is that rule and nothing else (no timer, no file, no Qt): the window's
``Autosaver`` (``ui/autosave.py``) asks it when to write and tells it what happened, and the
tests play edits at any pace through it without waiting for a clock.
"""

from __future__ import annotations

DEFAULT_DELAY_MS = 3000
# A change is in the recovery file within this, however the edits keep coming...
LATENCY_MS = 5000
# ...so the first unwritten change waits at most this long for its write to start (less when
# writes take long, never less than MIN_DEADLINE_MS).
MAX_DELAY_MS = 4000
MIN_DEADLINE_MS = 500


class WriteClock:
    """Times in seconds on any monotonic clock the caller uses."""

    def __init__(self, delay_ms: int = DEFAULT_DELAY_MS, max_delay_ms: int = MAX_DELAY_MS):
        self.delay_ms = max(0, int(delay_ms))
        self.max_delay_ms = max(0, int(max_delay_ms))
        # When the oldest change not yet handed to a write happened, or None.
        self.first_unwritten: float | None = None
        self.last_write_ms = 0.0  # how long the last write took

    def deadline_ms(self) -> float:
        """How long the first unwritten change may wait for its write to start: what is left
        of LATENCY_MS after the write (1 s, or 1.5 times the last write when that is longer)."""
        room = max(1000.0, 1.5 * self.last_write_ms)
        return max(MIN_DEADLINE_MS, min(self.max_delay_ms, LATENCY_MS - room))

    def change(self, now: float) -> float:
        """Note a change at ``now``; the time the write should start (restarting the countdown,
        never past the deadline of the first unwritten change)."""
        if self.first_unwritten is None:
            self.first_unwritten = now
        return min(now + self.delay_ms / 1000, self.first_unwritten + self.deadline_ms() / 1000)

    def writing(self) -> None:
        """A write of the current state begins: the changes so far are in it."""
        self.first_unwritten = None

    def wrote(self, took_ms: float) -> None:
        """A write finished after ``took_ms``."""
        self.last_write_ms = took_ms
