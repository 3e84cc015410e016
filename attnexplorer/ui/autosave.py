"""Autosave: unsaved work reaches a recovery file within seconds, however the edits come.

Each window owns one recovery file in the data folder (``settings.data_dir()``) and holds an
OS lock beside it while it has one; ``io/recovery.py`` describes the files and does the
Qt-free part (reading, finding orphans, claiming, setting aside). This module is the timing.

When is it written? A change starts a short countdown (``delay_ms``, 3 s) that each further
change restarts, so a burst of edits is written once; but a write starts no later than a
deadline after the first change that is not yet in the file, so steady editing cannot
postpone it. Every change is to be in the file within ``LATENCY_MS`` (5 s): the deadline is
4 s, shortened for a session whose last write took long (1.5 times that write is left for the
next one: a 4,096-token session takes about a second).

The file is written atomically (a temporary file in the same folder, fsync, rename), so a
kill in the middle of a write leaves the previous recovery file, never half of one. A normal
save or a discard removes it (``Autosaver.discard()``); restoring an orphan moves that file
into this window's own slot (``take_over``), so the restored work is never without a file.

A big session (thousands of tokens) takes a noticeable fraction of a second to serialise, so
the timer's write of one runs on a background thread: the session is immutable, so the thread
can read it while the person goes on working. ``write_now()`` stays synchronous.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import shiboken6
from PySide6.QtCore import QObject, QTimer, Signal

from ..core.errors import AttnExplorerError
from ..core.session import Session
from ..io import recovery as files
from ..io.recovery import (  # noqa: F401 - the window and the tests use them from here
    Recovery, find_recoveries, read_recovery, remove_recovery, scan_recoveries, write_recovery)
from . import settings as app_settings

DEFAULT_DELAY_MS = 3000
# A change is in the recovery file within this, however the edits keep coming...
LATENCY_MS = 5000
# ...so the first unwritten change waits at most this long for its write to start (less when
# writes take long, never less than MIN_DEADLINE_MS).
MAX_DELAY_MS = 4000
MIN_DEADLINE_MS = 500
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
    ``discard()`` after a save, a discard or when the window closes normally.
    """

    written = Signal(object)  # the recovery file's Path
    failed = Signal(str)  # why a write failed (the window shows it in the status bar)
    _async_done = Signal(object)  # error text or None, from the background writer

    def __init__(self, document, original_path=lambda: None, directory: Path | None = None,
                 delay_ms: int | None = None, max_delay_ms: int = MAX_DELAY_MS, parent=None):
        super().__init__(parent)
        self._document = document
        self._original_path = original_path
        self._directory = Path(directory) if directory is not None else app_settings.data_dir()
        self.owner = files.new_owner_id()
        self.file = files.slot_file(self._directory, self.owner)
        self._lock = files.owner_lock(self._directory, self.owner)
        self.last_error: str | None = None
        # None: DEFAULT_DELAY_MS as it is when the window is made (tests shorten it there).
        self._delay_ms = DEFAULT_DELAY_MS if delay_ms is None else max(0, int(delay_ms))
        self._max_delay_ms = max(0, int(max_delay_ms))
        # When the oldest change not yet handed to a write happened (time.monotonic), or None.
        self._first_unwritten: float | None = None
        self._last_write_ms = 0.0  # how long the last write took (set by the writing thread)
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.timeout.connect(self._on_timeout)
        # Serialises writes and discards: a discard waits for a write in flight, and a write
        # that was overtaken by a discard leaves no file behind.
        self._io_lock = threading.Lock()
        self._generation = 0
        self._thread: threading.Thread | None = None
        self._async_done.connect(self._on_async_done)

    @property
    def directory(self) -> Path:
        """The data folder this window's recovery files live in."""
        return self._directory

    @property
    def pending(self) -> bool:
        return self._timer.isActive()

    @property
    def writing(self) -> bool:
        """Whether a background write is running now."""
        return self._thread is not None and self._thread.is_alive()

    def schedule(self) -> None:
        """Note a change: written ``delay_ms`` after the last of a burst, and at the latest
        ``deadline_ms()`` after the first change not yet written."""
        now = time.monotonic()
        if self._first_unwritten is None:
            self._first_unwritten = now
        due = min(now + self._delay_ms / 1000, self._first_unwritten + self.deadline_ms() / 1000)
        self._timer.start(max(0, round((due - now) * 1000)))

    def deadline_ms(self) -> float:
        """How long the first unwritten change may wait for its write to start: what is left
        of LATENCY_MS after the write (1 s, or 1.5 times the last write when that is longer)."""
        room = max(1000.0, 1.5 * self._last_write_ms)
        return max(MIN_DEADLINE_MS, min(self._max_delay_ms, LATENCY_MS - room))

    def write_now(self) -> bool:
        """Write the document's session now. A failure is remembered, never raised: autosave
        must not interrupt the person working (the status bar can show ``last_error``)."""
        self._timer.stop()
        self._first_unwritten = None
        with self._io_lock:
            error = self._write(self._document.session, self._original_path())
        return self._report(error)

    def wait(self, timeout_s: float = 30.0) -> None:
        """Wait for a background write in flight (tests, and closing the window)."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout_s)

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
            self._last_write_ms = (time.perf_counter() - start) * 1000
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
        if self._thread is not None and self._thread.is_alive():
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
        self._first_unwritten = None  # changes from now on are not in this snapshot
        generation, original = self._generation, self._original_path()

        def run():
            with self._io_lock:
                if generation != self._generation:
                    return  # discarded (saved, closed) while waiting: nothing to keep
                error = self._write(session, original)
            # The window (and this object) may have been closed meanwhile: emitting from a
            # deleted QObject crashes, so only a live one hears back.
            if shiboken6.isValid(self):
                self._async_done.emit(error)

        self._thread = threading.Thread(target=run, name="attnexplorer-autosave", daemon=True)
        self._thread.start()

    def _on_async_done(self, error) -> None:
        self._report(error)

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
        self._first_unwritten = None

    def discard(self) -> None:
        """Stop any pending write and remove this window's recovery file."""
        self._timer.stop()
        self._first_unwritten = None
        with self._io_lock:
            self._generation += 1
            self._discard_locked()

    def _discard_locked(self) -> None:
        # The file goes first: released first, the lock would let another window's scan take
        # this live window's file for an orphan.
        remove_recovery(self.file)
        self._lock.release(remove=True)
