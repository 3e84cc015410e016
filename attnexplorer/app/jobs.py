"""One way to run work off the GUI thread: ``JobRunner``.

Every background task of the app goes through it: the compute of a session, a fit, opening a
model, an autosave write. A runner owns ONE worker thread, started on the first job and
stopped once (``shutdown()``, or when the runner is collected, or at interpreter exit; a worker
still in a step that cannot stop early, such as torch's import, is joined before the exit):

- **supersede by generation**: ``submit`` returns a ``Job`` numbered one higher than the last;
  a job submitted while another waits replaces the waiting one (it never runs), and only the
  newest job's answers are delivered: an older one's result is dropped;
- **a cancel token**: ``job.cancelled`` turns True when a newer job is submitted, ``cancel()``
  or ``stop()`` is called or the runner shuts down; long work polls it (``core/compute/long`` stops at
  its next block of rows, a model load at its next layer, a fit after its step). A superseded
  or cancelled job's answer is dropped; a stopped one still answers (a fit stopped part way
  keeps the weights reached);
- **throttled progress**: ``job.progress(...)`` from the worker reaches ``on_progress`` at most
  every ``progress_s`` (a few times a second, never once per block of rows); ``job.progress_due()``
  says beforehand whether a report would go, so a costly one is made only when it does;
- **done/failed on the app's thread**: answers are handed to ``post`` (a thread-safe "run this
  on the app's thread at its next turn"); ``ui/gui_thread.py`` posts into the Qt event loop,
  and ``CallQueue`` below is the Qt-free one (tests, scripts);
- **state kept between jobs**: ``runner.state`` is a dict that lives as long as the runner and
  is read and written only by its jobs, on the worker (the models opened so far; a generation
  cache);
- one job at a time: two computes never overlap (the engine patches cached device weights in
  place).

Why not superqt's ``thread_worker`` (napari's choice): it is Qt (this floor, ``app/``, must
import no Qt and be tested without it), it starts a new QRunnable per call on the global
thread pool, so two jobs can overlap and nothing can be kept on "its" thread between calls,
and it has no notion of a newer request superseding an older one. What we need is small: a
thread, a one-place queue and a generation counter, here in plain ``threading``.
"""

from __future__ import annotations

import atexit
import os
import queue
import sys
import threading
import time
import weakref
from typing import Any, Callable

from psygnal import Signal

Post = Callable[[Callable[[], None]], None]


class CallQueue:
    """A Qt-free ``post``: calls queued from any thread, run by ``run_pending``/``run_until``
    on the thread that owns the queue (tests drive it like an event loop)."""

    def __init__(self):
        self._calls: queue.SimpleQueue = queue.SimpleQueue()

    def post(self, call: Callable[[], None]) -> None:
        self._calls.put(call)

    def run_pending(self) -> int:
        """Run the calls queued so far (and those they queue); how many ran."""
        ran = 0
        while True:
            try:
                call = self._calls.get_nowait()
            except queue.Empty:
                return ran
            call()
            ran += 1

    def run_until(self, done: Callable[[], bool], timeout_s: float = 10.0) -> bool:
        """Run queued calls as they arrive until ``done()``; False when ``timeout_s`` passes
        first. It sleeps on the queue: no busy-wait."""
        end = time.monotonic() + timeout_s
        self.run_pending()
        while not done():
            left = end - time.monotonic()
            if left <= 0:
                return False
            try:
                call = self._calls.get(timeout=left)
            except queue.Empty:
                return False
            call()
        return True


class Job:
    """One request to a ``JobRunner``: its generation, its cancel token, its progress."""

    def __init__(self, shared: "_Shared", generation: int, work, reports_progress: bool):
        self.generation = generation
        self._shared = shared
        self._work = work
        # The callbacks stay with the runner: this job is held by the worker and by answers
        # queued for the app's thread, and must not keep the runner's owner alive.
        self._reports_progress = reports_progress
        self._cancel = threading.Event()
        self._last_progress: float | None = None  # the first report always goes

    @property
    def cancelled(self) -> bool:
        """True once a newer job was submitted, ``cancel()`` was called or the runner stops."""
        shared = self._shared
        return self._cancel.is_set() or shared.stopping or shared.newest != self.generation

    def progress_due(self) -> bool:
        """Whether a report made now would reach ``on_progress`` (not dropped by the throttle):
        a worker whose report is costly to make asks first and makes only the ones that go."""
        if not self._reports_progress:
            return False
        return self._last_progress is None or time.monotonic() - self._last_progress >= self._shared.progress_s

    def progress(self, *args: Any) -> None:
        """Report progress (from the worker): ``on_progress(*args)`` on the app's thread, at
        most every ``progress_s``; reports in between are dropped."""
        if not self._reports_progress:
            return
        now = time.monotonic()
        if self._last_progress is not None and now - self._last_progress < self._shared.progress_s:
            return
        self._last_progress = now
        self._shared.post(self._shared.on_app_thread("_progressed", self, args))


def lower_priority(nice: int) -> bool:
    """Lower the calling thread's scheduling priority by ``nice`` (Linux, where a thread has a
    nice value of its own; elsewhere nothing): True when done.

    The threads torch starts for the calling thread's parallel work (OpenMP's team) are made
    after this and inherit it. A window's background compute then yields a core to the GUI
    thread at once: at an equal priority its two torch threads kept both of a 2-core
    machine's cores, and the GUI thread shared one with them, taking about twice its own
    processor time to finish a stretch of work (the 16,384-token window's longest block
    while computing, ``bench/long_window.py``: 34 ms for 16 ms of GUI work on a quiet machine).
    It changes nothing while a core is free."""
    if not sys.platform.startswith("linux") or nice <= 0:
        return False
    try:
        me = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, me, min(19, os.getpriority(os.PRIO_PROCESS, me) + nice))
    except (OSError, AttributeError):
        return False
    return True


class _Shared:
    """What the worker thread and the runner share. The thread holds this, not the runner,
    so a runner dropped without ``shutdown()`` is collected and its finaliser stops the thread."""

    def __init__(self, name: str, post: Post, progress_s: float, runner, nice: int = 0):
        self.name = name
        self.nice = nice
        self.post = post
        self.progress_s = progress_s
        self.runner = weakref.ref(runner)
        self.lock = threading.Condition()
        self.pending: Job | None = None
        self.running: Job | None = None
        self.newest = 0
        self.stopping = False
        self.state: dict = {}

    def on_app_thread(self, method: str, *args):
        """A call of the runner's ``method(*args)``, if the runner still exists when it runs."""
        runner = self.runner

        def call():
            owner = runner()
            if owner is not None:
                getattr(owner, method)(*args)

        return call

    def loop(self) -> None:
        if self.nice:
            lower_priority(self.nice)
        while True:
            with self.lock:
                while self.pending is None and not self.stopping:
                    self.lock.wait()
                if self.stopping:
                    return
                job, self.pending = self.pending, None
                self.running = job
            result, error = None, None
            try:
                result = job._work(job)
            except BaseException as err:  # noqa: BLE001 - any failure is an answer, never the thread's end
                error = err
            with self.lock:
                self.running = None
                self.lock.notify_all()
            self.post(self.on_app_thread("_finished", job, result, error))
            # Hold nothing while waiting: a job's callbacks hold its owner, which must stay
            # collectable (its finaliser stops this thread).
            job = result = error = None


# Workers still in a step their cancel token cannot stop (torch's import, a model read by
# transformers) when their runner shut down: joined before the interpreter exits.
_LEFT_RUNNING: "weakref.WeakSet[threading.Thread]" = weakref.WeakSet()
# How long the interpreter's exit waits for them (an import takes seconds, never minutes).
EXIT_WAIT_S = 120.0


def _stop(shared: _Shared, thread: threading.Thread | None, timeout_s: float) -> None:
    with shared.lock:
        shared.stopping = True
        shared.pending = None
        shared.lock.notify_all()
    if thread is not None and thread is not threading.current_thread():
        thread.join(timeout_s)
        if thread.is_alive():
            _LEFT_RUNNING.add(thread)


@atexit.register
def join_left_running(timeout_s: float = EXIT_WAIT_S) -> bool:
    """Wait for workers whose runner shut down while they were in a step that cannot stop
    early (a window closed while torch was still importing: the window's close waits
    ``stop_timeout_s``, the interpreter's exit the rest). Run at exit, so that no worker is
    still running while the interpreter and Qt tear down under it (Qt said "QThread:
    Destroyed while thread is still running"). False if one is still running after
    ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    for thread in list(_LEFT_RUNNING):
        thread.join(max(0.0, deadline - time.monotonic()))
    return not any(thread.is_alive() for thread in _LEFT_RUNNING)


class JobRunner:
    """Runs jobs one at a time on a worker thread of its own (see the module).

    ``settled`` is emitted (on the app's thread) when the last job submitted has been answered
    and nothing waits: an event to wait for, in place of polling ``idle``.
    """

    settled = Signal()

    def __init__(self, name: str, post: Post, progress_s: float = 0.25, stop_timeout_s: float = 10.0,
                 nice: int = 0):
        self.name = name
        # ``nice`` > 0: the worker thread runs at that lower priority (``lower_priority``).
        self._shared = _Shared(name, post, progress_s, self, nice)
        self._thread: threading.Thread | None = None
        self._outstanding = 0  # jobs submitted whose answer has not been handled yet (app thread)
        self._callbacks: tuple = (0, None, None, None)  # the newest job's: generation, done, failed, progress
        self._stop_timeout_s = stop_timeout_s
        self._finalizer = weakref.finalize(self, _stop, self._shared, None, stop_timeout_s)

    # -- reading ------------------------------------------------------------------------
    @property
    def state(self) -> dict:
        """Kept between jobs, for the jobs (on the worker) only."""
        return self._shared.state

    @property
    def progress_s(self) -> float:
        """The least time between two progress reports delivered."""
        return self._shared.progress_s

    @progress_s.setter
    def progress_s(self, seconds: float) -> None:
        self._shared.progress_s = seconds

    @property
    def thread(self) -> threading.Thread | None:
        """The worker thread (None until the first job)."""
        return self._thread

    @property
    def generation(self) -> int:
        """The newest job's generation."""
        return self._shared.newest

    @property
    def busy(self) -> bool:
        """Whether a job runs or waits, or its answer has not been handled yet."""
        return self._outstanding > 0

    @property
    def idle(self) -> bool:
        """Nothing running, nothing waiting, every answer handled."""
        return self._outstanding == 0

    # -- changing -----------------------------------------------------------------------
    def submit(self, work: Callable[[Job], Any], on_done: Callable[[Any], None] | None = None,
               on_failed: Callable[[BaseException], None] | None = None,
               on_progress: Callable[..., None] | None = None) -> Job:
        """Run ``work(job)`` on the worker after the job running now; a job still waiting is
        replaced (superseded). ``on_done(result)`` or ``on_failed(error)`` follow on the app's
        thread, only for the newest job and only if it was not cancelled (``stop()`` leaves
        its answer). After ``shutdown()``
        the job is cancelled at once and never runs."""
        shared = self._shared
        if shared.stopping:  # shut down (a closed window): the job never runs, nothing answers
            job = Job(shared, shared.newest, work, False)
            job._cancel.set()
            return job
        with shared.lock:
            shared.newest += 1
            job = Job(shared, shared.newest, work, on_progress is not None)
            self._callbacks = (job.generation, on_done, on_failed, on_progress)
            if shared.pending is None:
                self._outstanding += 1
            shared.pending = job  # a job still waiting is dropped: it never runs
            shared.lock.notify_all()
        if self._thread is None:
            self._thread = threading.Thread(target=shared.loop, name=self.name, daemon=True)
            self._thread.start()
            self._finalizer.detach()
            self._finalizer = weakref.finalize(self, _stop, shared, self._thread, self._stop_timeout_s)
        return job

    def stop(self) -> None:
        """Ask the job running (and one waiting) to stop early: their token turns cancelled,
        and their answers still come (``cancel()`` drops them)."""
        with self._shared.lock:
            for job in (self._shared.running, self._shared.pending):
                if job is not None:
                    job._cancel.set()

    def supersede(self) -> None:
        """Drop the answers of every job submitted so far (cancelling them); the next one
        submitted runs as usual."""
        with self._shared.lock:
            self._shared.newest += 1
            if self._shared.pending is not None:
                self._shared.pending = None
                self._outstanding -= 1
        if self._outstanding == 0:
            self.settled.emit()

    cancel = supersede

    def wait(self, timeout_s: float = 30.0) -> bool:
        """Block until the worker has no job running or waiting (its answers may still be on
        their way to the app's thread); False when ``timeout_s`` passes first."""
        shared = self._shared
        with shared.lock:
            return shared.lock.wait_for(lambda: shared.running is None and shared.pending is None, timeout_s)

    def shutdown(self) -> None:
        """Cancel what runs, drop what waits and join the thread (idempotent)."""
        self._finalizer()

    # -- answers (app thread) -------------------------------------------------------------
    def _answer(self, job: Job, which: int):
        """The newest job's callback ``which`` (1 done, 2 failed, 3 progress), or None."""
        generation, *calls = self._callbacks
        current = generation == job.generation == self._shared.newest and not self._shared.stopping
        return calls[which - 1] if current else None

    def _progressed(self, job: Job, args) -> None:
        call = self._answer(job, 3)
        if call is not None:
            call(*args)

    def _finished(self, job: Job, result, error) -> None:
        self._outstanding = max(0, self._outstanding - 1)
        call = self._answer(job, 1 if error is None else 2)
        if call is not None:
            call(result if error is None else error)
        if self._outstanding == 0:
            self.settled.emit()
