"""Running a fit off the GUI thread, with the window following at screen rate.

``FitRunner(document).start(fitter, text)`` steps the ``core.fit.Fitter`` as a job on its own
worker (``app.jobs.JobRunner``: Stop is the job's cancel token, the end and a failure come on
the GUI thread).
The worker never touches Qt objects of the GUI: after each step it records the loss, and at
most every ``FRAME_S`` it leaves a snapshot (the session with the weights reached) in a
one-place mailbox, replacing one not yet taken. A GUI timer at the same rate takes whatever
is there, so stale snapshots are dropped, never queued, and the GUI is never asked to draw
faster than the screen. Each snapshot is shown through one ``LiveEdit``: the whole fit is one
undo step, and Stop keeps the weights reached. Its result is computed on the document's compute
thread (never inline on the GUI thread), and the next snapshot is taken only once that result
is in: the window draws as fast as it can, never more than it can.

Anything else that changes the session meanwhile (an edit, an undo, opening a file) detaches
the live edit: the fit stops, keeping in its undo step what was shown until then.

Signals (GUI thread): ``progressed(FitProgress)``, ``finished(FitProgress)``,
``state_changed(str)``: ``idle``, ``running`` or ``paused``; ``parked()`` once a paused fit's
worker has stopped stepping (every step it made is in ``history``).
"""

from __future__ import annotations

import threading
import time

from PySide6.QtCore import QObject, QTimer, Signal

from ...app.jobs import JobRunner
from ..gui_thread import GuiThread, wait_for

FRAME_S = 1 / 30


class _Mailbox:
    """What the worker leaves for the GUI: the newest snapshot, the loss points since the last
    take, the newest progress; guarded by a lock held only for a few assignments."""

    def __init__(self):
        self.lock = threading.Lock()
        self.session = None
        self.points: list[tuple[int, float, float]] = []
        self.progress = None

    def take(self, session: bool = True):
        """(session or None, points, progress); ``session`` False leaves the snapshot for a
        later take (the window has not drawn the previous one yet)."""
        with self.lock:
            out = (self.session if session else None, self.points, self.progress)
            self.points = []
            if session:
                self.session = None
            return out


def _fit_steps(fitter, box: _Mailbox, job, running: threading.Event, on_park) -> None:
    """Step ``fitter`` until it finishes or ``job`` is cancelled (Stop), waiting while
    ``running`` is clear (Pause); the last weights reached are always left in ``box``."""
    last_snapshot = 0.0
    progress = None
    try:
        while not job.cancelled:
            if not running.is_set():
                on_park()
                running.wait()  # Resume and Stop both set it
                continue
            progress = fitter.step()
            point = (progress.step, progress.loss, progress.max_error)
            now = time.monotonic()
            snapshot = fitter.session() if progress.finished or now - last_snapshot >= FRAME_S else None
            with box.lock:
                box.points.append(point)
                box.progress = progress
                if snapshot is not None:
                    box.session = snapshot
            if snapshot is not None:
                last_snapshot = now
            if progress.finished:
                break
    finally:
        if progress is None or not progress.finished:
            final = fitter.session()
            with box.lock:
                box.session = final


class FitRunner(QObject):
    progressed = Signal(object)
    finished = Signal(object)
    state_changed = Signal(str)
    parked = Signal()

    def __init__(self, document, parent=None):
        super().__init__(parent)
        self.document = document
        self.history: list[tuple[int, float, float]] = []
        self.last = None  # the newest FitProgress
        self.fitter = None
        self.message = ""
        self._gui = GuiThread(self)
        self._jobs = JobRunner("attnexplorer-fit", self._gui.post)
        self._box: _Mailbox | None = None
        self._live = None
        self._running = threading.Event()
        self._worker_done = False
        self._error: str | None = None
        self._timer = QTimer(self)
        self._timer.setInterval(int(FRAME_S * 1000))
        self._timer.timeout.connect(self._on_frame)
        self.state = "idle"

    @property
    def running(self) -> bool:
        return self._box is not None

    def start(self, fitter, text: str) -> None:
        """Start ``fitter`` on the worker thread; the fit is one undo step named ``text``."""
        if self._box is not None:
            raise RuntimeError("a fit is already running")
        self.fitter = fitter
        self.history = []
        self.last = None
        self.message = ""
        self._box = box = _Mailbox()
        self._live = self.document.live_edit(text)
        self._worker_done, self._error = False, None
        self._running.set()
        running, post = self._running, self._gui.post
        park = lambda: post(self._on_parked)  # noqa: E731 - posted from the worker
        self._jobs.submit(lambda job: _fit_steps(fitter, box, job, running, park), self._on_worker_done,
                          self._on_worker_failed)
        self._timer.start()
        self._set_state("running")

    def pause(self) -> None:
        if self._box is not None and self.state == "running":
            self._running.clear()
            self._set_state("paused")

    def resume(self) -> None:
        if self._box is not None and self.state == "paused":
            self._running.set()
            self._set_state("running")

    def stop(self) -> None:
        """Stop after the current step; the weights reached stay (shown by the next frame)."""
        if self._box is not None:
            self._jobs.stop()
            self._running.set()

    def wait(self, timeout_s: float = 30.0) -> bool:
        """Run the event loop until the fit has finished and the window shows its last
        weights (the bench, tests); False when ``timeout_s`` passes first."""
        end = time.monotonic() + timeout_s
        if not wait_for(self.finished, lambda: self._box is None, timeout_s):
            return False
        return self.document.compute.wait_idle(max(0.0, end - time.monotonic()))

    def shutdown(self) -> None:
        """Stop and join the worker (the window is closing); nothing more is shown."""
        if self._box is not None:
            self._jobs.cancel()
            self._running.set()
            self._jobs.wait(10)
            self._box = None
            self._timer.stop()
            self._set_state("idle")
        self._jobs.shutdown()

    # -- the GUI side ------------------------------------------------------------------------
    def _set_state(self, state: str) -> None:
        if state != self.state:
            self.state = state
            self.state_changed.emit(state)

    def _on_parked(self) -> None:
        if self._box is not None and self.state == "paused":
            self._on_frame()  # what the worker made before it stopped is shown now
            self.parked.emit()

    def _on_worker_done(self, _result) -> None:
        self._worker_done = True

    def _on_worker_failed(self, err: BaseException) -> None:
        # A torch failure must end the fit, not the thread silently.
        text = str(err).strip()
        self._error = f"the fit failed: {text.splitlines()[0] if text else type(err).__name__}"
        self._worker_done = True

    def _on_frame(self) -> None:
        if self._box is None:
            return
        # A new snapshot only once the previous one's result is drawn: while the compute
        # thread is busy, showing another would only queue work (and table updates) that the
        # next snapshot replaces. The fit's final weights wait their turn the same way.
        final = self._worker_done
        session, points, progress = self._box.take(session=not self.document.compute.computing)
        if final and session is None and self._box.session is not None:
            final = False  # the last snapshot is still to be shown: finish on a later frame
        self.history.extend(points)
        if session is not None and not self._live.show(session):
            if not final:
                # Something else changed the session: the fit ends where it was last shown.
                self.message = "the fit stopped: the session was changed while it ran"
                self.stop()
        if progress is not None:
            self.last = progress
            self.progressed.emit(progress)
        if final:
            self._finish()

    def _finish(self) -> None:
        self._timer.stop()
        self._box = None
        progress = self.last
        if self._error:
            self.message = self._error
        elif not self.message:
            if progress is not None and progress.finished:
                self.message = progress.message
            else:
                step = progress.step if progress is not None else 0
                self.message = f"stopped at step {step}; the weights reached are kept"
        self._set_state("idle")
        self.finished.emit(progress)
