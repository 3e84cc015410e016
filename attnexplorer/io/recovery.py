"""Recovery files: what a crashed or killed window left, found, read, claimed or set aside.

Qt-free; ``ui/autosave.py`` writes the files on a timer and the window offers them. In the
data folder, for a window whose owner id is ``ID`` (a random hex string):

- ``recovery-ID.json``: its unsaved work (written atomically by ``write_recovery``);
- ``recovery-ID.claimed-HEX.json``: an orphan it has taken over to offer (``claim``);
- ``recovery-ID.lock``: held with an OS lock (``OwnerLock``: the filelock package's ``flock`` or
  ``LockFileEx``) while that window may have files here. The kernel drops it when the process
  dies, however it dies.

A recovery file is an **orphan** when its owner's lock is free. ``scan_recoveries`` takes
that lock while it reads the owner's files, so a live window's files are never read, moved or
deleted by another. A file that cannot be understood (truncated, not JSON, nested too deep, a
session that fails validation) is **set aside** as ``NAME.unreadable`` (never deleted: a
person may still rescue it by hand), so that it neither hides the good files nor is met again
on every start. A file that cannot be *opened* right now (permissions) is left where it is.

Taking over is one ``os.rename`` of the orphan to a name of the claiming window: atomic, so
when two windows start together exactly one gets it, and at every moment the work is in a
file that the next start would offer.

A file holds ``{"format": "attnexplorer-recovery", "version": 1, "original_path": str | null,
"saved_at": float (Unix time), "session": <a session file's dict>}``.
"""

from __future__ import annotations

import contextlib
import glob
import json
import math
import os
import re
import secrets
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import filelock

from ..core.errors import AttnExplorerError
from ..core.inputs.session import Session
from .atomic import atomic_write_with, remove_stale_temporaries
from .json_pieces import write_json

RECOVERY_FORMAT = "attnexplorer-recovery"
RECOVERY_VERSION = 1
SET_ASIDE_SUFFIX = ".unreadable"
# recovery-ID.json or recovery-ID.<anything>.json; ID has no dot.
_NAME = re.compile(r"recovery-(?P<owner>[^.]+)(\..*)?\.json")
_LOCK_NAME = re.compile(r"recovery-(?P<owner>[^.]+)\.lock")
# Unix times a clock could plausibly have written (1970 .. 9999); anything else is damage.
_LATEST_TIME = 253402300799.0


def new_owner_id() -> str:
    return secrets.token_hex(6)


def owner_of(file) -> str | None:
    """The owner id in a recovery file's name, or None for a name that is not one."""
    match = _NAME.fullmatch(Path(file).name)
    return match["owner"] if match else None


def slot_file(directory, owner: str) -> Path:
    """Where the window ``owner`` writes its unsaved work."""
    return Path(directory) / f"recovery-{owner}.json"


def lock_file(directory, owner: str) -> Path:
    return Path(directory) / f"recovery-{owner}.lock"


class OwnerLock:
    """An exclusive lock held through ``path`` for as long as this object (and process) holds it.

    The operating system's own lock, through the filelock package (``flock`` on POSIX,
    ``LockFileEx`` on Windows): it belongs to an open file, so the kernel drops it the moment
    its process ends, however it ends (``kill -9``, a crash). No pid is written or compared.
    Two ``OwnerLock``s of one path in one process are two lockers, so a window's own scan sees
    its own files as taken, like any other window's. Never the package's existence-only soft
    lock, which a killed process would leave held; and shared across threads (the autosave's
    thread takes it, closing the window releases it).

    ``acquire()`` never waits: True when this object now holds the lock (or already did),
    False when someone else holds it or the file cannot be opened. ``release(remove=True)``
    deletes the file while still holding the lock, so nobody can take the old file's lock in
    between and believe the owner dead while a fresh owner re-creates it (a lock taken on a
    file already deleted does not count: filelock checks that the file still has a name).
    """

    def __init__(self, path):
        self.path = Path(path)
        self._lock = filelock.FileLock(self.path, thread_local=False, fallback_to_soft=False,
                                       preserve_lock_file=True)

    @property
    def held(self) -> bool:
        return self._lock.is_locked

    def acquire(self) -> bool:
        if self._lock.is_locked:
            return True
        try:
            self._lock.acquire(blocking=False)
        except (filelock.Timeout, OSError):
            return False
        return True

    def release(self, remove: bool = False) -> None:
        if not self._lock.is_locked:
            return
        if remove:
            with contextlib.suppress(OSError):
                os.unlink(self.path)  # Windows refuses while it is open: tried again below
        self._lock.release(force=True)
        if remove and os.name == "nt":  # pragma: no cover - Windows only
            with contextlib.suppress(OSError):
                os.unlink(self.path)


def owner_lock(directory, owner: str) -> OwnerLock:
    """The lock a window holds while it has (or may write) recovery files."""
    return OwnerLock(lock_file(directory, owner))


def _describe_time(saved_at: float) -> str:
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(saved_at))
    except (OverflowError, OSError, ValueError):
        return "at an unknown time"


@dataclass(frozen=True)
class Recovery:
    """An orphaned recovery file, read and checked."""

    file: Path
    session: Session
    original_path: Path | None
    saved_at: float

    def describe(self) -> str:
        source = str(self.original_path) if self.original_path else "an unsaved session"
        return (f"Unsaved changes to {source} ({len(self.session.tokens)} tokens), "
                f"autosaved {_describe_time(self.saved_at)}.")


def write_recovery(file, session: Session, original_path) -> None:
    """Write a recovery file atomically (temporary file, fsync, rename); WriteError on failure."""
    from .session_file import session_to_dict

    payload = {
        "format": RECOVERY_FORMAT,
        "version": RECOVERY_VERSION,
        "original_path": str(original_path) if original_path else None,
        "saved_at": time.time(),
        "session": session_to_dict(session, arrays=True),
    }
    file = Path(file)
    file.parent.mkdir(parents=True, exist_ok=True)
    # The same JSON as json.dumps(payload) would give, written a few thousand numbers at a
    # time: the autosave writes on a background thread, and one json.dumps of a 16,384-token
    # session held Python's lock, and so stalled the window, for over a second.
    atomic_write_with(file, lambda f: write_json(f, payload))


def _saved_at(value, file: Path) -> float:
    """The recorded time when it is a real one, else the file's own modification time."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            t = float(value)
        except OverflowError:  # an integer with hundreds of digits
            t = math.nan
        if math.isfinite(t) and 0.0 <= t <= _LATEST_TIME:
            return t
    return file.stat().st_mtime


def _original_path(value) -> Path | None:
    # A path the file system cannot take (NUL, absurdly long) would fail only later, on save.
    if isinstance(value, str) and value and "\x00" not in value and len(value) < 4096:
        return Path(value)
    return None


def read_recovery(file) -> Recovery:
    """Read and check one recovery file.

    Raises AttnExplorerError when the contents are unusable and OSError when the file cannot
    be read (missing, no permission). Nothing else for any contents: a bad time or original
    path is replaced (the file's modification time; no original), not fatal."""
    from .session_file import MAX_FILE_BYTES, session_from_dict

    file = Path(file)
    with open(file, "rb") as f:
        data = f.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise AttnExplorerError(f"{file}: more than {MAX_FILE_BYTES:,} bytes, not a recovery file")
    try:
        payload = json.loads(data.decode("utf-8"))
    except RecursionError:
        raise AttnExplorerError(f"{file}: nests too deeply to be a recovery file") from None
    except (UnicodeDecodeError, ValueError, MemoryError) as err:  # JSONDecodeError is a ValueError
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise AttnExplorerError(f"{file}: not a readable recovery file ({reason})") from None
    if not isinstance(payload, dict) or payload.get("format") != RECOVERY_FORMAT:
        raise AttnExplorerError(f"{file}: not an attnexplorer recovery file")
    if payload.get("version") != RECOVERY_VERSION:
        raise AttnExplorerError(f"{file}: recovery file version {payload.get('version')!r} is not supported")
    try:
        session = session_from_dict(payload.get("session"), str(file))
    except AttnExplorerError:
        raise
    except RecursionError:
        raise AttnExplorerError(f"{file}: nests too deeply to be a recovery file") from None
    except Exception as err:  # noqa: BLE001 - the validator's gaps must not escape a scan
        raise AttnExplorerError(f"{file}: not a readable recovery file ({type(err).__name__}: {err})") from None
    return Recovery(file=file, session=session, original_path=_original_path(payload.get("original_path")),
                    saved_at=_saved_at(payload.get("saved_at"), file))


def set_aside(file) -> Path | None:
    """Rename an unreadable recovery file out of the way (``NAME.unreadable``); the new path,
    or None when it could not be moved (it is then skipped again next time)."""
    file = Path(file)
    target = file.with_name(file.name + SET_ASIDE_SUFFIX)
    while target.exists():
        target = file.with_name(f"{file.name}.{secrets.token_hex(3)}{SET_ASIDE_SUFFIX}")
    try:
        os.rename(file, target)
    except OSError:
        return None
    return target


@dataclass
class Scan:
    """What ``scan_recoveries`` found: orphans newest first, and what it cleaned up."""

    found: list[Recovery] = field(default_factory=list)
    set_aside: list[Path] = field(default_factory=list)  # the new names of unreadable files
    removed_temporaries: list[Path] = field(default_factory=list)


def _owner_files(directory: Path, owner: str) -> list[Path]:
    return sorted(p for p in directory.glob(f"recovery-{glob.escape(owner)}*.json") if owner_of(p) == owner)


def scan_recoveries(directory) -> Scan:
    """Every orphaned recovery file in ``directory`` that reads as a session, newest first.

    Files of live windows are left alone. Unreadable orphans are set aside (and listed),
    temporaries of killed writes removed, and dead owners' lock files deleted.
    Never raises: one bad file must not hide a good one beside it.
    """
    directory = Path(directory)
    scan = Scan()
    if not directory.is_dir():
        return scan
    scan.removed_temporaries = remove_stale_temporaries(directory)
    owners = set()
    with contextlib.suppress(OSError):
        for entry in os.scandir(directory):
            match = _NAME.fullmatch(entry.name) or _LOCK_NAME.fullmatch(entry.name)
            if match:
                owners.add(match["owner"])
    for owner in sorted(owners):
        lock = owner_lock(directory, owner)
        if not lock.acquire():
            continue  # a running window owns these
        try:
            for file in _owner_files(directory, owner):
                try:
                    scan.found.append(read_recovery(file))
                except OSError:
                    continue  # gone (another window took it) or unreadable for now: leave it
                except Exception:  # noqa: BLE001 - whatever the contents, the others come first
                    moved = set_aside(file)
                    if moved is not None:
                        scan.set_aside.append(moved)
        finally:
            lock.release(remove=True)  # its owner is gone; the next scan makes it again
    scan.found.sort(key=lambda r: r.saved_at, reverse=True)
    return scan


def find_recoveries(directory) -> list[Recovery]:
    """The orphans ``scan_recoveries`` finds, newest first."""
    return scan_recoveries(directory).found


def claim(recovery: Recovery, owner: str) -> Recovery | None:
    """Take an orphan over for the window ``owner`` (which must hold its own lock): the same
    recovery under that window's name, or None when another window took it first."""
    target = recovery.file.with_name(f"recovery-{owner}.claimed-{secrets.token_hex(6)}.json")
    try:
        os.rename(recovery.file, target)
    except FileNotFoundError:
        return None
    return replace(recovery, file=target)


def remove_recovery(file) -> None:
    """Delete one recovery file (restored elsewhere, declined, or saved)."""
    with contextlib.suppress(FileNotFoundError):
        Path(file).unlink()
