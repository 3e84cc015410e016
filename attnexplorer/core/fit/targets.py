"""Target attention patterns for fitting a head, and their validation.

A target is an n×n_k matrix of non-negative numbers, one row per query: the weights the user
wants the head to give each key (n_k = n, or the source's length in cross-attention). ``make_target`` builds the built-in ones; ``check_target``
validates any matrix (built-in, imported from CSV/NPY, drawn in the window) against the
session's mask and returns a ``Target`` that the trainer uses. The window and the CLI go
through the same two functions, so they accept and refuse exactly the same things.

Masked cells: a head can never put weight on a blocked cell (its weight is exactly 0). A target
that does is not refused, because it is a fair question to ask ("can this head attend to a
later token?"), but what the loss can reach is only the visible part, renormalised; the
unreachable mass is reported up front and again when the fit plateaus.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import AttnExplorerError
from ..inputs.session import Session

# The built-in targets (``window:W`` and ``head:H`` take a parameter).
BUILT_IN = ("previous-token", "first-token", "self", "uniform", "window", "head")


class TargetError(AttnExplorerError):
    """A target that cannot be fitted: wrong shape, negative or non-finite numbers, empty rows."""


@dataclass(frozen=True, eq=False)
class Target:
    """A validated target for one head.

    - ``matrix``: (n, n_k), every counted row sums to 1 (rows renormalised), what max |w − t| is
      measured against;
    - ``reachable``: (n, n_k), ``matrix`` restricted to visible cells and renormalised: what the
      loss, KL(reachable ‖ weights), pulls toward;
    - ``rows``: (n,) bool, the query rows that count (a row with no visible key, or whose whole
      target lies on blocked cells, cannot be trained and is left out of the loss);
    - ``unreachable``: (n,) the target mass each row puts on blocked cells;
    - ``notes``: plain sentences about what was adjusted or cannot be reached.
    """

    matrix: np.ndarray
    reachable: np.ndarray
    rows: np.ndarray
    unreachable: np.ndarray
    notes: tuple[str, ...] = ()

    @property
    def best_max_error(self) -> float:
        """The smallest max |weights − target| any head can reach: the largest unreachable mass."""
        return float(self.unreachable[self.rows].max(initial=0.0))


def parse_target_name(text: str) -> tuple[str, int | None]:
    """``previous-token``, ``first-token``, ``self``, ``uniform``, ``window:W``, ``head:H`` → (kind, arg)."""
    kind, sep, arg = str(text).strip().partition(":")
    kind = kind.strip().lower()
    if kind not in BUILT_IN:
        raise TargetError(f"unknown target {text!r}; choose previous-token, first-token, self, uniform, "
                          "window:W, head:H or a .npy/.csv file")
    if kind in ("window", "head"):
        try:
            value = int(arg.strip())
        except ValueError:
            raise TargetError(f"target {kind}:{arg.strip() or '?'}: {'W' if kind == 'window' else 'H'} "
                              "must be a whole number") from None
        return kind, value
    if sep:
        raise TargetError(f"target {kind} takes no parameter, got {text!r}")
    return kind, None


def blocked_cells(session: Session) -> np.ndarray:
    """The session's n×n_k mask, True = blocked (n_k: the source's length in cross-attention)."""
    return session.mask.matrix(session.n, None if session.source is None else session.source.n)


def make_target(session: Session, kind: str, arg: int | None = None, other_weights: np.ndarray | None = None) -> np.ndarray:
    """The n×n_k matrix of a built-in target (before validation).

    - ``previous-token``: query i → key i − 1; the first query, which has none, → itself;
    - ``first-token``: every query → key 0 (an attention sink);
    - ``self``: query i → key i;
    - ``uniform``: equal weight on every key the mask leaves visible;
    - ``window`` (W ≥ 1): equal weight on keys i − W + 1 … i (the band the window mask allows);
    - ``head`` (H): ``other_weights``, the weights head H shows now (the caller computes them).

    In cross-attention the keys are another sequence: previous-token, self and window, which
    pair query i with key i, are refused (as the causal and window masks are); first-token is
    the source's first token.
    """
    n = session.n
    if session.source is not None and kind in ("previous-token", "self", "window"):
        raise TargetError(f"target {kind} needs one sequence (query i and key i the same token), but with a source "
                          "the keys are another sequence; choose first-token, uniform, head:H or a matrix file")
    t = np.zeros((n, session.n_keys))
    idx = np.arange(n)
    if kind == "previous-token":
        t[idx, np.maximum(idx - 1, 0)] = 1.0
    elif kind == "first-token":
        t[:, 0] = 1.0
    elif kind == "self":
        t[idx, idx] = 1.0
    elif kind == "uniform":
        t = (~blocked_cells(session)).astype(float)
    elif kind == "window":
        if arg is None or arg < 1:
            raise TargetError(f"target window:W needs W >= 1, got {arg}")
        t = ((idx[None, :] <= idx[:, None]) & (idx[None, :] > idx[:, None] - arg)).astype(float)
    elif kind == "head":
        if arg is None or not 0 <= arg < session.heads:
            raise TargetError(f"target head:{arg}: the session has heads 0..{session.heads - 1}")
        if other_weights is None:
            raise TargetError("target head:H needs that head's weights")
        t = np.array(other_weights, dtype=float)
    else:
        raise TargetError(f"unknown target {kind!r}")
    return t


def check_target(session: Session, matrix, source: str = "target") -> Target:
    """Validate ``matrix`` as a target for ``session``: raises ``TargetError`` or returns a ``Target``.

    Refused: not n×n_k, a non-finite or negative number, a row with visible keys whose target is
    all zero, or no row left to train. Rows are renormalised to sum to 1 (said in ``notes``
    when any needed it); mass on blocked cells is reported, not refused (see the module).
    """
    n, n_k = session.n, session.n_keys
    try:
        t = np.array(matrix, dtype=float)
    except (TypeError, ValueError):
        raise TargetError(f"{source}: not a matrix of numbers") from None
    if t.shape != (n, n_k):
        shape = "×".join(map(str, t.shape)) or "a single number"
        what = "one row and column per token" if session.source is None else "a row per token, a column per source token"
        raise TargetError(f"{source}: the target must be {n}×{n_k} ({what}), got {shape}")
    if not np.isfinite(t).all():
        raise TargetError(f"{source}: the target holds a NaN or infinite number")
    if (t < 0).any():
        i, j = np.argwhere(t < 0)[0]
        raise TargetError(f"{source}: weights cannot be negative (row {i}, column {j} is {t[i, j]:g})")
    blocked = blocked_cells(session)
    open_rows = ~blocked.all(axis=1)
    # Each row is divided by its largest number before it is summed: a row of 1e308 summed as
    # it is overflowed to inf and renormalised to zeros, which the fit then matched ("loss 0").
    peak = t.max(axis=1, initial=0.0)
    empty = open_rows & (peak <= 0)
    if empty.any():
        i = int(np.argmax(empty))
        raise TargetError(f"{source}: row {i} ({session.tokens[i]!r}) is all zero; every query needs a target that sums to 1")
    with np.errstate(over="ignore"):
        raw_sums = t.sum(axis=1)
    notes = []
    if open_rows.any() and not np.allclose(raw_sums[open_rows], 1.0, rtol=0, atol=1e-9):
        notes.append("rows renormalised to sum to 1")
    t = t / np.where(peak > 0, peak, 1.0)[:, None]
    t = t / np.where(peak > 0, t.sum(axis=1), 1.0)[:, None]
    t[~open_rows] = 0.0
    sums = t.sum(axis=1)
    bad = open_rows & ~(np.abs(sums - 1.0) <= 1e-9)
    if bad.any():
        i = int(np.argmax(bad))
        raise TargetError(f"{source}: row {i} ({session.tokens[i]!r}) cannot be normalised to sum to 1")
    unreachable = np.where(blocked, t, 0.0).sum(axis=1)
    visible = np.where(blocked, 0.0, t)
    rows = open_rows & (unreachable < 1.0 - 1e-12)
    reach = visible / np.where(rows, 1.0 - unreachable, 1.0)[:, None]
    reach[~rows] = 0.0
    if (open_rows & ~rows).any():
        bad = [session.tokens[i] for i in np.flatnonzero(open_rows & ~rows)]
        notes.append(f"the target of {_some(bad)} lies wholly on masked cells: those rows cannot be trained")
    partial = rows & (unreachable > 1e-12)
    if partial.any():
        i = int(np.argmax(np.where(partial, unreachable, -1)))
        notes.append(f"the target puts weight on masked cells (up to {unreachable[i]:.3g} in row {i}, "
                      f"{session.tokens[i]!r}): the head can never reach it")
    if not rows.any():
        raise TargetError(f"{source}: no query row can be trained (every row's target is on masked cells or has no visible key)")
    for a in (t, reach, rows, unreachable):
        a.flags.writeable = False
    return Target(matrix=t, reachable=reach, rows=rows, unreachable=unreachable, notes=tuple(notes))


def _some(names: list[str], most: int = 3) -> str:
    shown = ", ".join(repr(x) for x in names[:most])
    return shown + (f" and {len(names) - most} more" if len(names) > most else "")


def target_for(session: Session, spec: str, head: int = 0, device: str = "cpu") -> Target:
    """The validated built-in target named by ``spec`` (``previous-token``, ``window:3``, ``head:1``, ...)
    for ``head`` of ``session``. ``head:H`` reads the weights head H shows now (computed in float64).
    """
    kind, arg = parse_target_name(spec)
    other = None
    if kind == "head":
        if arg is not None and 0 <= arg < session.heads:
            from ..compute.engine import compute

            other = compute(session, device=device, dtype="float64", keep=("weights",)).weights[arg]
        if arg == head:
            raise TargetError(f"target head:{arg} is the head being fitted; choose another head")
    return check_target(session, make_target(session, kind, arg, other), source=f"target {spec}")
