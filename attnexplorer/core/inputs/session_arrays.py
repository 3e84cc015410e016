"""The arrays a session holds: checked once, frozen, and changed by copies that remember where.

``frozen_matrix`` makes the read-only float64 copy a ``Session`` stores (and recognises one it
made, so ``replace`` does not copy the fields it hands back unchanged). ``with_values`` is the
one copy an edit makes; ``derived_from`` tells the engine's device copies which positions an
edit changed, so they patch those instead of uploading the whole array again.

On Linux the copy of a large array is copy-on-write (``_CowRoot``): an edit's array is a
private mapping of a memory file that holds the numbers of an earlier array of its chain, with
the cells written since then written into it, so a one-cell edit of W_q at 16 heads of 512 ×
512 copies one 4 KB page, not 32 MB (a whole copy took 4-10 ms of the GUI thread per keystroke).
"""

from __future__ import annotations

import collections.abc
import mmap
import os
import threading
import weakref

import numpy as np

from ..errors import SessionError

# Arrays this module has checked and frozen, by id. ``session.replace(w_query=...)`` hands the
# other fields back in unchanged; recognising them skips a copy and a finite check per array
# per edit, and keeps their identity, which lets the engine reuse their device copies.
_FROZEN: "weakref.WeakValueDictionary[int, np.ndarray]" = weakref.WeakValueDictionary()


def frozen_matrix(value, where: str, ndim: int) -> np.ndarray:
    """A read-only float64 copy of ``value``, or SessionError naming ``where``.

    An array that is already the result of this function is returned as it is (after the
    shape check): it cannot have changed since.
    """
    if _FROZEN.get(id(value)) is value:
        if value.ndim != ndim:
            raise SessionError(f"must be {ndim}-dimensional, got shape {value.shape}", where)
        return value
    try:
        raw = np.asarray(value)
    except (TypeError, ValueError):  # ragged nesting
        raise SessionError(f"must be a {ndim}-dimensional array of numbers with rows of equal length", where) from None
    # Strings like "1.5" would convert silently and booleans are not weights; refuse both.
    if raw.dtype.kind not in "iuf":
        raise SessionError("must hold numbers only", where)
    # always a copy (the caller's array stays theirs), and in C order: a model layer's transposed
    # weights came in Fortran order, where ravel() and reshape(-1) copy, so with_flat_values wrote
    # into a temporary and undoing a cell edit of a real model's W_q or W_o changed nothing
    a = np.array(raw, dtype=np.float64, order="C")
    if a.ndim != ndim:
        raise SessionError(f"must be {ndim}-dimensional, got shape {a.shape}", where)
    if not np.isfinite(a).all():
        idx = tuple(int(k) for k in np.argwhere(~np.isfinite(a))[0])
        raise SessionError(f"holds a non-finite number at {list(idx)}", where)
    a.flags.writeable = False
    _FROZEN[id(a)] = a
    return a


# For arrays made by ``with_values``: id → (weak reference to the array it was made from, the
# flat positions that differ, weak reference to the new array). The engine's device copies
# use it to patch only those positions instead of converting and uploading a whole array
# again. Only the newest few are kept: an edit is patched in right after it is made.
_DERIVED: "collections.OrderedDict[int, tuple]" = collections.OrderedDict()
_DERIVED_SIZE = 64


def _flat_positions(shape: tuple[int, ...], index: tuple) -> np.ndarray:
    """The flat positions ``index`` (ints and slices, one per axis) selects, in O(selected)."""
    index = index + (slice(None),) * (len(shape) - len(index))
    axes = [np.arange(*i.indices(n)) if isinstance(i, slice) else np.array([int(i) % n]) for i, n in zip(index, shape)]
    grids = np.meshgrid(*axes, indexing="ij")
    return np.ravel_multi_index(tuple(g.ravel() for g in grids), shape)


def with_values(base: np.ndarray, index: tuple, values) -> np.ndarray:
    """A frozen copy of ``base`` (an array of a session) with ``base[index] = values``, ready
    for ``Session``/``replace`` without another copy or finite check.

    ``index`` is a tuple of ints and slices; ``values`` must be finite (the caller checked
    them). This is the one copy an edit makes; the copy remembers which positions differ from
    ``base`` (``derived_from``).
    """
    return with_flat_values(base, _flat_positions(base.shape, tuple(index)), np.broadcast_to(values, _shape_of(base, index)).ravel())


def _shape_of(base: np.ndarray, index: tuple) -> tuple[int, ...]:
    return base[tuple(index)].shape


def with_flat_values(base: np.ndarray, flat: np.ndarray, values) -> np.ndarray:
    """``with_values`` by flat positions: ``base.ravel()[flat] = values`` in a frozen copy."""
    if _FROZEN.get(id(base)) is not base:
        raise SessionError("with_values needs an array of a session", "array")
    a = _cow_copy(base, flat, values)
    if a is None:
        a = np.array(base)
        a.reshape(-1)[flat] = values
    a.flags.writeable = False
    _FROZEN[id(a)] = a
    _DERIVED[id(a)] = (weakref.ref(base), np.asarray(flat), weakref.ref(a))
    # A long chain, or a whole copy (a large paste): the file the next edit starts from is
    # written meanwhile, off this thread.
    prepare_copy_on_write(a)
    if len(_DERIVED) > _DERIVED_SIZE:
        _DERIVED.popitem(last=False)
    return a


def derived_from(a: np.ndarray):
    """``(base, flat positions)`` when ``a`` was made by ``with_values`` from ``base`` and
    both still live, else None: ``a`` equals ``base`` except at those positions."""
    hit = _DERIVED.get(id(a))
    if hit is None or hit[2]() is not a:
        return None
    base = hit[0]()
    return None if base is None else (base, hit[1])


# -- copy-on-write copies of large arrays ------------------------------------------------------
# Arrays at least this large are copied on write where the system can (Linux: memfd_create).
_COW_MIN_BYTES = 4 << 20
# A chain's cells written since its memory file was made are written again into every new
# array of the chain; beyond this many pages of them (2 MB: one head of 512 × 512 numbers) the
# next edit starts a new memory file from its base (one whole copy), so an edit never copies
# more than about one head's worth.
COW_MAX_PAGES = 512
# Each array of a chain has every page written since the chain's file was made copied again
# (a page fault and 4 KB each): past this many such pages, a new file holding the newest
# array is written off the caller's thread (``prepare_copy_on_write``) and the next edit
# starts from it, so an edit rewrites at most about this many pages, and no edit waits for a
# whole new file as the one after 512 pages did (22 ms for W_q at 16 heads of 512).
REFRESH_PAGES = 64
_PAGE = mmap.PAGESIZE
# id(array) → (weak reference to it, its root, the flat positions written since the root, their
# values): the chain an array made by ``_cow_copy`` belongs to.
_COW: dict[int, tuple] = {}
# Every memory file alive: what they hold is memory of this process that its resident size
# does not show until a page is read (``memory_file_bytes``). Roots are also made on the
# preparing thread (``prepare_copy_on_write``), hence the lock.
_ROOTS: "weakref.WeakSet[_CowRoot]" = weakref.WeakSet()
_ROOTS_LOCK = threading.Lock()
# id(array) → (weak reference to it, the Future of a root holding its numbers): memory files
# made ahead of an array's first edit (``prepare_copy_on_write``).
_PREPARED: dict[int, tuple] = {}
_PREPARER = None  # the one thread that writes prepared memory files (made on first use)


class _CowRoot:
    """A memory file holding a copy of one array's numbers, never written again: each edit
    of its chain maps it privately (``array``), so the kernel copies only the pages written."""

    def __init__(self, base: np.ndarray):
        self.shape, self.dtype, self.nbytes = base.shape, base.dtype, base.nbytes
        fd = os.memfd_create("attnexplorer-array", os.MFD_CLOEXEC)
        self._closer = weakref.finalize(self, os.close, fd)
        self._fd = fd
        os.ftruncate(fd, self.nbytes)
        data = memoryview(base).cast("B")
        done = 0
        while done < self.nbytes:  # pwrite may write less than asked (2 GB at most on Linux)
            done += os.pwrite(fd, data[done:], done)
        with _ROOTS_LOCK:
            _ROOTS.add(self)

    def array(self) -> np.ndarray:
        """A new, writable array holding the root's numbers, sharing its unwritten pages."""
        mapping = mmap.mmap(self._fd, self.nbytes, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        return np.ndarray(self.shape, self.dtype, buffer=mapping)


def _last_writes(flat: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(positions, values)`` with each position once, holding its last value, by position."""
    positions, last = np.unique(flat[::-1], return_index=True)
    return positions, values[::-1][last]


def _pages(flat: np.ndarray, itemsize: int) -> int:
    return int(np.unique(flat * itemsize // _PAGE).size)


def _copies_on_write(base: np.ndarray) -> bool:
    return base.nbytes >= _COW_MIN_BYTES and base.flags.c_contiguous and hasattr(os, "memfd_create")


def _submit(base: np.ndarray):
    """A Future of a memory file holding ``base``'s numbers, written on the preparing thread."""
    global _PREPARER
    if _PREPARER is None:
        from concurrent.futures import ThreadPoolExecutor

        _PREPARER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="attnexplorer-copy-on-write")
    return _PREPARER.submit(_CowRoot, base)


def _ready(future) -> "_CowRoot | None":
    """What ``future`` made, once done (None while it runs, or when it failed: no memory file)."""
    if future is None or not future.done() or future.exception() is not None:
        return None
    return future.result()


def prepare_copy_on_write(base: np.ndarray) -> bool:
    """Start writing the memory file that ``base``'s next edit starts its chain from, on a
    thread of its own; True when one is being made or is ready, or ``base``'s chain has one.

    A chain's first edit otherwise writes the whole array into a new memory file on the
    caller's thread (about 22 ms for the 32 MB of W_q at 16 heads of 512 here, more than the
    plain copy an edit made before copy-on-write). A table calls this when the person starts
    typing into a cell, so that the file is ready by the time they press Enter; an edit that
    comes before it is ready waits for it (never longer than writing it itself would take).
    A long chain writes its next file ahead by itself (``REFRESH_PAGES``). Costs nothing for
    an array that copies whole (small, or no memory files here) or whose file is made."""
    if _FROZEN.get(id(base)) is not base or not _copies_on_write(base):
        return False
    entry = _COW.get(id(base))
    if entry is not None and entry[0]() is base:
        if entry[4] is None and _pages(entry[2], base.itemsize) >= REFRESH_PAGES:
            # The chain's next file, from this array; edits made before it is written go on
            # with the chain and note where they wrote (the pending refresh's positions).
            _COW[id(base)] = entry[:4] + ((_submit(base), np.zeros(0, dtype=np.int64)),)
        return True
    hit = _PREPARED.get(id(base))
    if hit is not None and hit[0]() is base:
        return True
    key = id(base)
    _PREPARED[key] = (weakref.ref(base), _submit(base))
    weakref.finalize(base, _PREPARED.pop, key, None)
    return True


def prepared(base: np.ndarray) -> bool:
    """Whether a memory file written ahead for ``base`` (``prepare_copy_on_write``) or for
    its chain's refresh is there, waiting for it while it is being written."""
    entry = _COW.get(id(base))
    if entry is not None and entry[0]() is base and entry[4] is not None:
        entry[4][0].exception()  # waits
        return _ready(entry[4][0]) is not None
    return _prepared_root(base) is not None


def _prepared_root(base: np.ndarray) -> "_CowRoot | None":
    """The memory file prepared for ``base`` (waiting for it if it is being written), else None."""
    hit = _PREPARED.get(id(base))
    if hit is None or hit[0]() is not base:
        return None
    try:
        return hit[1].result()
    except (OSError, ValueError, BufferError):  # no memory file: the caller makes one or copies
        _PREPARED.pop(id(base), None)
        return None


def _cow_copy(base: np.ndarray, flat, values) -> np.ndarray | None:
    """``base`` with ``base.ravel()[flat] = values`` as a copy-on-write array, or None where
    that does not apply (a small array, a large edit, no memory files here): the caller copies."""
    if not _copies_on_write(base):
        return None
    flat = np.asarray(flat, dtype=np.int64).ravel()
    values = np.broadcast_to(np.asarray(values, dtype=base.dtype), flat.shape)
    if _pages(flat, base.itemsize) > COW_MAX_PAGES:
        return None  # most of a head or more: a whole copy costs about as much
    entry = _COW.get(id(base))
    root, pending = None, None
    if entry is not None and entry[0]() is base:
        pending = entry[4]
        refreshed = _ready(None if pending is None else pending[0])
        if refreshed is None:
            written, written_values = _last_writes(np.concatenate([entry[2], flat]), np.concatenate([entry[3], values]))
            if _pages(written, base.itemsize) <= COW_MAX_PAGES:
                root = entry[1]
                if pending is not None:
                    pending = (pending[0], np.concatenate([pending[1], flat]))
            elif pending is not None:
                pending[0].exception()  # waits: the file being written ahead is nearer done than a new one
                refreshed = _ready(pending[0])
        if refreshed is not None:
            # The chain's next file is written: it holds an earlier array of this chain, and
            # ``base`` differs from it only where the edits since then wrote.
            since = np.unique(pending[1])
            written, written_values = _last_writes(np.concatenate([since, flat]),
                                                   np.concatenate([base.reshape(-1)[since], values]))
            root = refreshed
        pending = None if root is not entry[1] else pending
    if root is None:  # a new chain, from a file holding ``base``'s numbers
        root = _prepared_root(base)
        if root is None:
            try:
                root = _CowRoot(base)
            except (OSError, ValueError, BufferError):  # no memory file (a sandbox, a full /dev/shm)
                return None
        written, written_values = _last_writes(flat, values)
    try:
        a = root.array()
    except (OSError, ValueError):
        return None
    a.reshape(-1)[written] = written_values
    key = id(a)
    _COW[key] = (weakref.ref(a), root, written, np.array(written_values), pending)
    weakref.finalize(a, _COW.pop, key, None)
    return a


def copy_on_write(a: np.ndarray) -> bool:
    """Whether ``a`` was made as a copy-on-write copy (it shares unwritten pages with others)."""
    entry = _COW.get(id(a))
    return entry is not None and entry[0]() is a


def rewritten_pages(a: np.ndarray) -> int:
    """How many pages of ``a`` hold cells written since its chain's memory file was made
    (each edit of the chain writes them again); 0 for an array not made copy-on-write."""
    entry = _COW.get(id(a))
    return _pages(entry[2], a.itemsize) if entry is not None and entry[0]() is a else 0


def memory_file_bytes() -> int:
    """The bytes held by the memory files of copy-on-write copies alive now. The process's
    resident size counts a file's pages only once read through a mapping, so a measure of
    memory adds these."""
    with _ROOTS_LOCK:
        return sum(root.nbytes for root in list(_ROOTS))
