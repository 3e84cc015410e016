"""What a fit may be asked for (what trains, the optimiser, the learning rate, the steps, the
dtype), checked in one place for the window and the CLI; its error and its progress report."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import AttnExplorerError
from ..inputs.session import Session

OPTIMIZERS = ("adam", "sgd")
# Chosen so that the previous-token fit of a random n = 8, d = 8, d_k = 4 head converges well
# inside 500 steps (tests/core/test_fit.py); SGD needs a larger step because KL gradients of a
# sharp target are small once the weights are close (2.0 already overshot into saturation).
DEFAULT_LR = {"adam": 0.05, "sgd": 1.0}
TRAINABLE = ("q", "k", "biases")
FIT_DTYPES = ("float32", "float64")
MAX_STEPS = 1_000_000


class FitError(AttnExplorerError):
    """A fit that cannot start as asked (bad target, learning rate, steps, what trains)."""


@dataclass(frozen=True)
class FitProgress:
    """Where a fit stands after a step. ``status``: running, converged, diverged, plateau, done."""

    step: int
    loss: float
    max_error: float
    best_loss: float
    status: str = "running"
    message: str = ""

    @property
    def finished(self) -> bool:
        return self.status != "running"


# What a fit holds per n × n_k attention matrix of the session, in the fit's dtype: the forward's
# scores, scaled, masked scores and weights kept for the backward pass, their gradients, and
# the softmax backward's temporaries (SQUARE_BUFFERS × 3 in all); and per fitted head, in float64
# on the host while the target is built and checked, about six copies (the matrix as given, it
# normalised, its reachable part, the masked cells' share, temporaries), plus two on the device.
FIT_COPIES = 3
TARGET_COPIES = 6


def fit_bytes(session: Session, heads: int, dtype: str = "float32", device: str = "cpu") -> int:
    """An upper estimate of the memory a fit of ``heads`` heads of ``session`` holds at its peak."""
    from ..compute.memory import _ITEM_BYTES, compute_bytes

    alibi = session.positions is not None and session.positions.kind == "alibi"
    engine = compute_bytes(session.heads, session.n, session.d, session.d_k, session.d_v, dtype, device,
                           n_keys=session.n_keys, alibi=alibi)
    cells = session.n * session.n_keys
    return engine * FIT_COPIES + heads * cells * (TARGET_COPIES * 8 + 2 * _ITEM_BYTES.get(dtype, 8)) + cells


def check_fit_memory(session: Session, heads: int, dtype: str = "float32", device: str = "cpu",
                     limit: int | None = None) -> None:
    """FitError, before any target or tensor is made, when a fit would need more than ``limit``
    bytes (default: half of the machine's memory, as ``compute`` and ``export`` use). A fit on
    16,384 tokens otherwise allocated 21.8 GB and was killed by the kernel."""
    from ..compute.memory import _size, memory_limit

    limit = memory_limit() if limit is None else limit
    need = fit_bytes(session, heads, dtype, device)
    if need > limit:
        raise FitError(f"fitting {heads} head{'s' if heads != 1 else ''} of this session needs about {_size(need)} of "
                       f"memory ({session.n:,} × {session.n_keys:,} attention matrices with their gradients in {dtype}), "
                       f"more than the limit of {_size(limit)} (half of this machine's memory); use fewer tokens or heads")


def check_settings(session: Session, train, optimizer: str, lr, steps, dtype: str = "float32") -> tuple:
    """Validate what trains, the optimiser, the learning rate and the steps; returns them normalised."""
    train = tuple(dict.fromkeys(str(t).strip().lower() for t in train))
    if not train:
        raise FitError("nothing to train: choose q, k and/or biases")
    for t in train:
        if t not in TRAINABLE:
            raise FitError(f"cannot train {t!r}; choose from q, k, biases (W_v and W_o are left alone)")
    optimizer = str(optimizer).strip().lower()
    if optimizer not in OPTIMIZERS:
        raise FitError(f"unknown optimizer {optimizer!r}; choose adam or sgd")
    if lr is None:
        lr = DEFAULT_LR[optimizer]
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not (0 < lr < math.inf):
        raise FitError(f"the learning rate must be a number > 0, got {lr!r}")
    if isinstance(steps, bool) or not isinstance(steps, int) or not 1 <= steps <= MAX_STEPS:
        raise FitError(f"steps must be a whole number from 1 to {MAX_STEPS:,}, got {steps!r}")
    if dtype not in FIT_DTYPES:
        raise FitError(f"fitting runs in float32 or float64, not {dtype}")
    return train, optimizer, float(lr), steps

