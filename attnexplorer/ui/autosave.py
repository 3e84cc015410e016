"""Autosave: unsaved work goes to a recovery file a few seconds after each change.

Each running window owns one recovery file, ``recovery-<id>.json`` in the data folder
(``settings.data_dir()``), and holds a ``QLockFile`` beside it (``recovery-<id>.lock``) for
as long as it runs. Qt's lock file records the process id, so after a crash or a kill the
lock is stale and the next launch can tell an orphaned recovery file (offer to restore it)
from one that another running window is still writing (leave it alone). That works the same
on Linux, macOS and Windows, with no pid bookkeeping of our own.

The file is written atomically (a temporary file in the same folder, fsync, rename), so a
kill in the middle of a write leaves the previous recovery file, never half of one. It holds
``{"format": "attnexplorer-recovery", "version": 1, "original_path": str | null,
"saved_at": float (Unix time), "session": <a session file's dict>}``.

A normal save or a discard removes it (``Autosaver.discard()``).

A big session (thousands of tokens) takes a noticeable fraction of a second to serialise, so
the timer's write of one runs on a background thread: the session is immutable, so the thread
can read it while the person goes on working. ``write_now()`` stays synchronous.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import shiboken6
from PySide6.QtCore import QLockFile, QObject, QTimer, Signal

from ..core.errors import AttnExplorerError
from ..core.session import Session
from . import settings as app_settings

RECOVERY_FORMAT = "attnexplorer-recovery"
RECOVERY_VERSION = 1
DEFAULT_DELAY_MS = 3000
# Sessions with more numbers than this are written off the GUI thread (about 20 ms of JSON).
BACKGROUND_NUMBERS = 64 * 1024


def default_delay_ms() -> int:
    """3 s, or ``ATTNEXPLORER_AUTOSAVE_MS`` (tests shorten it; documented there only)."""
    try:
        return max(0, int(os.environ.get("ATTNEXPLORER_AUTOSAVE_MS", DEFAULT_DELAY_MS)))
    except ValueError:
        return DEFAULT_DELAY_MS


@dataclass(frozen=True)
class Recovery:
    """An orphaned recovery file found at start-up."""

    file: Path
    session: Session
    original_path: Path | None
    saved_at: float

    def describe(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.saved_at))
        source = str(self.original_path) if self.original_path else "an unsaved session"
        return f"Unsaved changes to {source} ({len(self.session.tokens)} tokens), autosaved {when}."


def _lock_for(file: Path) -> QLockFile:
    lock = QLockFile(str(file.with_suffix(".lock")))
    # 0 = never stale by age: a window may run for hours. Qt still treats the lock as stale
    # when the process that took it is gone, which is exactly "crashed or killed".
    lock.setStaleLockTime(0)
    return lock


def write_recovery(file: Path, session: Session, original_path: Path | None) -> None:
    """Write a recovery file atomically (temporary file, fsync, rename); WriteError on failure."""
    from ..io.atomic import atomic_write_text
    from ..io.session_file import session_to_dict

    payload = {
        "format": RECOVERY_FORMAT,
        "version": RECOVERY_VERSION,
        "original_path": str(original_path) if original_path else None,
        "saved_at": time.time(),
        "session": session_to_dict(session),
    }
    file.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(file, json.dumps(payload))


def read_recovery(file: Path) -> Recovery:
    """Parse one recovery file; raises AttnExplorerError (or OSError) when it is unusable."""
    from ..io.session_file import session_from_dict

    try:
        payload = json.loads(Path(file).read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise AttnExplorerError(f"{file}: not a readable recovery file ({err})") from None
    if not isinstance(payload, dict) or payload.get("format") != RECOVERY_FORMAT:
        raise AttnExplorerError(f"{file}: not an attnexplorer recovery file")
    if payload.get("version") != RECOVERY_VERSION:
        raise AttnExplorerError(f"{file}: recovery file version {payload.get('version')!r} is not supported")
    session = session_from_dict(payload.get("session"))
    original = payload.get("original_path")
    saved_at = payload.get("saved_at")
    return Recovery(
        file=Path(file),
        session=session,
        original_path=Path(original) if isinstance(original, str) and original else None,
        saved_at=float(saved_at) if isinstance(saved_at, (int, float)) else Path(file).stat().st_mtime,
    )


def find_recoveries(directory: Path | None = None) -> list[Recovery]:
    """Recovery files left by windows that are no longer running, newest first.

    Files still locked by a live window are skipped, as are unreadable ones (left on disk,
    so nothing is deleted that a person might still want to rescue by hand).
    """
    directory = Path(directory) if directory is not None else app_settings.data_dir()
    if not directory.is_dir():
        return []
    found = []
    for file in sorted(directory.glob("recovery-*.json")):
        lock = _lock_for(file)
        if not lock.tryLock(0):
            continue  # a running window owns it
        try:
            found.append(read_recovery(file))
        except (AttnExplorerError, OSError):
            pass
        finally:
            lock.unlock()
    return sorted(found, key=lambda r: r.saved_at, reverse=True)


def remove_recovery(file: Path) -> None:
    """Delete a recovery file and its lock (restored or declined)."""
    for path in (Path(file), Path(file).with_suffix(".lock")):
        try:
            path.unlink()
        except FileNotFoundError:
            pass


class Autosaver(QObject):
    """Writes this window's recovery file ``delay_ms`` after the last change.

    The owner calls ``schedule()`` on every change while the work is unsaved and
    ``discard()`` after a save, a discard or when the window closes normally.
    """

    written = Signal(object)  # the recovery file's Path
    failed = Signal(str)  # why a write failed (the window shows it in the status bar)
    _async_done = Signal(object)  # error text or None, from the background writer

    def __init__(self, document, original_path=lambda: None, directory: Path | None = None,
                 delay_ms: int | None = None, parent=None):
        super().__init__(parent)
        self._document = document
        self._original_path = original_path
        self._directory = Path(directory) if directory is not None else app_settings.data_dir()
        self.file = self._directory / f"recovery-{uuid.uuid4().hex[:12]}.json"
        self._lock: QLockFile | None = None
        self.last_error: str | None = None
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(default_delay_ms() if delay_ms is None else delay_ms)
        self._timer.timeout.connect(self._on_timeout)
        # Serialises writes and discards: a discard waits for a write in flight, and a write
        # that was overtaken by a discard leaves no file behind.
        self._io_lock = threading.Lock()
        self._generation = 0
        self._thread: threading.Thread | None = None
        self._async_done.connect(self._on_async_done)

    @property
    def pending(self) -> bool:
        return self._timer.isActive()

    def schedule(self) -> None:
        """(Re)start the countdown: a burst of edits is written once, after it settles."""
        self._timer.start()

    def write_now(self) -> bool:
        """Write the document's session now. A failure is remembered, never raised: autosave
        must not interrupt the person working (the status bar can show ``last_error``)."""
        self._timer.stop()
        with self._io_lock:
            error = self._write(self._document.session, self._original_path())
        return self._report(error)

    def wait(self, timeout_s: float = 30.0) -> None:
        """Wait for a background write in flight (tests, and closing the window)."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout_s)

    def _write(self, session: Session, original: Path | None) -> str | None:
        try:
            self._directory.mkdir(parents=True, exist_ok=True)
            if self._lock is None:
                lock = _lock_for(self.file)
                if not lock.tryLock(0):
                    raise OSError(f"cannot lock {lock.fileName()}")
                self._lock = lock
            write_recovery(self.file, session, original)
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
            self._timer.start()  # the previous write is still going: try again later
            return
        session = self._document.session
        if session.embeddings.size + 3 * session.w_query.size < BACKGROUND_NUMBERS:
            self.write_now()
            return
        # The lock file is taken here, on the GUI thread that owns it, before the thread starts.
        if self._lock is None:
            lock = _lock_for(self.file)
            self._directory.mkdir(parents=True, exist_ok=True)
            if not lock.tryLock(0):
                self._report(f"autosave failed: cannot lock {lock.fileName()}")
                return
            self._lock = lock
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

    def discard(self) -> None:
        """Stop any pending write and remove this window's recovery file."""
        self._timer.stop()
        with self._io_lock:
            self._generation += 1
            self._discard_locked()

    def _discard_locked(self) -> None:
        if self._lock is not None:
            self._lock.unlock()
            self._lock = None
        remove_recovery(self.file)
