"""An edit's projections made from the previous ones: X·W recomputed only where X or W changed.

The projections X·[W_q | W_k | W_v] are the one step of the engine whose cost grows with every
weight: at 16 heads of d = d_k = 512 they are 12.6 million multiply-adds for 8 tokens, while
everything after them (scores, softmax, head outputs) is a few thousand. A one-cell edit
changes few of their numbers: a cell of W_q, W_k or W_v changes one column of the product, a
row of the embeddings (or its norm, or its position) one row. So the engine hands ``attend``
``reuse_linear`` (as ``AttentionInputs.linear``), which keeps the last product made from each
device weight tensor and, when the same tensor comes back with a few columns patched in
place (``note_patched``, from ``device_inputs``), a few bias entries changed or a few rows of
X changed, copies the old product and recomputes just those columns and rows from the
current inputs. Nothing is updated by differences, so no rounding piles up over many edits:
every number is a product of the current inputs, made either by the full product or by a
product of a slice of them, and agrees with the full product to the dtype's rounding (a
smaller product may sum in another order; the tests hold both to a tolerance).

Products are never written in place: a published result's Q, K and V are views of its
product. Only products of at most ``MAX_KEPT`` numbers are kept, so a large session keeps
no second copy of its biggest buffer; there an edit costs what a full product costs.

Two computes may overlap (the window's worker and an export on the GUI thread): a product is
kept only when its weight tensor was not patched while it was being made, so a kept product
always matches the weights it claims.

``tally()`` counts how each product was made since the process started (reused from the kept
one, made in full although one was kept, or made in full with none kept): what an edit cost
comes down to, for the bench and for anyone asking why an edit was slow.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict, deque
from typing import NamedTuple

import numpy as np

from ..kernel.attention import linear

# The largest product kept for the next edit, in numbers (8 MB in float32).
MAX_KEPT = 1 << 21
_KEPT_PRODUCTS = 4
# How many in-place patches of one weight tensor are remembered; a product older than that
# is made again in full.
_PATCH_LOG = 64

_LOCK = threading.Lock()
# id(weight tensor) → [weak reference, version, deque of (version, patched columns)]
_PATCHES: dict = {}
# id(weight tensor) → (weak reference, version, x, bias, product)
_PRODUCTS: OrderedDict = OrderedDict()


class Tally(NamedTuple):
    """How many products were made each way (``tally``)."""

    reused: int = 0     # the kept product with the changed columns and rows made again
    declined: int = 0   # made in full: a product was kept, but too much (or its shape) changed,
    #                     or more patches of its weights came than are remembered
    fresh: int = 0      # made in full: none was kept for this weight tensor (a new one, or grad on)


_TALLY = [0, 0, 0]   # reused, declined, fresh (under _LOCK)


def tally() -> Tally:
    """How the products ``reuse_linear`` returned were made, counted since the process started;
    the difference of two tallies is what the computes between them did."""
    with _LOCK:
        return Tally(*_TALLY)


def _torch():
    import torch

    return torch


def _forget(table: dict, key: int):
    def callback(_ref):
        table.pop(key, None)  # the tensor died; its id may be reused from now on

    return callback


def note_patched(w, columns) -> None:
    """Say that ``columns`` of the device weight tensor ``w`` were just written in place."""
    cols = np.unique(np.asarray(columns, dtype=np.int64))
    with _LOCK:
        entry = _PATCHES.get(id(w))
        if entry is None or entry[0]() is not w:
            entry = [weakref.ref(w, _forget(_PATCHES, id(w))), 0, deque(maxlen=_PATCH_LOG)]
            _PATCHES[id(w)] = entry
        entry[1] += 1
        entry[2].append((entry[1], cols))


def _version(w) -> int:
    entry = _PATCHES.get(id(w))
    return entry[1] if entry is not None and entry[0]() is w else 0


def _columns_since(w, version: int):
    """The columns of ``w`` patched after ``version`` (sorted), or None when not all are known."""
    entry = _PATCHES.get(id(w))
    if entry is None or entry[0]() is not w:
        return np.empty(0, dtype=np.int64) if version == 0 else None
    if entry[1] == version:
        return np.empty(0, dtype=np.int64)
    log = entry[2]
    if not log or log[0][0] > version + 1:
        return None
    return np.unique(np.concatenate([cols for v, cols in log if v > version]))


def reuse_linear(x, w, b=None):
    """``x·w (+ b)``, reusing the last product made from ``w`` where its inputs did not change."""
    torch = _torch()
    if torch.is_grad_enabled():  # autograd must see the plain product (fitting never gets here)
        _count(2)
        return linear(x, w, b)
    with _LOCK:
        version = _version(w)
        kept = _PRODUCTS.get(id(w))
        if kept is not None and kept[0]() is not w:
            kept = None
        if kept is not None and kept[1] == version and kept[2] is x and kept[3] is b:
            # Nothing it was made from changed (a compute of an unchanged session): the kept
            # product as it is, without the bookkeeping of an update.
            _TALLY[0] += 1
            _PRODUCTS.move_to_end(id(w))
            return kept[4]
        columns = None if kept is None else _columns_since(w, kept[1])
    value = None
    if kept is not None and columns is not None:
        value = _update(kept, columns, x, w, b)
    _count(2 if kept is None else 1 if value is None else 0)
    if value is None:
        value = linear(x, w, b)
    if value.numel() <= MAX_KEPT:
        with _LOCK:
            if _version(w) == version:  # not patched meanwhile: the product matches ``version``
                key = id(w)
                _PRODUCTS.pop(key, None)
                _PRODUCTS[key] = (weakref.ref(w, _forget(_PRODUCTS, key)), version, x, b, value)
                while len(_PRODUCTS) > _KEPT_PRODUCTS:
                    _PRODUCTS.popitem(last=False)
    return value


def _count(way: int) -> None:
    with _LOCK:
        _TALLY[way] += 1


def _update(kept, columns: np.ndarray, x, w, b):
    """The kept product with the changed columns and rows made again, or None when the inputs
    differ too much (or in shape) for that to be cheaper than the whole product."""
    torch = _torch()
    _, _, old_x, old_b, old = kept
    if x.shape != old_x.shape or x.dtype != old_x.dtype or x.device != old_x.device or old.shape[1] != w.shape[1]:
        return None
    if (b is None) != (old_b is None):
        return None
    n, width = old.shape
    rows = None if x is old_x else torch.nonzero((x != old_x).any(dim=1)).flatten()
    if b is not None and b is not old_b:
        changed = torch.nonzero(b != old_b).flatten().cpu().numpy()
        columns = np.union1d(columns, changed)
    n_rows = 0 if rows is None else int(rows.numel())
    # Recomputing r rows and c columns costs (r·width + n·c)·d; beyond half the full product
    # the copy and the indexing are not worth it.
    if 2 * (n_rows * width + n * columns.size) > n * width:
        return None
    if n_rows == 0 and columns.size == 0:
        return old  # nothing it was made from changed (the source of cross-attention, say)
    value = unmapped_copy(old)
    if columns.size:
        cols = torch.as_tensor(columns, device=w.device)
        value[:, cols] = linear(x, w.index_select(1, cols), None if b is None else b.index_select(0, cols))
    if n_rows:
        value[rows] = linear(x.index_select(0, rows), w, b)
    return value


def unmapped_copy(t):
    """A copy of ``t`` that frees its memory back to the system when it dies.

    Every edit makes one such copy and drops the one before (once the result holding it is
    replaced). On the heap, glibc kept the dropped ones as free holes it did not reuse: in
    some runs the process grew by the product's size (768 KB at 16 heads of 512) on every
    edit, 95 MB after 120 edits, all of it free memory that only ``malloc_trim`` returned. A
    CPU copy in a mapping of its own is unmapped when the tensor dies.
    """
    torch = _torch()
    if t.device.type != "cpu" or t.numel() * t.element_size() < _OWN_MAPPING_BYTES:
        return t.clone()
    import mmap

    buffer = mmap.mmap(-1, t.numel() * t.element_size())
    value = torch.frombuffer(buffer, dtype=t.dtype).view(t.shape)
    value.copy_(t)
    return value


# Below this a copy stays on the heap (glibc's own threshold for a mapping of its own is 128 KB).
_OWN_MAPPING_BYTES = 1 << 17
