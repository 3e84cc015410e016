"""The open document: the current session, its undo stack, the selection and the result.

Every widget talks to one ``SessionDocument``: inputs go through ``user_actions`` to
``edit(new_session, text)`` (one undo step, ``undo_steps.py``), panels listen to
``result_changed`` and ``selection_changed``. The document owns a ``ComputeRunner``
(``compute_runner.py``: the worker thread, inline computes, stale results dropped), so the
window never computes attention itself.

Signals
- ``session_changed(Session)``: after every edit, undo or redo (and ``set_session``).
- ``result_changed(AttentionResult)``: the newest result; stale ones are dropped.
- ``selection_changed(Selection)``: the selected head, query and key.
- ``message(str)``: a short status-bar text (a refused edit says why here).
- ``compute_failed(str)``: the engine failed; the document has fallen back to the CPU.

What is computed: every intermediate, except for a large session (more than
``compute_runner.LARGE_CELLS`` score cells) or a device other than the CPU, where only what the on-screen
views read is kept (``set_needs``, from the window: the union of the visible panels'
``needs``); a view that needs more coming on screen recomputes. ``full_result()`` gives
exports a complete result of the current session, computing it then when the published one
is partial or belongs to an earlier session. Every result carries the session it was
computed from (``result.session``): views read session facts from it, never from
``document.session``, which may be one edit ahead while a big compute runs.

Bursts of edits (a dragged slider) are coalesced with ``edit_later``: only the newest is
applied, at the next turn of the event loop; ``flush()`` applies it now.
"""

from __future__ import annotations

import time
from typing import Callable, Iterable

from PySide6.QtCore import QObject, QTimer, Signal
from PySide6.QtGui import QUndoStack

from ..core.engine import INTERMEDIATES, STAGE_INTERMEDIATES, AttentionResult, carries, compute
from ..core.session import Session
from .compute_runner import ComputeRunner
from .selection import Selection
from .undo_steps import EditStep, LiveEdit, forget_oldest, history_bytes

# The undo history's bounds: this many steps, and about this many bytes of recorded changes
# (a cell edit records a few bytes; a resize or an import records a whole array). Beyond
# either, the oldest steps are forgotten.
UNDO_STEPS = 1000
UNDO_BYTES = 256 << 20


class SessionDocument(QObject):
    session_changed = Signal(object)
    result_changed = Signal(object)
    selection_changed = Signal(object)
    message = Signal(str)
    compute_failed = Signal(str)

    def __init__(self, session: Session, parent=None):
        super().__init__(parent)
        self._session = session
        self._selection = Selection.from_view(session)
        self._result: AttentionResult | None = None
        self.undo_stack = QUndoStack(self)
        self.undo_stack.setUndoLimit(UNDO_STEPS)  # Qt allows this only while the stack is empty
        self.last_compute_ms = 0.0
        # Why the current session has no result (None once one is published): a window made
        # after the document's first compute failed still has to say why it is blank.
        self.last_error: str | None = None
        self._posted: Callable[[], None] | None = None
        self._post_timer = QTimer(self)
        self._post_timer.setSingleShot(True)
        self._post_timer.setInterval(0)
        self._post_timer.timeout.connect(self.flush)
        self._recompute_timer = QTimer(self)
        self._recompute_timer.setSingleShot(True)
        self._recompute_timer.setInterval(0)
        self._recompute_timer.timeout.connect(self.recompute)
        self.runner = ComputeRunner(self)
        self.runner.finished.connect(self._publish)
        self.runner.failed.connect(self._fail)
        self.runner.progress.connect(self._on_compute_progress)
        if self.runner.partial(session):
            # A large session waits one turn of the event loop, so that the window can say
            # what is on screen first and the first compute keeps only that.
            self._recompute_timer.start()
        else:
            self.recompute()

    # -- reading ----------------------------------------------------------------------
    @property
    def session(self) -> Session:
        return self._session

    @property
    def result(self) -> AttentionResult | None:
        """The newest result (it may lag the session by one edit while a big one runs)."""
        return self._result

    @property
    def selection(self) -> Selection:
        return self._selection

    @property
    def computing(self) -> bool:
        """Whether a compute is running on the worker thread now."""
        return self.runner.computing

    @property
    def device(self) -> str:
        return self.runner.device

    @property
    def dtype(self) -> str:
        return self.runner.dtype

    @property
    def needs(self) -> frozenset[str] | None:
        """What the on-screen views read (None: everything); see ``set_needs``."""
        return self.runner.needs

    def keep_for(self, session: Session | None = None) -> tuple[str, ...] | None:
        """The ``keep`` a compute of ``session`` (default: the current one) uses."""
        return self.runner.keep_for(self._session if session is None else session)

    def current_result(self) -> AttentionResult | None:
        """The current result when it was computed from the current session, else None (a
        compute is on its way, or the last one failed)."""
        result = self._result
        return result if result is not None and result.session is self._session else None

    def full_result(self) -> AttentionResult:
        """A result of the current session with every intermediate, for exports and copies.

        It is the published result when that one belongs to the current session and is
        complete; otherwise the current session is computed here and now, in full (not
        published). It never waits for the worker and never runs a nested event loop, so no
        edit can land in the middle of an export, and the result always carries exactly the
        session being exported (``result.session``). Raises AttnExplorerError when the engine
        refuses the session.
        """
        self.flush()  # an edit posted with edit_later is part of what the user sees
        result = self.current_result()
        if result is not None and all(getattr(result, name) is not None for name in INTERMEDIATES):
            return result
        return compute(self._session, device=self.device, dtype=self.dtype)

    def complete(self) -> AttentionResult:
        """``full_result()``, also published when it is new (a figure export draws panels
        that are not on screen, and the panels draw the published result)."""
        result = self.full_result()
        if result is not self._result:
            self.runner.drop_in_flight()  # a compute in flight for this same session is now stale
            self._publish(result)
        return result

    # -- changing -----------------------------------------------------------------------
    def edit(self, session: Session, text: str, merge_key=None) -> None:
        """Make ``session`` current as one undo step named ``text``.

        Consecutive edits with the same non-None ``merge_key`` (e.g. ``("cell", "W_q", 0, 1, 2)``)
        merge into one step, so typing into one cell again and again is one undo.
        """
        if self._posted is not None:
            self.flush()  # a coalesced edit posted earlier goes first
        if session == self._session:
            return
        self.undo_stack.push(EditStep(self, self._session, session, text, merge_key))
        forget_oldest(self.undo_stack, UNDO_BYTES)

    def history_bytes(self) -> int:
        """What the undo history's recorded changes hold, in bytes."""
        return history_bytes(self.undo_stack)

    def live_edit(self, text: str) -> LiveEdit:
        """Begin an edit shown as it happens (see ``LiveEdit``): one undo step named ``text``."""
        if self._posted is not None:
            self.flush()
        return LiveEdit(self, text)

    def edit_later(self, apply: Callable[[], None]) -> None:
        """Run ``apply`` (which makes an edit) at the next turn of the event loop, replacing
        one posted before and not yet run: while a slider is dragged faster than frames are
        drawn, only the newest value is computed and drawn. ``flush()`` runs it now."""
        self._posted = apply
        self._post_timer.start()

    def flush(self) -> None:
        """Apply the edit posted with ``edit_later`` now, if any (a slider's release)."""
        self._post_timer.stop()
        apply, self._posted = self._posted, None
        if apply is not None:
            apply()

    def set_needs(self, needs: Iterable[str] | None) -> None:
        """Say what the on-screen views read from a result (names from ``INTERMEDIATES`` and
        ``STAGE_INTERMEDIATES``; None: everything). A large session then computes only that,
        and recomputes when a view that needs more than the current result holds comes on
        screen (a stage the session does not use is None in any result: no reason to)."""
        new = None if needs is None else frozenset(needs) & frozenset(INTERMEDIATES + STAGE_INTERMEDIATES)
        if new == self.runner.needs:
            return
        self.runner.needs = new
        result = self._result
        if result is None or result.session is not self._session:
            return  # the compute on its way (or the next one) uses the new needs
        if result.streamed is not None:
            return  # a long input's result (core/long) holds the same whatever the needs
        wanted = INTERMEDIATES if new is None else new
        if any(getattr(result, name) is None and carries(result.session, name) for name in wanted):
            self._recompute_timer.start()  # coalesces a burst of dock changes into one

    def set_session(self, session: Session) -> None:
        """Replace the document (New, Open, a preset): clears undo history."""
        self.undo_stack.clear()
        self._set(session)
        view = Selection.from_view(session)
        self.set_selection(head=view.head, query=view.query, key=view.key)
        self.undo_stack.setClean()

    def refuse(self, reason: str) -> None:
        """Report a refused edit; nothing changes."""
        self.message.emit(reason)

    def set_selection(self, head=None, query=None, key=...) -> None:
        sel = self._selection
        new = Selection(
            sel.head if head is None else head,
            sel.query if query is None else query,
            sel.key if key is ... else key,
        ).clamp(self._session)
        if new != sel:
            self._selection = new
            self.selection_changed.emit(new)

    def set_compute_options(self, device: str | None = None, dtype: str | None = None) -> None:
        if device is not None:
            self.runner.device = device
        if dtype is not None:
            self.runner.dtype = dtype
        self.recompute()

    def _set(self, session: Session, background: bool = False) -> None:
        self._session = session
        clamped = self._selection.clamp(session)
        self.session_changed.emit(session)
        if clamped != self._selection:
            self._selection = clamped
            self.selection_changed.emit(clamped)
        self.recompute(background)

    # -- computing ----------------------------------------------------------------------
    def _on_compute_progress(self, fraction: float) -> None:
        # A long input (core/long) computes for seconds on the worker: say how far it is.
        self.message.emit(f"Computing {self._session.n:,} tokens × {self._session.heads} heads: "
                          f"{fraction:.0%} of the rows")

    def recompute(self, background: bool = False) -> None:
        """Compute the current session; newer requests supersede pending ones.
        ``background``: on the compute thread whatever the size (see ``ComputeRunner.request``)."""
        self._recompute_timer.stop()
        self.runner.request(self._session, background)

    def _publish(self, result: AttentionResult) -> None:
        self.last_error = None
        self._result = result
        self.last_compute_ms = result.compute_ms
        self.result_changed.emit(result)

    def _fail(self, error: str) -> None:
        if self.device != "cpu":
            failed = self.device
            self.runner.device = "cpu"
            self.last_error = f"{error}; falling back to the CPU (was {failed})"
            self.compute_failed.emit(self.last_error)
            self.recompute()
        else:
            self.last_error = error
            self.compute_failed.emit(error)

    def wait_idle(self, timeout_s: float = 10.0) -> bool:
        """Block until no compute is in flight (tests and exports use this)."""
        from PySide6.QtCore import QCoreApplication

        self.flush()
        if self._recompute_timer.isActive():
            self.recompute()
        end = time.monotonic() + timeout_s
        while not self.runner.idle:
            QCoreApplication.processEvents()
            if time.monotonic() > end:
                return False
            time.sleep(0.001)
        return True

    def shutdown(self) -> None:
        """Stop the compute thread (idempotent)."""
        self.runner.shutdown()
