"""Writes that never leave a half-written file or folder behind.

``atomic_write_bytes`` / ``atomic_write_text`` write a temporary file next to the target,
flush and fsync it, rename it over the target (``os.replace`` is atomic on one file system)
and fsync the folder. If anything fails, the temporary file is removed, the old file (if
any) is untouched, and a ``WriteError`` says what could not be written and why, in one line.

A process killed mid-write cannot remove its temporary (``.NAME.<12 hex>.tmp``, as big as the
file). The writer holds an OS lock on it (the filelock package's ``lock_descriptor``: the
kernel drops it when the writer's process ends) while writing, so
``remove_stale_temporaries`` can tell a dead writer's leftover (unlocked, untouched for a
minute) from one a live process is writing right now; every successful write of NAME
removes NAME's stale temporaries.

``atomic_directory(out_dir)`` does the same for a whole export: everything is written into a
staging folder inside ``out_dir`` and moved into place only when every file succeeded; the
staging folders a killed export left there are removed by the next export into that folder
(``remove_stale_staging``: a live export holds its folder's lock).
"""

from __future__ import annotations

import contextlib
import glob
import os
import re
import secrets
import shutil
import stat
import time
from pathlib import Path
from typing import Iterator

from filelock import lock_descriptor

from ..core.errors import AttnExplorerError

# A temporary untouched for this long whose lock is free was left by a writer that died. The
# age closes the gap between creating the file and locking it (and covers file systems where
# locks are not supported); a live writer touches its file as it writes.
STALE_TMP_AGE_S = 60.0
_TMP_NAME = re.compile(r"\.(?P<name>.+)\.[0-9a-f]{12}\.tmp")


class WriteError(AttnExplorerError):
    """A file or folder could not be written (no permission, disk full, not a folder...)."""


def _reason(err: OSError) -> str:
    return err.strerror or str(err) or type(err).__name__


def _fsync_folder(folder: Path) -> None:
    # Makes the rename itself durable. Not every platform can open a folder (Windows cannot),
    # and the data is already safe in the renamed file, so a failure here is not an error.
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write_bytes(path, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically, or raise WriteError leaving it as it was.

    A new file gets the usual permissions (0666 less the umask); an existing file keeps its
    permission bits.
    """
    atomic_write_with(path, lambda f: f.write(data))


def atomic_write_with(path, write) -> None:
    """``atomic_write_bytes`` for a file written piece by piece: ``write(f)`` gets the open
    binary temporary file, so a large file never has to be held in memory whole. An
    exception from ``write`` removes the temporary file and passes through unchanged."""
    if "\0" in os.fspath(path):
        raise WriteError(f"cannot write {os.fspath(path)!r}: the file name holds a NUL character")
    shown = path = Path(path)
    try:
        link = path.is_symlink()
    except OSError:  # e.g. a name too long: the open below says so as a WriteError
        link = False
    if link:
        # Write through the link: renaming over the link itself would replace it with a plain
        # file and leave the file it points to stale.
        path = Path(os.path.realpath(path))
    try:
        mode = os.stat(path).st_mode
    except OSError:
        mode = None  # a new file (or one we cannot see: the write below says why)
    # A read-only file is the user saying "do not overwrite": refuse, although the folder's
    # permissions (or being root) would let a rename replace it.
    if mode is not None and stat.S_ISREG(mode) and not mode & 0o222:
        raise WriteError(f"cannot write {shown}: the file is read-only")
    folder = path.parent
    tmp = folder / f".{path.name}.{secrets.token_hex(6)}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    except OSError as err:
        raise WriteError(f"cannot write {path}: {_reason(err)}") from None
    _try_lock(fd)  # held until closed: see remove_stale_temporaries
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        with contextlib.suppress(OSError):
            os.chmod(tmp, os.stat(path).st_mode & 0o7777)
        os.replace(tmp, path)
    except BaseException as err:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(err, OSError):
            raise WriteError(f"cannot write {path}: {_reason(err)}") from None
        raise
    _fsync_folder(folder)
    remove_stale_temporaries(folder, path.name)


def _try_lock(fd: int) -> bool:
    """Lock an open file without waiting; False when another open of it holds the lock."""
    try:
        return lock_descriptor(fd, blocking=False)
    except OSError:
        return False


def remove_stale_temporaries(folder, name: str | None = None,
                             min_age_s: float = STALE_TMP_AGE_S) -> list[Path]:
    """Delete the temporaries that killed writes left in ``folder`` (those of ``name`` only,
    or all); returns what was deleted. A temporary that a live process holds locked, or that
    changed within ``min_age_s``, is left alone. Never raises."""
    pattern = f".{glob.escape(name)}.*.tmp" if name is not None else ".*.tmp"
    removed = []
    now = time.time()
    for tmp in Path(folder).glob(pattern):
        match = _TMP_NAME.fullmatch(tmp.name)
        if match is None or (name is not None and match["name"] != name):
            continue
        try:
            fd = os.open(tmp, os.O_RDWR | getattr(os, "O_BINARY", 0))
        except OSError:
            continue
        try:
            st = os.fstat(fd)
            if not os.path.samestat(st, os.stat(tmp)) or now - st.st_mtime < min_age_s:
                continue
            if not _try_lock(fd):
                continue  # a live writer
            try:
                os.unlink(tmp)
            except OSError:
                if os.name != "nt":
                    continue
                os.close(fd)  # Windows deletes no open file; the lock showed nobody writes it
                fd = -1
                try:
                    os.unlink(tmp)
                except OSError:
                    continue
            removed.append(tmp)
        except OSError:
            continue
        finally:
            if fd >= 0:
                os.close(fd)
    return removed


def atomic_write_text(path, text: str, encoding: str = "utf-8") -> None:
    """``atomic_write_bytes`` for text (UTF-8, newlines written as given)."""
    atomic_write_bytes(path, text.encode(encoding))


def _plan_moves(stage: Path, out: Path) -> list[tuple[Path, Path]]:
    """Every staged file and where it goes, checked before anything moves.

    Refuses (WriteError) when a staged file would land on an existing folder or a staged
    folder on an existing file, so that a commit does not stop half-way for that reason.
    """
    moves = []
    for src in sorted(stage.rglob("*")):
        if src == stage / _STAGING_LOCK:
            continue   # the live export's lock stays behind, removed with the staging folder
        dst = out / src.relative_to(stage)
        if src.is_dir():
            if dst.exists() and not dst.is_dir():
                raise WriteError(f"cannot write {dst}: a file is in the way of a folder")
        elif dst.is_dir():
            raise WriteError(f"cannot write {dst}: a folder is in the way of a file")
        else:
            moves.append((src, dst))
    return moves


def _make_folder(out: Path) -> list[Path]:
    """Create ``out`` and missing parents; return those created (deepest last)."""
    created = []
    missing = []
    p = out
    while not p.exists():
        missing.append(p)
        if p.parent == p:
            break
        p = p.parent
    if p.exists() and not p.is_dir():
        raise WriteError(f"cannot write to {out}: {p} is a file, not a folder")
    for folder in reversed(missing):
        try:
            folder.mkdir()
        except FileExistsError:
            continue
        except OSError as err:
            _remove_empty(created)
            raise WriteError(f"cannot write to {out}: {_reason(err)}") from None
        created.append(folder)
    return created


def _remove_empty(folders: list[Path]) -> None:
    for folder in reversed(folders):
        with contextlib.suppress(OSError):
            folder.rmdir()


def _commit(moves: list[tuple[Path, Path]], backups: Path, created: list[Path]) -> None:
    """Move every staged file into place, all or nothing.

    Each file it replaces is first renamed into ``backups`` (in the staging folder, on the
    same file system); if any rename fails (a sub-folder we may not write, a full disk), the
    files already moved in are taken out again and the old ones put back, so ``--out`` is
    left as it was. Folders made for new files are added to ``created`` (removed on failure).
    """
    backups.mkdir()
    journal: list[list] = []  # [destination, its backup or None, whether the new file is in place]
    try:
        for i, (src, dst) in enumerate(moves):
            created += _make_folder(dst.parent)
            backup = None
            if os.path.lexists(dst):
                backup = backups / str(i)
                os.replace(dst, backup)
            journal.append([dst, backup, False])
            os.replace(src, dst)
            journal[-1][2] = True
    except BaseException:
        for dst, backup, placed in reversed(journal):
            if placed:
                with contextlib.suppress(OSError):
                    os.unlink(dst)
            if backup is not None:
                with contextlib.suppress(OSError):
                    os.replace(backup, dst)
        raise


STAGING_PREFIX = ".attnexplorer-staging-"
_STAGING_LOCK = ".lock"


def remove_stale_staging(out_dir, min_age_s: float = STALE_TMP_AGE_S) -> list[Path]:
    """Delete the staging folders that killed exports left in ``out_dir``; returns them.

    A live export holds its folder's ``.lock`` locked; one whose lock is free (its process
    died: kill -9, a power cut) is stale. A folder without a lock file (killed between making
    the folder and its lock) counts as stale once untouched for ``min_age_s``. Never raises."""
    removed = []
    try:
        candidates = list(Path(out_dir).glob(glob.escape(STAGING_PREFIX) + "*"))
    except OSError:
        return removed
    for folder in candidates:
        try:
            if not folder.is_dir() or folder.is_symlink():
                continue
            lock = folder / _STAGING_LOCK
            if lock.is_file():
                fd = os.open(lock, os.O_RDWR | getattr(os, "O_BINARY", 0))
                try:
                    if not _try_lock(fd):
                        continue   # a live export is writing into it
                finally:
                    os.close(fd)
            elif time.time() - folder.stat().st_mtime < min_age_s:
                continue
            shutil.rmtree(folder)
            removed.append(folder)
        except OSError:
            continue
    return removed


@contextlib.contextmanager
def atomic_directory(out_dir, notice=None) -> Iterator[Path]:
    """Stage an export: ``with atomic_directory(out) as stage: write into stage``.

    On a clean exit every staged file (sub-folders included) is fsynced and moved into
    ``out_dir``, replacing files of the same name and leaving other files there alone. If
    the block raises, the staging folder is deleted, ``out_dir`` keeps exactly what it had,
    and folders this call created are removed again. Each file lands whole (one
    ``os.replace`` each); raises WriteError when ``out_dir`` cannot be created or written.
    """
    out = Path(out_dir)
    created = _make_folder(out)
    stale = remove_stale_staging(out)
    if stale and notice is not None:
        notice(f"removed {len(stale)} staging folder{'s' if len(stale) != 1 else ''} that an interrupted export "
               f"left in {out} ({', '.join(p.name for p in stale[:3])}{', …' if len(stale) > 3 else ''})")
    lock_fd = -1
    try:
        stage = Path(os.path.realpath(out)) / f"{STAGING_PREFIX}{secrets.token_hex(6)}"
        stage.mkdir()
        # held until the export ends: a later export into this folder sees that it is live
        lock_fd = os.open(stage / _STAGING_LOCK, os.O_RDWR | os.O_CREAT | getattr(os, "O_BINARY", 0), 0o666)
        _try_lock(lock_fd)
    except OSError as err:
        _remove_empty(created)
        raise WriteError(f"cannot write to {out}: {_reason(err)}") from None
    try:
        yield stage
        moves = _plan_moves(stage, out)
        for src, dst in moves:
            fd = os.open(src, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _commit(moves, stage / ".replaced", created)
        for folder in {dst.parent for _, dst in moves} | {out}:
            _fsync_folder(folder)
    except BaseException as err:
        _close(lock_fd)
        shutil.rmtree(stage, ignore_errors=True)
        _remove_empty(created)
        if isinstance(err, OSError) and not isinstance(err, WriteError):
            raise WriteError(f"cannot write to {out}: {_reason(err)}") from None
        raise
    _close(lock_fd)
    shutil.rmtree(stage, ignore_errors=True)


def _close(fd: int) -> None:
    if fd >= 0:
        with contextlib.suppress(OSError):
            os.close(fd)
