"""What a fit may be asked for (what trains, the optimiser, the learning rate, the steps, the
dtype), checked in one place for the window and the CLI; its error and its progress report."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import AttnExplorerError
from ..session import Session

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

