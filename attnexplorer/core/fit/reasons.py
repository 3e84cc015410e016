"""A fit's findings in words: why it stopped short of its target (a plateau), and which heads
a fit changes besides those with a target (grouped K/V heads)."""

from __future__ import annotations

from typing import Mapping

import numpy as np

from ..inputs.session import Session
from .targets import Target, blocked_cells


def explain_plateau(fitter, loss: float, max_error: float) -> str:
    """Why ``fitter``'s loss stopped falling short of the target, as one message."""
    s = fitter.start_session
    reasons = []
    for h, target in fitter.targets.items():
        if target.best_max_error > fitter.tolerance:
            reasons.append(f"head {h}'s target puts weight on masked cells, so max |weights − target| "
                           f"cannot go below {target.best_max_error:.3g}")
    if s.positions is None or s.positions.absolute:
        # RoPE and ALiBi tell equal rows apart by position; otherwise equal rows of the
        # attention input give equal queries (and keys).
        x_queries, x_keys = _attention_inputs(s)
        for target in fitter.targets.values():
            reasons += _shared_rows(s, target, x_queries, x_keys)
    rope = s.positions is not None and s.positions.kind == "rope"
    biased = fitter.biased
    rank = s.d_k if rope or biased else min(s.d, s.d_k) if s.source is None else min(s.d, s.source.d, s.d_k)
    if not reasons and rank < s.n_keys - 1:
        what = "d_k" if rope or biased else "min(d, d_k)" if s.source is None else "min(d, d_source, d_k)"
        reasons.append(f"the scores Q·Kᵀ have rank at most {what} = {rank} for {s.n_keys} keys; "
                       "the pattern may need more dimensions")
    if not reasons:
        reasons.append(f"the learning rate ({fitter.lr:g}) may be too small or too large for this target")
    return (f"the fit cannot match the target: the best reached is max |weights − target| = {max_error:.2g} "
            f"(loss {fitter.best_loss:.3g}) after {fitter.step_count} steps: " + "; ".join(dict.fromkeys(reasons)))


def shared_kv_notes(s: Session, targets: Mapping[int, Target], train) -> tuple[str, ...]:
    """With grouped K/V heads, which query heads without a target change because a head with
    one trains the K/V head they share."""
    if s.kv_heads == s.heads or not ({"k", "biases"} & set(train)):
        return ()
    group = s.heads // s.kv_heads
    what = " and ".join(w for w, t in (("W_k", "k"), ("b_k", "biases")) if t in train)
    notes = []
    for g in range(s.kv_heads):
        members = list(range(g * group, (g + 1) * group))
        fitted = [h for h in members if h in targets]
        others = [h for h in members if h not in targets]
        if fitted and others:
            notes.append(f"query heads {_listed(members)} share K/V head {g}: fitting {_heads(fitted)} trains "
                         f"that K/V head's {what}, so the weights of {_heads(others)} change too")
    return tuple(notes)


def _listed(items) -> str:
    items = [str(i) for i in items]
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _heads(items) -> str:
    return ("head " if len(items) == 1 else "heads ") + _listed(items)


def _attention_inputs(s: Session) -> tuple[np.ndarray, np.ndarray]:
    """The rows queries are made from (X = norm(E + P)) and those keys are made from (X, or
    the source's rows in cross-attention), as the engine makes them."""
    from ..compute.engine import compute

    x = compute(s, dtype="float64", keep=("X",)).X
    return x, (x if s.source is None else s.source.embeddings)


def _duplicate_pairs(x: np.ndarray, most: int = 2) -> list[tuple[int, int]]:
    """Up to ``most`` pairs (i, j), i < j, of equal rows of ``x`` (one pass, no n² loop)."""
    _, first, inverse = np.unique(x + 0.0, axis=0, return_index=True, return_inverse=True)  # + 0.0: −0 is 0
    inverse = inverse.reshape(-1)
    return [(int(first[inverse[j]]), j) for j in range(len(x)) if first[inverse[j]] != j][:most]


def _shared_rows(s: Session, target: Target, x_queries: np.ndarray, x_keys: np.ndarray) -> list[str]:
    """Tokens with the same attention-input row get the same query (and key): a target that
    treats them differently cannot be matched by any W_q, W_k."""
    out = []
    blocked = blocked_cells(s)
    keys = s.key_tokens
    for i, j in _duplicate_pairs(x_queries):
        if (np.array_equal(blocked[i], blocked[j]) and target.rows[i] and target.rows[j]
                and not np.allclose(target.reachable[i], target.reachable[j], atol=1e-6)):
            out.append(f"tokens {i} {s.tokens[i]!r} and {j} {s.tokens[j]!r} share an embedding, so one query, "
                       "but their target rows differ")
    for i, j in _duplicate_pairs(x_keys):
        both = ~blocked[:, i] & ~blocked[:, j] & target.rows
        if both.any() and not np.allclose(target.reachable[both, i], target.reachable[both, j], atol=1e-6):
            out.append(f"keys {i} {keys[i]!r} and {j} {keys[j]!r} share an embedding, so every query "
                       "scores them alike, but the target weighs them differently")
    return out[:2]
