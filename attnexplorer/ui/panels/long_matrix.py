"""A long session's heatmap (core/compute/long): what ``MatrixView`` shows of a matrix never made whole.

Three pictures, by how far the view is zoomed in:

- zoomed out, the streamed pass's pooled overview (``pooled_overview``), pooled again by whole
  blocks to the view's pixels; while the pass runs, the rows done so far
  (``PartialMatrix``: the rest is marked as not yet computed);
- zoomed in to at most ``TILE_CELLS`` cells, the exact cells (tiles, on the GUI thread: a few
  milliseconds);
- in between, the region pooled at screen resolution from exact tiles of that region
  (``pooled_region``), made on a worker thread (``RegionWorker``), cancelled when the view
  moves on; the overview (upscaled) stands in until it is there.
"""

from __future__ import annotations

import threading
from typing import Callable

import numpy as np
from PySide6.QtCore import QObject, QTimer, Signal

from ...core.compute.long.pooling import POOLED, Pooled
from ...core.compute.long.tiled import TiledMatrix
from .downsample import block_reduce

# A long session's heatmap computes an exact region of at most this many cells at once (a few
# milliseconds); larger regions are pooled from exact tiles on a worker.
TILE_CELLS = 1 << 19
# Cells of exact tiles made at once while pooling a region (16 MB of float32).
STRIP_CELLS = 1 << 22


def pooled_overview(matrix, fy: int, fx: int, signed: bool, pool: str = "max") -> tuple[np.ndarray, tuple[int, int]]:
    """A long matrix at about ``fy`` × ``fx`` cells per pixel, from its pooled overview: the
    overview's blocks pooled again by whole blocks (a maximum of maxima is the maximum of the
    cells, and so is the largest magnitude; a mean of equal-sized blocks' means is their
    mean, and the last, smaller blocks are weighted as whole ones, a small bias at one edge)."""
    base = matrix.overview
    ky, kx = max(1, -(-fy // base.fy)), max(1, -(-fx // base.fx))
    data = base.data if (ky, kx) == (1, 1) else block_reduce(base.data, ky, kx, signed=signed, pool=pool)
    return data, (base.fy * ky, base.fx * kx)


class PartialMatrix:
    """One head's matrix while the streamed pass is still running: only its pooled overview
    so far (``overview.rows_done`` rows; the pooled rows after them are NaN). Read like a
    ``TiledMatrix`` for its shape and overview; its cells are not known yet (NaN)."""

    ndim = 2

    def __init__(self, pooled: Pooled, head: int, n_keys: int, dtype):
        done = pooled.rows_done // pooled.fy if pooled.rows_done < pooled.n else pooled.data.shape[1]
        data = np.full(pooled.data.shape[1:], np.nan, dtype=pooled.data.dtype)
        # Copied: the worker goes on writing the rows after ``done`` into its array.
        data[:done] = pooled.data[head, :done]
        self.overview = Pooled(pooled.what, pooled.pool, pooled.fy, pooled.fx, pooled.n, data, pooled.rows_done)
        self.what = pooled.what
        self.shape = (pooled.n, n_keys)
        self.dtype = dtype
        self.signed = POOLED[pooled.what][0]

    @property
    def rows_done(self) -> int:
        return self.overview.rows_done

    def __getitem__(self, index):
        rows, cols = index
        shape = [len(range(*s.indices(size))) if isinstance(s, slice) else None
                 for s, size in zip((rows, cols), self.shape)]
        return np.full([k for k in shape if k is not None], np.nan, dtype=self.dtype)

    def __array__(self, dtype=None, copy=None):
        raise TypeError("a long session's matrix is read in tiles, not as a whole array")


def pooled_region(matrix: TiledMatrix, rows: tuple[int, int], cols: tuple[int, int], fy: int, fx: int, pool: str,
                  blocked=None, cancelled: Callable[[], bool] = lambda: False) -> np.ndarray | None:
    """The exact cells ``[r0:r1, c0:c1]`` of ``matrix`` pooled by ``fy`` × ``fx`` blocks (as
    ``block_reduce``), made a strip of rows at a time from exact tiles; None when
    ``cancelled()`` says so between strips. ``blocked``: the mask (sliceable) or None."""
    (r0, r1), (c0, c1) = rows, cols
    strip = max(fy, STRIP_CELLS // max(1, c1 - c0) // fy * fy)
    parts = []
    for a in range(r0, r1, strip):
        if cancelled():
            return None
        b = min(r1, a + strip)
        mask = None if blocked is None else np.asarray(blocked[a:b, c0:c1])
        parts.append(block_reduce(matrix[a:b, c0:c1], fy, fx, signed=matrix.signed, blocked=mask, pool=pool))
    return np.concatenate(parts, axis=0)


class RegionWorker(QObject):
    """Makes pooled regions on one background thread, newest request first.

    ``request(key, job)`` runs ``job(cancelled)`` on the thread; a request made later with the
    same ``key`` (the same view) cancels it. ``done(key, token, image)`` arrives on the GUI
    thread, where the caller checks that ``token`` is still the one it waits for.
    """

    done = Signal(object, object, object)  # key, token, image (None: cancelled or failed)

    def __init__(self):
        super().__init__()
        self._lock = threading.Condition()
        self._jobs: dict = {}  # key → (token, job), the newest per key
        self._newest: dict = {}  # key → token
        self._thread: threading.Thread | None = None

    def request(self, key, token, job: Callable[[Callable[[], bool]], np.ndarray | None]) -> None:
        with self._lock:
            self._jobs[key] = (token, job)
            self._newest[key] = token
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="attnexplorer-zoom", daemon=True)
                self._thread.start()
            self._lock.notify()

    def cancel(self, key) -> None:
        with self._lock:
            self._jobs.pop(key, None)
            self._newest[key] = None

    def _run(self) -> None:
        while True:
            with self._lock:
                if not self._jobs:
                    if not self._lock.wait(timeout=5.0) and not self._jobs:
                        self._thread = None
                        return  # idle: the thread ends, the next request starts another
                    continue
                key, (token, job) = self._jobs.popitem()
            try:
                image = job(lambda key=key, token=token: self._newest.get(key) != token)
            except Exception:  # noqa: BLE001 - a failed region leaves the overview shown
                image = None
            self.done.emit(key, token, image)


class PartialDraws:
    """The heatmaps waiting to draw a long pass's partial overview, drawn one per turn of the
    event loop, in the order they asked.

    Each progress report of the streamed pass reaches every visible heatmap at once. Drawn
    there and then, the three heatmaps' overviews and the paint of all three made one stretch
    of the GUI thread: 26-53 ms of its own processor time at 16,384 tokens (the longest GUI
    block of ``bench/long_window.py``). One a turn, with the paint of the one drawn between,
    the longest stretch is one heatmap's. A heatmap asked again before its turn is drawn once,
    with the newest report (each keeps only the newest).

    The turns are ``TURN_MS`` apart, not 0: a zero-interval timer started in a draw fired in
    the same pass of Qt's event loop as the paint that followed, so two heatmaps' draws and a
    paint were still one block (two draws of 9 and 10 ms of processor time in one 180 ms gap
    of ``bench/long_window.py``'s 1 ms timer, which never got its turn between them). A frame
    apart, the event loop runs its timers and input between two draws; the last of three
    heatmaps shows a report 2 × ``TURN_MS`` later, against 250 ms between reports."""

    # A frame at 60 Hz: time for the draw's paint and every timer that is due before the next.
    TURN_MS = 16

    def __init__(self):
        self._waiting: list = []
        self._timer = QTimer()
        self._timer.setSingleShot(True)
        # The first of a report's draws at the next turn (``ask``), the rest TURN_MS apart.
        self._timer.timeout.connect(self._next)

    def ask(self, panel) -> None:
        """Call ``panel.draw_partial()`` at a turn of its own (once, however often asked)."""
        if panel not in self._waiting:
            self._waiting.append(panel)
        if not self._timer.isActive():
            self._timer.start(0)

    def forget(self, panel) -> None:
        """Drop ``panel``'s turn (it was disposed, or drew a result meanwhile)."""
        if panel in self._waiting:
            self._waiting.remove(panel)

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def _next(self) -> None:
        if not self._waiting:
            return
        panel = self._waiting.pop(0)
        if self._waiting:
            self._timer.start(self.TURN_MS)  # the next one after this one's paint and a frame
        try:
            panel.draw_partial()
        except RuntimeError:  # its widgets were deleted with their window
            pass


_worker: RegionWorker | None = None
_partial_draws: PartialDraws | None = None


def partial_draws() -> PartialDraws:
    """The one queue every long heatmap shares (made on first use, on the GUI thread)."""
    global _partial_draws
    if _partial_draws is None:
        _partial_draws = PartialDraws()
    return _partial_draws


def region_worker() -> RegionWorker:
    """The one worker every long heatmap shares (made on first use, on the GUI thread)."""
    global _worker
    if _worker is None:
        _worker = RegionWorker()
    return _worker
