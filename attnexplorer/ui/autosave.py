"""Autosave: unsaved work reaches a recovery file within seconds, however the edits come.

Each window owns one recovery file in the data folder (``settings.data_dir()``) and holds an
OS lock beside it while it has one; ``io/recovery.py`` describes the files and does the
Qt-free part (reading, finding orphans, claiming, setting aside). When to write is
``app/autosave.py``'s ``WriteClock`` (a change is in the file within 5 s however edits come);
this module runs its timer and the writes.

The file is written atomically (a temporary file in the same folder, fsync, rename), so a
kill in the middle of a write leaves the previous recovery file, never half of one. A normal
save or a discard removes it (``Autosaver.discard()``); restoring an orphan moves that file
into this window's own slot (``take_over``), so the restored work is never without a file.

A big session (thousands of tokens) takes a noticeable fraction of a second to serialise, so
the timer's write of one runs on a background thread: the session is immutable, so the thread
can read it while the person goes on working (``app.jobs.JobRunner``, answers on the GUI
thread). ``write_now()`` stays synchronous.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QObject, QTimer, Signal

from ..app.autosave import (  # noqa: F401 - the tests read the timing here
    DEFAULT_DELAY_MS, LATENCY_MS, MAX_DELAY_MS, MIN_DEADLINE_MS, WriteClock)
from ..app.jobs import JobRunner
from ..core.errors import AttnExplorerError
from ..core.inputs.session import Session
from ..io import recovery as files
from ..io.recovery import (  # noqa: F401 - the window and the tests use them from here
    Recovery, find_recoveries, read_recovery, remove_recovery, scan_recoveries, write_recovery)
from . import settings as app_settings
from .gui_thread import GuiThread

# Sessions with more numbers than this are written off the GUI thread (a few ms of JSON; at
# 64 K numbers a write took 20 ms on an idle machine and 40 ms under load, a visible stall
# every few seconds of a fit that changes the session on every frame).
BACKGROUND_NUMBERS = 8 * 1024
# While a background write is still running, look again this often.
_BUSY_RETRY_MS = 50
# A scan by another window holds a lock for a moment: try this many times before giving up.
_LOCK_TRIES = 5


class Autosaver(QObject):
    """Writes this window's recovery file a moment after changes (see the module's timing).

    The owner calls ``schedule()`` on every change while the work is unsaved and
    ``discard()`` after a save, a discard or when the window closes normally. ``now`` is the
    monotonic clock ``schedule()`` reads (the tests play edits seconds apart through their own).
    """

    written = Signal(object)  # the recovery file's Path
    failed = Signal(str)  # why a write failed (the window shows it in the status bar)

    def __init__(self, document, original_path=lambda: None, directory: Path | None = None,
                 delay_ms: int | None = None, max_delay_ms: int = MAX_DELAY_MS,
                 now: Callable[[], float] = time.monotonic, parent=None):
        super().__init__(parent)
        self._now = now
        self._document = document
        self._original_path = original_path
        self._directory = Path(directory) if directory is not None else app_settings.data_dir()
        self.owner = files.new_owner_id()
        self.file = files.slot_file(self._directory, self.owner)
        self._lock = files.owner_lock(self._directory, self.owner)
        self.last_error: str | None = None
        # None: DEFAULT_DELAY_MS as it is when the window is made (tests shorten it there).
        self.clock = WriteClock(DEFAULT_DELAY_MS if delay_ms is None else delay_ms, max_delay_ms)
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.timeout.connect(self._on_timeout)
        # Serialises writes and discards: a discard waits for a write in flight, and a write
        # that was overtaken by a discard leaves no file behind.
        self._io_lock = threading.Lock()
        self._generation = 0
        self._writer = JobRunner("attnexplorer-autosave", GuiThread(self).post)

    @property
    def directory(self) -> Path:
        """The data folder this window's recovery files live in."""
        return self._directory

    @property
    def lock(self):
        """The OS lock this window holds beside its recovery file (it dies with the process)."""
        return self._lock

    @property
    def pending(self) -> bool:
        return self._timer.isActive()

    @property
    def due_in_ms(self) -> int | None:
        """How long until the pending write starts (0: at the next turn of the event loop);
        None when none is pending."""
        return self._timer.remainingTime() if self._timer.isActive() else None

    @property
    def writing(self) -> bool:
        """Whether a background write is running now (or its answer is on its way)."""
        return self._writer.busy

    def schedule(self) -> None:
        """Note a change: written ``delay_ms`` after the last of a burst, and at the latest
        ``deadline_ms()`` after the first change not yet written."""
        now = self._now()
        self._timer.start(max(0, round((self.clock.change(now) - now) * 1000)))

    def deadline_ms(self) -> float:
        """See ``WriteClock.deadline_ms``."""
        return self.clock.deadline_ms()

    def write_now(self) -> bool:
        """Write the document's session now. A failure is remembered, never raised: autosave
        must not interrupt the person working (the status bar can show ``last_error``)."""
        self._timer.stop()
        self.clock.writing()
        with self._io_lock:
            error = self._write(self._document.session, self._original_path())
        return self._report(error)

    def wait(self, timeout_s: float = 30.0) -> bool:
        """Wait for a background write in flight (closing the window); False on time-out."""
        return self._writer.wait(timeout_s)

    def _take_lock(self) -> None:
        """Hold this window's lock (before any file of it exists); OSError when impossible."""
        self._directory.mkdir(parents=True, exist_ok=True)
        for attempt in range(_LOCK_TRIES):
            if self._lock.acquire():
                return
            time.sleep(0.01 * (attempt + 1))  # another window's scan holds it for a moment
        raise OSError(f"cannot lock {self._lock.path}")

    def _write(self, session: Session, original: Path | None) -> str | None:
        try:
            self._take_lock()
            start = time.perf_counter()
            write_recovery(self.file, session, original)
            self.clock.wrote((time.perf_counter() - start) * 1000)
        except (OSError, AttnExplorerError) as err:
            return f"autosave failed: {err}"
        return None

    def _report(self, error: str | None) -> bool:
        self.last_error = error
        if error is not None:
            self.failed.emit(error)
            return False
        self.written.emit(self.file)
        return True

    def _on_timeout(self) -> None:
        if self._writer.busy:
            self._timer.start(_BUSY_RETRY_MS)  # the previous write is still going
            return
        session = self._document.session
        if session.embeddings.size + 3 * session.w_query.size < BACKGROUND_NUMBERS:
            self.write_now()
            return
        # The lock is taken here, before the thread starts, so discard() sees it held.
        try:
            self._take_lock()
        except OSError as err:
            self._report(f"autosave failed: {err}")
            return
        self.clock.writing()  # changes from now on are not in this snapshot
        generation, original = self._generation, self._original_path()

        def run(_job):
            with self._io_lock:
                if generation != self._generation:
                    return None  # discarded (saved, closed) while waiting: nothing to keep
                return self._write(session, original) or ""

        # The answer comes on the GUI thread, and not at all once the window is gone.
        self._writer.submit(run, lambda error: error is not None and self._report(error or None))

    # -- taking over what a crashed window left -------------------------------------------
    def claim(self, recovery: Recovery) -> Recovery | None:
        """Take an orphan over before offering it, so that no other window can offer it too
        and, if this window dies while asking, the next start offers it again. The recovery
        under its new name; None when another window took it first or it cannot be moved
        (then ``failed`` says why)."""
        try:
            self._take_lock()
            return files.claim(recovery, self.owner)
        except OSError as err:
            self._report(f"cannot take over {recovery.file}: {err.strerror or err}")
            return None

    def take_over(self, recovery: Recovery) -> None:
        """Make a claimed recovery file this window's own (one rename, replacing whatever
        unsaved work the window had): restored work is recoverable from the first moment."""
        self._timer.stop()
        with self._io_lock:
            self._generation += 1  # a write of the old session still queued must not land
            try:
                self._take_lock()
                os.replace(recovery.file, self.file)
            except OSError as err:
                self._report(f"autosave failed: {err}")
                return
        self.clock.writing()

    def discard(self) -> None:
        """Stop any pending write and remove this window's recovery file."""
        self._timer.stop()
        self.clock.writing()
        with self._io_lock:
            self._generation += 1
            self._discard_locked()

    def _discard_locked(self) -> None:
        # The file goes first: released first, the lock would let another window's scan take
        # this live window's file for an orphan.
        remove_recovery(self.file)
        self._lock.release(remove=True)
