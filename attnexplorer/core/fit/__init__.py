"""Fitting a head's W_q and W_k toward a target attention pattern (Qt-free).

``targets`` builds and validates target patterns; ``trainer.Fitter`` runs the optimisation
through the engine's own attention function (``core.kernel.attention.attend``) with autograd.
"""

from .targets import BUILT_IN, Target, TargetError, blocked_cells, check_target, make_target, parse_target_name, target_for
from .settings import DEFAULT_LR, OPTIMIZERS, TRAINABLE, FitError, FitProgress
from .trainer import Fitter

__all__ = ["BUILT_IN", "DEFAULT_LR", "OPTIMIZERS", "TRAINABLE", "FitError", "FitProgress", "Fitter", "Target",
           "TargetError", "blocked_cells", "check_target", "make_target", "parse_target_name", "target_for"]
