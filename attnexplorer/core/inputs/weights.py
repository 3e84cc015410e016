"""Weight-matrix helpers: starting values, importing from PyTorch layouts, resizing.

Everything here returns float64 numpy arrays in attnexplorer's ``x @ W`` convention: a
projection is ``(d, cols)`` (rows = embedding width), stacked over heads as ``(H, d, cols)``.

Two layouts are common in the wild. ``nn.Linear`` stores its weight as ``(out, in)`` and
computes ``x @ weight.T``, so ``from_linear`` transposes it. GPT-2's ``Conv1D`` stores
``(in, out)`` and computes ``x @ weight``, which is already our convention, so
``from_conv1d`` only checks and copies it.

torch is imported inside the functions that seed it, so importing this module is cheap.
"""

from __future__ import annotations

import numpy as np

from ..errors import SessionError
from .session import MAX_DIM, MAX_HEADS

# (kind, label) in menu order; ``kind`` is what ``init_weight`` takes.
INIT_KINDS: list[tuple[str, str]] = [
    ("rand", "Uniform random in [0, 1) (torch.rand, as in the dessert walkthrough)"),
    ("linear", "nn.Linear default (uniform in ±1/√d)"),
    ("identity", "Identity (needs as many columns as rows)"),
    ("zeros", "Zeros"),
]


def _check_size(value, name: str, upper: int) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or not 1 <= value <= upper:
        raise SessionError(f"must be a whole number in 1..{upper}, got {value!r}", name)
    return int(value)


def init_weight(kind: str, d: int, cols: int, heads: int = 1, seed: int = 0) -> np.ndarray:
    """A fresh ``(heads, d, cols)`` float64 weight stack of the given ``kind``.

    - ``rand``: ``torch.manual_seed(seed)`` then ``torch.rand(d, cols)`` once per head, from
      one stream, so head 0 equals the walkthrough's ``torch.rand(d, cols)`` after
      ``torch.manual_seed(seed)`` and head 1 its next draw of the same shape.
    - ``linear``: ``nn.Linear(d, cols, bias=False)`` created after ``torch.manual_seed(seed)``
      (one layer per head, from one stream), its ``(cols, d)`` weight transposed to ``(d, cols)``.
    - ``identity``: the identity, only when ``d == cols``.
    - ``zeros``: all zeros.

    The global torch random state is left as it was. Bad arguments raise SessionError.
    """
    kinds = [k for k, _ in INIT_KINDS]
    if kind not in kinds:
        raise SessionError(f"unknown initialisation {kind!r}; choose one of {', '.join(kinds)}", "init")
    d = _check_size(d, "rows", MAX_DIM)
    cols = _check_size(cols, "columns", MAX_DIM)
    heads = _check_size(heads, "heads", MAX_HEADS)
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)) or not 0 <= seed < 2**63:
        raise SessionError(f"must be a whole number in 0..2**63-1, got {seed!r}", "seed")
    if kind == "zeros":
        return np.zeros((heads, d, cols))
    if kind == "identity":
        if d != cols:
            raise SessionError(f"an identity needs as many columns as rows, got {d}×{cols}", "init")
        return np.broadcast_to(np.eye(d), (heads, d, d)).copy()
    import torch

    # fork_rng restores the global generator afterwards: filling a table must not change
    # what the user's next torch.rand in a notebook returns.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        if kind == "rand":
            stack = [torch.rand(d, cols, dtype=torch.float32) for _ in range(heads)]
        else:
            stack = [torch.nn.Linear(d, cols, bias=False).weight.detach().T for _ in range(heads)]
    # The walkthroughs draw float32 values; float64 keeps exactly those values.
    return torch.stack(stack).to(torch.float64).numpy().copy()


def _as_matrix(weight, where: str) -> np.ndarray:
    """A float64 copy of a 2-D finite numeric ``weight`` (numpy, torch or nested lists)."""
    if hasattr(weight, "detach"):  # a torch tensor or Parameter, possibly on a GPU
        weight = weight.detach().cpu().numpy()
    try:
        raw = np.asarray(weight)
    except (TypeError, ValueError):
        raise SessionError("must be a 2-D array of numbers with rows of equal length", where) from None
    if raw.dtype.kind not in "iuf":
        raise SessionError("must hold numbers only", where)
    if raw.ndim != 2:
        raise SessionError(f"must be 2-dimensional, got shape {raw.shape}", where)
    if raw.shape[0] < 1 or raw.shape[1] < 1:
        raise SessionError(f"is empty (shape {raw.shape})", where)
    a = np.array(raw, dtype=np.float64)
    if not np.isfinite(a).all():
        idx = [int(k) for k in np.argwhere(~np.isfinite(a))[0]]
        raise SessionError(f"holds a non-finite number at {idx}", where)
    return a


def from_linear(weight) -> np.ndarray:
    """An ``nn.Linear`` weight ``(out, in)`` as our ``(in, out)`` matrix (a transposed copy)."""
    return _as_matrix(weight, "nn.Linear weight").T.copy()


def from_conv1d(weight) -> np.ndarray:
    """A GPT-2 ``Conv1D`` weight, already ``(in, out)``, as a checked float64 copy."""
    return _as_matrix(weight, "Conv1D weight")


def split_heads(matrix, heads: int) -> np.ndarray:
    """Split a ``(d, H·cols)`` projection into a ``(H, d, cols)`` stack.

    Head h gets columns ``h·cols .. (h+1)·cols - 1``, the layout ``nn.MultiheadAttention``
    and GPT-2 use for their fused projections (after ``from_linear`` / ``from_conv1d``).
    """
    m = _as_matrix(matrix, "matrix")
    heads = _check_size(heads, "heads", MAX_HEADS)
    if m.shape[1] % heads:
        raise SessionError(f"{m.shape[1]} columns do not split into {heads} equal heads", "heads")
    cols = m.shape[1] // heads
    return m.reshape(m.shape[0], heads, cols).transpose(1, 0, 2).copy()


def resize(matrix, rows: int, cols: int) -> np.ndarray:
    """A ``rows × cols`` copy of ``matrix`` keeping the top-left values that fit; new cells are 0.

    A stack ``(..., r, c)`` (e.g. all heads of W_q) is resized in its last two axes.
    """
    if hasattr(matrix, "detach"):
        matrix = matrix.detach().cpu().numpy()
    try:
        a = np.asarray(matrix)
    except (TypeError, ValueError):
        raise SessionError("must be an array of numbers with rows of equal length", "matrix") from None
    if a.dtype.kind not in "iuf":
        raise SessionError("must hold numbers only", "matrix")
    if a.ndim < 2:
        raise SessionError(f"must be at least 2-dimensional, got shape {a.shape}", "matrix")
    # The tallest matrix a session has is W_o (heads × d_v rows); the widest is MAX_DIM.
    rows = _check_size(rows, "rows", MAX_HEADS * MAX_DIM)
    cols = _check_size(cols, "columns", MAX_DIM)
    out = np.zeros(a.shape[:-2] + (rows, cols))
    r, c = min(rows, a.shape[-2]), min(cols, a.shape[-1])
    out[..., :r, :c] = a[..., :r, :c]
    return out
