"""Compute scheduling: the results of a document's session, inline when that is cheapest,
else on a worker (``jobs.JobRunner``). Qt-free; ``ui/compute_runner.py`` exposes it to Qt.

``ComputeRunner`` is the machinery: ``request(session)`` computes the session; a newer request
supersedes one not yet finished, whose result is then dropped, so ``finished`` only ever
carries the result of the newest request and ``failed`` the newest error. One compute runs at
a time: a small CPU session is computed inline (a thread hop would cost more than the compute
and add a frame of lag to a slider drag) unless the worker is busy, in which case it waits.

``DocumentCompute`` is a document's side of it: the result its views draw (every result
carries the session it was computed from, ``result.session``), what the on-screen views need
kept, the device and dtype, the fall-back to the CPU, and the complete result exports ask for.

What is kept: every intermediate, except for a large session (more than ``LARGE_CELLS`` score
cells) or a device other than the CPU, where only ``needs`` (what the on-screen views read) is
kept.
"""

from __future__ import annotations

from typing import Iterable

from psygnal import Signal

from ..core.compute.engine import INTERMEDIATES, STAGE_INTERMEDIATES, AttentionResult, carries, compute
from ..core.errors import AttnExplorerError
from ..core.compute.long.result import compute_any
from ..core.inputs.session import Session
from .jobs import JobRunner, Post

# Below this many score cells (heads × n × n) a CPU compute takes a few milliseconds at most
# (n = 512 with two heads: ~1.5 ms in float32, ~3 ms in float64 on two cores), so it runs
# inline: a thread hop and the wait for its answer would cost more than that and add a frame
# of lag to every step of a slider drag.
INLINE_CELLS = 512 * 512 * 2
# Above this many score cells each n×n intermediate is tens of megabytes (16 MB in float32
# here): only what the on-screen views read is computed and kept.
LARGE_CELLS = 1 << 22
# Seconds between progress reports of a long (streamed) compute.
PROGRESS_S = 0.25
# How much lower the background compute's priority is than the window's (a nice value: at 5 the
# GUI thread weighs three times as much when it shares a core with the compute's threads; more
# would starve the compute when other programs keep the cores busy, while it holds Python's lock).
COMPUTE_NICE = 5


def _compute_on_one_thread(session: Session, device: str, dtype: str, keep, pool: str = "max"):
    """``compute_any`` with one torch thread, for the small computes made inline.

    Waking a second thread for each of a compute's tiny kernels costs more than the arithmetic
    (as in ``core/fit``), and on a machine busy with other work each wake-up can wait a whole
    time slice: an inline compute after a one-cell edit at 16 heads of 512 × 512 took 40 to
    110 ms with two threads on a loaded 2-core machine, about 1 ms with one. torch's thread
    count is the calling thread's own (the worker thread keeps its threads); it is put back.
    """
    import torch

    threads = torch.get_num_threads()
    if threads == 1:
        return compute_any(session, device=device, dtype=dtype, keep=keep, pool=pool)
    torch.set_num_threads(1)
    try:
        return compute_any(session, device=device, dtype=dtype, keep=keep, pool=pool)
    finally:
        torch.set_num_threads(threads)


def failure_text(err: BaseException) -> str:
    """What a failed compute says: the engine's refusal as it is, anything else as a bug."""
    return str(err) if isinstance(err, AttnExplorerError) else f"the engine failed: {err}"


class ComputeRunner:
    finished = Signal(object)  # the AttentionResult of the newest request
    failed = Signal(str)  # why the newest request failed
    progress = Signal(float)  # the fraction done of the newest request's long compute
    # A long compute of the newest request, part way: its session and {matrix: Pooled} so far
    # (the heatmaps fill in as it goes).
    overview_progress = Signal(object, object)
    settled = Signal()  # nothing computing, nothing waiting: the newest answer is out

    def __init__(self, post: Post):
        self.device = "cpu"
        self.dtype = "float32"
        self.needs: frozenset[str] | None = None  # None: everything
        # How a long session's overviews pool cells into pixels ("max" or "mean").
        self.pool = "max"
        # Below the GUI thread's priority: a long compute's torch threads yield a core to the
        # window at once (``lower_priority``); inline computes run on the GUI thread as before.
        self.jobs = JobRunner("attnexplorer-compute", post, PROGRESS_S, nice=COMPUTE_NICE)
        self.jobs.settled.connect(self._on_settled)

    @property
    def computing(self) -> bool:
        """Whether a compute is running on the worker now (or its answer is on its way)."""
        return self.jobs.busy

    @property
    def idle(self) -> bool:
        """Nothing running and nothing waiting."""
        return self.jobs.idle

    def partial(self, session: Session) -> bool:
        """Whether a compute of ``session`` keeps only ``needs``."""
        return self.device != "cpu" or session.heads * session.n * session.n > LARGE_CELLS

    def keep_for(self, session: Session) -> tuple[str, ...] | None:
        """The ``keep`` a compute of ``session`` uses: None (everything) for a small session
        on the CPU, where host arrays share the tensors' memory and keeping costs nothing."""
        if self.needs is None or not self.partial(session):
            return None
        return tuple(name for name in INTERMEDIATES + STAGE_INTERMEDIATES if name in self.needs)

    def request(self, session: Session, background: bool = False) -> None:
        """Compute ``session``; a request not yet finished is superseded. ``background``: on
        the worker whatever the size (a live fit: its training thread keeps a core busy, so
        even a "small" compute takes longer than a frame on the app's thread)."""
        keep = self.keep_for(session)
        device, dtype, pool = self.device, self.dtype, self.pool
        # Inline only while the worker is idle: one compute at a time (the engine patches its
        # cached device weights in place, so two computes must not overlap).
        if (not background and session.heads * session.n * session.n <= INLINE_CELLS and device == "cpu"
                and self.jobs.idle):
            try:
                result = _compute_on_one_thread(session, device, dtype, keep, pool)
            except AttnExplorerError as err:
                self.failed.emit(str(err))
            else:
                self.finished.emit(result)
            self.settled.emit()
            return

        def work(job):
            def progress(done: int, n: int, overviews) -> None:
                if done < n:  # the end is reported with the result
                    # The overviews so far, for the heatmaps to fill in (their arrays are the
                    # pass's own: the rows before ``done`` are final, a view copies those).
                    job.progress(done / n, session, overviews)

            # A long session (over the dense memory budget) goes the streamed way (core/compute/long).
            return compute_any(session, device=device, dtype=dtype, keep=keep, progress=progress,
                               cancelled=lambda: job.cancelled, pool=pool)

        self.jobs.progress_s = PROGRESS_S
        self.jobs.submit(work, self._on_done, lambda err: self.failed.emit(failure_text(err)), self._on_progress)

    def _on_settled(self) -> None:
        self.settled.emit()

    def drop_in_flight(self) -> None:
        """Drop the result of any request not yet finished (a newer result was published)."""
        self.jobs.supersede()

    def _on_progress(self, fraction: float, session: Session, overviews) -> None:
        self.progress.emit(fraction)
        self.overview_progress.emit(session, overviews)

    def _on_done(self, result: AttentionResult) -> None:
        if result.tiled:
            self.progress.emit(1.0)  # the last report said a few % short of it
        self.finished.emit(result)

    def shutdown(self) -> None:
        """Stop the worker thread (idempotent)."""
        self.jobs.shutdown()


class DocumentCompute:
    """The results of a document's session, for its views and its exports.

    ``request`` computes the document's current session (newer requests supersede pending
    ones) and ``result`` is the newest result published (``result_changed``); it may lag the
    session by one edit while a big compute runs, and carries the session it was computed
    from (``result.session``). A failed compute on another device falls back to the CPU
    (``failed`` says why either way; ``last_error`` keeps it until a result is published).

    What is computed: every intermediate, except for a large session (more than
    ``LARGE_CELLS`` score cells) or a device other than the CPU, where only what the
    on-screen views read is kept (``set_needs``, from the window: the union of the visible
    panels' ``needs``); a view that needs more coming on screen recomputes. ``full_result()``
    gives exports a complete result of the current session, computing it then when the
    published one is partial or belongs to an earlier session.

    ``settled`` says that nothing is computing or waiting any more (the newest answer is out):
    the event to wait for.
    """

    result_changed = Signal(object)
    failed = Signal(str)
    settled = Signal()

    def __init__(self, document, post: Post, start: bool = True):
        self._document = document
        self._post = post
        self._result: AttentionResult | None = None
        self.last_compute_ms = 0.0
        # Why the current session has no result (None once one is published): a window made
        # after the document's first compute failed still has to say why it is blank.
        self.last_error: str | None = None
        self._recompute_posted = False
        self.runner = ComputeRunner(post)
        self.runner.finished.connect(self.publish)
        self.runner.failed.connect(self._fail)
        self.runner.progress.connect(self._on_progress)
        self.runner.settled.connect(self._on_settled)
        if not start:
            pass  # the caller requests the first compute (the app: once the window has painted)
        elif self.runner.partial(document.session):
            # A large session waits one turn of the event loop, so that the window can say
            # what is on screen first and the first compute keeps only that.
            self.request_later()
        else:
            self.request()

    # -- reading ----------------------------------------------------------------------
    @property
    def result(self) -> AttentionResult | None:
        """The newest result (it may lag the session by one edit while a big one runs)."""
        return self._result

    @property
    def computing(self) -> bool:
        """Whether a compute is running on the worker thread now."""
        return self.runner.computing

    @property
    def idle(self) -> bool:
        """Nothing computing, nothing waiting, no recompute posted."""
        return self.runner.idle and not self._recompute_posted

    @property
    def device(self) -> str:
        return self.runner.device

    @property
    def dtype(self) -> str:
        return self.runner.dtype

    @property
    def pool(self) -> str:
        return self.runner.pool

    @property
    def needs(self) -> frozenset[str] | None:
        """What the on-screen views read (None: everything); see ``set_needs``."""
        return self.runner.needs

    def keep_for(self, session: Session | None = None) -> tuple[str, ...] | None:
        """The ``keep`` a compute of ``session`` (default: the current one) uses."""
        return self.runner.keep_for(self._document.session if session is None else session)

    def current_result(self) -> AttentionResult | None:
        """The current result when it was computed from the current session, else None (a
        compute is on its way, or the last one failed)."""
        result = self._result
        return result if result is not None and result.session is self._document.session else None

    def full_result(self) -> AttentionResult:
        """A result of the current session with every intermediate, for exports and copies.

        It is the published result when that one belongs to the current session and is
        complete; otherwise the current session is computed here and now, in full (not
        published). It never waits for the worker and never runs a nested event loop, so no
        edit can land in the middle of an export, and the result always carries exactly the
        session being exported (``result.session``). Raises AttnExplorerError when the engine
        refuses the session.
        """
        self._document.flush()  # an edit posted with edit_later is part of what the user sees
        result = self.current_result()
        if result is not None and all(getattr(result, name) is not None for name in INTERMEDIATES):
            return result
        return compute(self._document.session, device=self.device, dtype=self.dtype)

    def complete(self) -> AttentionResult:
        """``full_result()``, also published when it is new (a figure export draws panels
        that are not on screen, and the panels draw the published result)."""
        result = self.full_result()
        if result is not self._result:
            self.runner.drop_in_flight()  # a compute in flight for this same session is now stale
            self.publish(result)
        return result

    # -- changing -----------------------------------------------------------------------
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
        if result is None or result.session is not self._document.session:
            return  # the compute on its way (or the next one) uses the new needs
        if result.tiled:
            return  # a long input's result (core/compute/long) holds the same whatever the needs
        wanted = INTERMEDIATES if new is None else new
        if any(getattr(result, name) is None and carries(result.session, name) for name in wanted):
            self.request_later()  # coalesces a burst of dock changes into one

    def set_options(self, device: str | None = None, dtype: str | None = None) -> None:
        """Compute on ``device`` in ``dtype`` from now on (None: keep), and recompute."""
        if device is not None:
            self.runner.device = device
        if dtype is not None:
            self.runner.dtype = dtype
        self.request()

    def set_pool(self, pool: str) -> None:
        """How a long session's overviews pool cells into pixels ("max" or "mean") from the
        next compute on."""
        self.runner.pool = pool

    def request(self, background: bool = False) -> None:
        """Compute the current session; newer requests supersede pending ones.
        ``background``: on the compute thread whatever the size (see ``ComputeRunner.request``)."""
        self._recompute_posted = False
        self.runner.request(self._document.session, background)

    def request_later(self) -> None:
        """``request()`` at the next turn of the app's loop; several before then make one."""
        if not self._recompute_posted:
            self._recompute_posted = True
            self._post(self._run_posted)

    def settle(self) -> None:
        """Apply what is posted (an edit from ``edit_later``, a recompute) now, so that what
        is left to wait for is the compute in flight (``idle``, ``settled``)."""
        self._document.flush()
        if self._recompute_posted:
            self.request()

    def shutdown(self) -> None:
        """Stop the compute thread (idempotent)."""
        self.runner.shutdown()

    # -- the runner's answers -------------------------------------------------------------
    def publish(self, result: AttentionResult) -> None:
        """Make ``result`` the one the views draw (the runner's answers come here; a test or a
        tool may hand one in too)."""
        self.last_error = None
        self._result = result
        self.last_compute_ms = result.compute_ms
        self.result_changed.emit(result)

    def _run_posted(self) -> None:
        if self._recompute_posted:
            self.request()

    def _on_settled(self) -> None:
        if self.idle:
            self.settled.emit()

    def _on_progress(self, fraction: float) -> None:
        # A long input (core/compute/long) computes for seconds on the worker: say how far it is.
        session = self._document.session
        self._document.message.emit(f"Computing {session.n:,} tokens × {session.heads} heads: "
                                    f"{fraction:.0%} of the rows")

    def _fail(self, error: str) -> None:
        if self.device != "cpu":
            failed = self.device
            self.runner.device = "cpu"
            self.last_error = f"{error}; falling back to the CPU (was {failed})"
            self.failed.emit(self.last_error)
            self.request()
        else:
            self.last_error = error
            self.failed.emit(error)
