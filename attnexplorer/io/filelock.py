"""Locks that tell "a live process is using this" from "its process is gone".

The lock is the operating system's own: ``flock`` on POSIX, ``msvcrt.locking`` on Windows.
Both belong to an open file, so the kernel drops them the moment their process ends, however
it ends (``kill -9``, a crash, power cut before the next boot). No pid is written and none is
compared, so a reused pid or a second machine's pid cannot fool it. Two opens of one file in
the same process are two lockers (``flock`` is per open file description, ``msvcrt`` per
handle), so a window's own scan sees its own files as taken, like any other window's.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

if os.name == "nt":  # pragma: no cover - exercised on Windows only
    import msvcrt

    def lock_fd(fd: int) -> bool:
        """Lock an open file without waiting; False when another open of it holds the lock."""
        try:
            os.lseek(fd, 0, os.SEEK_SET)
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)  # one byte (beyond the end is allowed)
        except OSError:
            return False
        return True

else:
    import fcntl

    def lock_fd(fd: int) -> bool:
        """Lock an open file without waiting; False when another open of it holds the lock."""
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False
        return True


class FileLock:
    """An exclusive lock held through ``path`` for as long as this object (and process) holds it.

    ``acquire()`` never waits: True when this object now holds the lock (or already did),
    False when someone else holds it or the file cannot be opened. ``release(remove=True)``
    deletes the file while still holding the lock, so nobody can take the old file's lock in
    between and believe the owner dead while a fresh owner re-creates it.
    """

    def __init__(self, path):
        self.path = Path(path)
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> bool:
        if self._fd is not None:
            return True
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_BINARY", 0), 0o666)
        except OSError:
            return False
        if not lock_fd(fd):
            os.close(fd)
            return False
        # The owner may have deleted (released) the file between our open and our lock, and a
        # new owner created a new one: our lock would then be on a file nobody else sees.
        try:
            same = os.path.samestat(os.fstat(fd), os.stat(self.path))
        except OSError:
            same = False
        if not same:
            os.close(fd)
            return False
        self._fd = fd
        return True

    def release(self, remove: bool = False) -> None:
        fd, self._fd = self._fd, None
        if fd is None:
            return
        if remove:
            with contextlib.suppress(OSError):
                os.unlink(self.path)  # Windows refuses while it is open: tried again below
        os.close(fd)
        if remove and os.name == "nt":  # pragma: no cover
            with contextlib.suppress(OSError):
                os.unlink(self.path)
