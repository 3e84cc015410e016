"""What a fit trains, and how good the weights it reaches are.

``FitProblem`` holds the engine's inputs for a session (``engine.attention_inputs``, cloned
out of inference mode) with W_q and W_k (and, when asked, b_q and b_k) as trainable leaf
tensors joined into the engine's layout, the targets as tensors, and the arithmetic of a
step: the weights by ``attention.attend`` (the function ``engine.compute`` runs, so what is
trained is what is shown), the loss (the mean over query rows of KL(target ‖ weights)), the
largest error, the gradient by autograd, and the session with the weights reached.
``trainer.Fitter`` drives it: the optimiser, the stopping rules and the weights kept.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Mapping

import numpy as np

from ..kernel.attention import AttentionInputs, attend, join_projections
from ..compute.engine import attention_inputs
from ..inputs.session import Session
from .settings import FitError
from .targets import Target, blocked_cells

WEIGHTS = frozenset({"weights"})
PARAMETER_NAMES = {"q": "W_q", "k": "W_k", "bq": "b_q", "bk": "b_k"}


class FitProblem:
    """The trainable tensors of a fit of ``session``'s heads toward ``targets`` ({head:
    Target}, heads in order), on ``dev`` in ``tdtype``; ``train`` says which of "q", "k",
    "biases" train (see the module).

    What trains for a target on query head h: h's W_q (and b_q), and the W_k (and b_k) of the
    K/V head h reads; heads without a target keep their weights (their gradient is zeroed,
    ``zero_frozen_gradients``)."""

    def __init__(self, session: Session, targets: Mapping[int, Target], train, torch, dev, tdtype):
        self.torch, self.session = torch, session
        self.targets = targets
        t = lambda a: torch.tensor(np.asarray(a), dtype=tdtype, device=dev)  # noqa: E731
        h, h_kv, d_k, d_v = session.heads, session.kv_heads, session.d_k, session.d_v
        # The engine's own inputs for this session, made as compute makes them (its device
        # caches then hold what they hold after a compute), and cloned: inference tensors,
        # which autograd cannot save, and never the caches' own tensors.
        with contextlib.ExitStack() as held:
            with torch.inference_mode():
                base = held.enter_context(attention_inputs(session, tdtype, dev))
            plain = {f.name: _plain(getattr(base, f.name)) for f in dataclasses.fields(base)}
        plain.update(w_out=None, b_out=None)  # W_o and b_o do not reach the weights
        self.base = AttentionInputs(**plain)
        self.cross = session.source is not None
        self.w_value = t(session.w_value)
        self.params = {"q": t(session.w_query).requires_grad_("q" in train),
                       "k": t(session.w_key).requires_grad_("k" in train)}
        self.train_biases = "biases" in train
        # Biases enter the engine's layout when the session has any or when they train (a
        # session without them starts from zero biases, which is what absent means).
        self.biased = self.train_biases or any(b is not None for b in (session.b_query, session.b_key, session.b_value))
        if self.biased:
            def bias(b, shape):
                return t(np.zeros(shape) if b is None else b)

            self.params["bq"] = bias(session.b_query, (h, d_k)).requires_grad_(self.train_biases)
            self.params["bk"] = bias(session.b_key, (h_kv, d_k)).requires_grad_(self.train_biases)
            self.b_value = bias(session.b_value, (h_kv, d_v)).reshape(-1)
        self.trained = [p for p in self.params.values() if p.requires_grad]
        mask = blocked_cells(session)
        # Heads without a target keep their weights: their gradient is zeroed before each step
        # (Adam and plain SGD then never move them, as their moments stay 0). A K/V head moves
        # when any query head that reads it has a target.
        fitted_q = np.array([q in targets for q in range(h)])
        fitted_kv = fitted_q.reshape(h_kv, h // h_kv).any(axis=1)
        self.fitted = {"q": fitted_q, "bq": fitted_q, "k": fitted_kv, "bk": fitted_kv}
        self._frozen = {key: torch.tensor(~fitted, device=dev) for key, fitted in self.fitted.items()
                        if key in self.params and self.params[key].requires_grad and not fitted.all()}
        # Targets for every head, zero for heads without one: their rows add nothing to the loss
        # and no gradient (selecting the trained heads instead costs a scatter in backward).
        zeros = np.zeros(mask.shape)
        empty_rows = np.zeros(session.n, dtype=bool)
        reach = np.stack([targets[h].reachable if h in targets else zeros for h in range(session.heads)])
        rows = np.stack([targets[h].rows if h in targets else empty_rows for h in range(session.heads)])
        self.reach = t(reach)
        self.target = t(np.stack([targets[h].matrix if h in targets else zeros for h in range(session.heads)]))
        self._rows = torch.tensor(rows, device=dev)
        self._count = float(rows.sum())
        with np.errstate(divide="ignore", invalid="ignore"):
            self._entropy_part = float(np.where(reach > 0, reach * np.log(np.where(reach > 0, reach, 1.0)), 0.0).sum())
        self._tiny = torch.finfo(tdtype).tiny
        # Some target puts weight where the mask lets none go: only its reachable part can be met.
        self.unreachable = any(t.best_max_error > 0 for t in targets.values())

    def check_reproduces(self, shown: np.ndarray, atol: float) -> None:
        """Refuse a session whose weights these inputs would not reproduce (``shown``, the
        engine's weights, within ``atol``). The inputs are the engine's own
        (``attention_inputs``), so this guards the one thing the fit adds: the layout of the
        trainable W_q, W_k and biases it joins in every step."""
        try:
            with self.torch.no_grad():
                mine = self.weights().to("cpu").numpy()
        except (RuntimeError, ValueError, IndexError):
            mine = None
        if mine is None or mine.shape != np.shape(shown) or not np.allclose(mine, shown, rtol=0, atol=atol):
            raise FitError("this session uses an attention stage that fitting does not support yet "
                           "(its weights differ from what the window shows)")

    # -- the arithmetic ---------------------------------------------------------------------
    def inputs(self, params=None) -> AttentionInputs:
        """The engine's inputs with ``params`` (default: the trainable ones) joined into its layout."""
        p = self.params if params is None else params
        torch = self.torch
        if self.cross:
            # Queries from X; keys and values from the source, in the engine's own w_kv layout.
            w_qkv = _columns(p["q"])
            extra = {"w_kv": torch.cat((_columns(p["k"]), _columns(self.w_value)), dim=1)}
        else:
            w_qkv = join_projections(p["q"], p["k"], self.w_value)
            extra = {}
        if self.biased:
            extra["b_qkv"] = torch.cat((p["bq"].reshape(-1), p["bk"].reshape(-1), self.b_value))
        return dataclasses.replace(self.base, w_qkv=w_qkv, **extra)

    def weights(self, params=None):
        """Every head's weights from ``params`` (default: the trainable ones), by the engine's own function."""
        return attend(self.inputs(params), wanted=WEIGHTS)["weights"]

    def loss_of(self, weights):
        """Mean over the counted query rows of KL(target ‖ weights)."""
        log_w = weights.clamp_min(self._tiny).log()  # a weight that underflowed to 0 stays finite
        cross = (self.reach * log_w).sum()
        return (self._entropy_part - cross) / self._count

    def forward(self):
        """(loss, weights of every head) of the weights now."""
        weights = self.weights()
        return self.loss_of(weights), weights

    def max_error(self, weights, against=None) -> float:
        """max |weights − target| over the rows that count (heads with a target, open rows);
        ``against``: another target (the reachable one)."""
        against = self.target if against is None else against
        diff = (weights.detach() - against).abs().amax(dim=-1)
        return float(diff.masked_fill(~self._rows, 0.0).max())

    def loss_and_max_error(self) -> tuple[float, float]:
        """The loss and max |weights − target| of the weights now (no step taken)."""
        with self.torch.no_grad():
            loss, weights = self.forward()
        return float(loss), self.max_error(weights)

    def loss_function(self):
        """(f, inputs): f(*inputs) is the loss of the weights now as a function of the trained
        tensors, fresh leaves with their values (W_q, W_k, b_q, b_k, those that train), for
        ``torch.autograd.gradcheck``; the other tensors are held at their values."""
        names = [k for k, v in self.params.items() if v.requires_grad]
        inputs = tuple(self.params[k].detach().clone().requires_grad_() for k in names)

        def f(*values):
            params = dict(self.params)
            params.update(zip(names, values))
            return self.loss_of(self.weights(params))

        return f, inputs

    def gradient(self) -> dict:
        """d loss / d parameter at the weights now, by autograd, as float64 host arrays (no step)."""
        for p in self.trained:
            p.grad = None
        loss, _ = self.forward()
        loss.backward()
        out = {PARAMETER_NAMES[k]: v.grad.detach().to("cpu", self.torch.float64).numpy().copy()
               for k, v in self.params.items() if v.requires_grad}
        for p in self.trained:
            p.grad = None
        return out

    def zero_frozen_gradients(self) -> None:
        """Heads without a target keep their weights: their part of each gradient is zeroed."""
        for key, frozen in self._frozen.items():
            self.params[key].grad[frozen] = 0.0

    def session_with(self, reached: Mapping) -> Session:
        """The session with the weights ``reached`` (key → tensor, as ``params``); trained biases
        included, zero for heads without a target when the session had none. Heads without a
        target keep their exact float64 values (a float32 fit would round them)."""
        s = self.session
        fields = {"q": ("w_query", s.w_query), "k": ("w_key", s.w_key)}
        if self.train_biases:
            fields["bq"] = ("b_query", np.zeros((s.heads, s.d_k)) if s.b_query is None else s.b_query)
            fields["bk"] = ("b_key", np.zeros((s.kv_heads, s.d_k)) if s.b_key is None else s.b_key)
        changes = {}
        for key, (name, original) in fields.items():
            if not self.params[key].requires_grad:
                continue
            fitted = self.fitted[key].reshape((-1,) + (1,) * (original.ndim - 1))
            values = reached[key].detach().to("cpu", self.torch.float64).numpy()
            changes[name] = np.where(fitted, values, original)
        return s.replace(**changes)


def _plain(value):
    """``value`` with every tensor in it (also inside a tuple: the norm, RoPE) cloned: a plain
    tensor that autograd may save, never the engine's cached (inference) copy."""
    import torch

    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, tuple):
        return tuple(_plain(v) for v in value)
    return value


def _columns(w):
    """(heads, rows, k) torch stack → (rows, heads·k), the engine's column layout."""
    return w.permute(1, 0, 2).reshape(w.shape[1], -1)
