"""Fitting a head: gradient descent on W_q and W_k toward a target attention pattern.

The weights are made by ``attention.attend``, the very function ``engine.compute`` runs for the
window, on the inputs ``engine.attention_inputs`` makes for it (every stage of a real head:
biases, norm, positions, RoPE, ALiBi, grouped K/V heads, a cross-attention source), here with
W_q and W_k (and, when asked, b_q and b_k) swapped for trainable leaf tensors and autograd on.
The loss is the mean over query rows of KL(target ‖ weights), and its gradient is torch's
autograd through that code, through the rotation and the ALiBi bias too. So what is trained is
what is shown.

What trains for a target on query head h: h's W_q (and b_q), and the W_k (and b_k) of the K/V
head h reads. With grouped-query attention that K/V head is shared by the other query heads of
h's group, so their weights change too (``Fitter.notes`` says which); their W_q stays. W_v, the
norm, the positions and W_o are left alone (W_o and b_o do not reach the weights at all).
Training the biases of a session that has none starts them at zero, which is what absent means.

``Fitter`` runs one optimiser step per ``step()`` and owns the stopping rules:

- converged: max |weights − target| ≤ ``tolerance`` on every trained row;
- diverged: the loss (or a gradient) is NaN or infinite, or the loss grew 100× over its start:
  the fit stops and keeps the last weights whose loss was good;
- plateau: the best loss improved by less than 0.1 % over the last ``PLATEAU_STEPS`` steps
  while the target is not matched: the fit stops and ``explain_plateau`` says why it may be
  out of reach (weight on masked cells, tokens that share an embedding, too few dimensions);
- done: the number of steps asked for ran.

What a fit may be asked for is checked in ``settings.py``; the plateau's reasons and the notes
on shared K/V heads are written in ``reasons.py``. It is Qt-free and runs on whatever thread
calls it (the window's worker, the CLI's loop). torch is imported lazily.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from typing import Mapping

import numpy as np

from ..attention import AttentionInputs, attend, join_projections
from ..engine import attention_inputs, resolve
from ..session import Session
from .reasons import explain_plateau, shared_kv_notes
from .settings import FitError, FitProgress, check_fit_memory, check_settings
from .targets import Target, blocked_cells

PLATEAU_STEPS = 150
DIVERGENCE_GROWTH = 100.0
SMALL_PROBLEM = 1 << 16  # heads × n × n at or below which a CPU fit runs on one thread


class Fitter:
    """One fit of ``session``'s heads toward ``targets`` ({head: Target}); see the module.

    ``single_thread``: run each CPU step on one torch thread (None: only small problems, where
    waking more threads costs more than it saves; the window passes True so that a fit
    leaves the other cores to the window's own compute and drawing).

    Raises ``FitError`` (or ``EngineError`` for the device) before any work when asked the
    impossible. ``step()`` advances by one optimiser step and returns a ``FitProgress``;
    ``session()`` is the session with the weights reached (the last good ones after a
    divergence), which is what stopping at any point keeps.
    """

    def __init__(self, session: Session, targets: Mapping[int, Target], train=("q", "k"), optimizer: str = "adam",
                 lr: float | None = None, steps: int = 500, device: str = "cpu", dtype: str = "float32",
                 tolerance: float = 1e-3, single_thread: bool | None = None, shown_weights=None):
        import torch

        if not targets:
            raise FitError("no target given")
        for h in targets:
            if not (isinstance(h, int) and 0 <= h < session.heads):
                raise FitError(f"head {h!r} does not exist; the session has heads 0..{session.heads - 1}")
        self.train, self.optimizer_name, self.lr, self.steps = check_settings(session, train, optimizer, lr, steps, dtype)
        check_fit_memory(session, len(targets), dtype, device)
        dev, tdtype = resolve(device, dtype)
        self._torch, self._dev, self._tdtype = torch, dev, tdtype
        self.start_session = session
        self.heads = tuple(sorted(targets))
        self.targets = {h: targets[h] for h in self.heads}
        self.tolerance = float(tolerance)
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
        self._base = AttentionInputs(**plain)
        self._cross = session.source is not None
        self._w_value = t(session.w_value)
        self._params = {"q": t(session.w_query).requires_grad_("q" in self.train),
                        "k": t(session.w_key).requires_grad_("k" in self.train)}
        train_biases = "biases" in self.train
        # Biases enter the engine's layout when the session has any or when they train (a
        # session without them starts from zero biases, which is what absent means).
        self.biased = train_biases or any(b is not None for b in (session.b_query, session.b_key, session.b_value))
        if self.biased:
            def bias(b, shape):
                return t(np.zeros(shape) if b is None else b)

            self._params["bq"] = bias(session.b_query, (h, d_k)).requires_grad_(train_biases)
            self._params["bk"] = bias(session.b_key, (h_kv, d_k)).requires_grad_(train_biases)
            self._b_value = bias(session.b_value, (h_kv, d_v)).reshape(-1)
        self._trained = [p for p in self._params.values() if p.requires_grad]
        mask = blocked_cells(session)
        # Heads without a target keep their weights: their gradient is zeroed before each step
        # (Adam and plain SGD then never move them, as their moments stay 0). A K/V head moves
        # when any query head that reads it has a target.
        fitted_q = np.array([q in self.targets for q in range(h)])
        fitted_kv = fitted_q.reshape(h_kv, h // h_kv).any(axis=1)
        self._fitted = {"q": fitted_q, "bq": fitted_q, "k": fitted_kv, "bk": fitted_kv}
        self._frozen = {key: torch.tensor(~fitted, device=dev) for key, fitted in self._fitted.items()
                        if key in self._params and self._params[key].requires_grad and not fitted.all()}
        self.notes = shared_kv_notes(session, self.targets, self.train)
        # Targets for every head, zero for heads without one: their rows add nothing to the loss
        # and no gradient (selecting the trained heads instead costs a scatter in backward).
        zeros = np.zeros(mask.shape)
        empty_rows = np.zeros(session.n, dtype=bool)
        reach = np.stack([self.targets[h].reachable if h in self.targets else zeros for h in range(session.heads)])
        rows = np.stack([self.targets[h].rows if h in self.targets else empty_rows for h in range(session.heads)])
        self._reach = t(reach)
        self._target = t(np.stack([self.targets[h].matrix if h in self.targets else zeros for h in range(session.heads)]))
        self._rows = torch.tensor(rows, device=dev)
        self._count = float(rows.sum())
        with np.errstate(divide="ignore", invalid="ignore"):
            self._entropy_part = float(np.where(reach > 0, reach * np.log(np.where(reach > 0, reach, 1.0)), 0.0).sum())
        self._tiny = torch.finfo(tdtype).tiny
        self._unreachable = any(t.best_max_error > 0 for t in self.targets.values())
        if single_thread is None:
            single_thread = session.heads * session.n * session.n <= SMALL_PROBLEM
        self._single_thread = dev.type == "cpu" and single_thread
        # Made by the first step, on the thread that runs the fit.
        self._opt = None
        # The window passes the weights it already shows for this session; comparing with them
        # waits for the first step, on the fit's own thread, so that Start does not compute
        # the whole attention twice on the GUI thread (80 ms at n = 512).
        self._dtype_name = dtype
        self._shown_weights = shown_weights
        if shown_weights is None:
            from ..engine import compute

            self._compare_with(compute(session, device=device, dtype=dtype, keep=("weights",)).weights)
        self.step_count = 0
        self._good = {k: v.detach().clone() for k, v in self._params.items()}
        self._best = {k: v.detach().clone() for k, v in self._params.items()}
        self._first_loss: float | None = None
        self.best_loss = math.inf
        self._history: list[float] = []  # best loss after each step, for the plateau rule
        self.last: FitProgress | None = None

    def _make_optimizer(self):
        # One fused kernel per step instead of a handful per parameter: about 20 % more steps
        # per second at n = 16; called without torch.optim, whose first use imports
        # torch._dynamo (see ``optimiser``).
        from .optimiser import optimiser

        return optimiser(self._torch, self._trained, self.optimizer_name, self.lr)

    def _compare_with(self, shown: np.ndarray) -> None:
        """Refuse a session whose weights the fit's inputs would not reproduce (``shown``, the
        engine's weights). The inputs are the engine's own (``attention_inputs``), so this
        guards the one thing the fit adds: the layout of the trainable W_q, W_k and biases it
        joins in every step."""
        try:
            with self._torch.no_grad():
                mine = attend(self._inputs(), wanted=frozenset({"weights"}))["weights"].to("cpu").numpy()
        except (RuntimeError, ValueError, IndexError):
            mine = None
        atol = 1e-5 if self._dtype_name == "float64" else 1e-3
        if mine is None or mine.shape != np.shape(shown) or not np.allclose(mine, shown, rtol=0, atol=atol):
            raise FitError("this session uses an attention stage that fitting does not support yet "
                           "(its weights differ from what the window shows)")

    # -- the arithmetic ---------------------------------------------------------------------
    def _inputs(self, params=None) -> AttentionInputs:
        """The engine's inputs with ``params`` (default: the trainable ones) joined into its layout."""
        p = self._params if params is None else params
        torch = self._torch
        if self._cross:
            # Queries from X; keys and values from the source, in the engine's own w_kv layout.
            w_qkv = _columns(p["q"])
            extra = {"w_kv": torch.cat((_columns(p["k"]), _columns(self._w_value)), dim=1)}
        else:
            w_qkv = join_projections(p["q"], p["k"], self._w_value)
            extra = {}
        if self.biased:
            extra["b_qkv"] = torch.cat((p["bq"].reshape(-1), p["bk"].reshape(-1), self._b_value))
        return dataclasses.replace(self._base, w_qkv=w_qkv, **extra)

    def loss_function(self):
        """(f, inputs): f(*inputs) is the loss of the weights now as a function of the trained
        tensors, fresh leaves with their values (W_q, W_k, b_q, b_k, those that train), for
        ``torch.autograd.gradcheck``; the other tensors are held at their values."""
        names = [k for k, v in self._params.items() if v.requires_grad]
        inputs = tuple(self._params[k].detach().clone().requires_grad_() for k in names)

        def f(*values):
            params = dict(self._params)
            params.update(zip(names, values))
            return self._loss_of(attend(self._inputs(params), wanted=frozenset({"weights"}))["weights"])

        return f, inputs

    def _forward(self):
        """(loss, weights of every head) from the engine's own function."""
        weights = attend(self._inputs(), wanted=frozenset({"weights"}))["weights"]
        return self._loss_of(weights), weights

    def _loss_of(self, weights):
        """Mean over the counted query rows of KL(target ‖ weights)."""
        log_w = weights.clamp_min(self._tiny).log()  # a weight that underflowed to 0 stays finite
        cross = (self._reach * log_w).sum()
        return (self._entropy_part - cross) / self._count

    def _max_error(self, weights, against=None) -> float:
        """max |weights − target| over the rows that count (heads with a target, open rows)."""
        against = self._target if against is None else against
        diff = (weights.detach() - against).abs().amax(dim=-1)
        return float(diff.masked_fill(~self._rows, 0.0).max())

    def loss_and_max_error(self) -> tuple[float, float]:
        """The loss and max |weights − target| of the weights now (no step taken)."""
        with self._torch.no_grad():
            loss, weights = self._forward()
        return float(loss), self._max_error(weights)

    def gradient(self) -> dict:
        """d loss / d parameter at the weights now, by autograd, as float64 host arrays (no step)."""
        for p in self._trained:
            p.grad = None
        loss, _ = self._forward()
        loss.backward()
        names = {"q": "W_q", "k": "W_k", "bq": "b_q", "bk": "b_k"}
        out = {names[k]: v.grad.detach().to("cpu", self._torch.float64).numpy().copy()
               for k, v in self._params.items() if v.requires_grad}
        for p in self._trained:
            p.grad = None
        return out

    # -- stepping ---------------------------------------------------------------------------
    def step(self) -> FitProgress:
        """One optimiser step; after a finished progress, returns it again without stepping."""
        if self.last is not None and self.last.finished:
            return self.last
        if not self._single_thread:
            return self._step()
        # A small problem runs on one thread: waking a second one for each of a step's dozen
        # tiny kernels cost ten times the arithmetic here (46 ms against 3 ms a step at n = 16
        # on a busy 2-core machine). torch's thread count is global, so it is put back after.
        threads = self._torch.get_num_threads()
        self._torch.set_num_threads(1)
        try:
            return self._step()
        finally:
            self._torch.set_num_threads(threads)

    def _step(self) -> FitProgress:
        if self._shown_weights is not None:
            shown, self._shown_weights = self._shown_weights, None
            self._compare_with(shown)
        if self._opt is None:
            self._opt = self._make_optimizer()
        self._opt.zero_grad(set_to_none=True)
        loss_t, weights = self._forward()
        loss = float(loss_t.detach())
        max_error = self._max_error(weights)
        if self._first_loss is None:
            self._first_loss = loss
        if not math.isfinite(loss) or loss > DIVERGENCE_GROWTH * max(self._first_loss, 1e-3):
            return self._diverged(loss)
        # These weights are good: they are what a stop or a later divergence keeps.
        for k, v in self._params.items():
            self._good[k].copy_(v.detach())
        if loss < self.best_loss:
            self.best_loss = loss
            for k, v in self._params.items():
                self._best[k].copy_(v.detach())
        reach_error = max_error if not self._unreachable else self._max_error(weights, self._reach)
        if reach_error <= self.tolerance:
            if self._unreachable:
                # All that the mask lets the head do is done; the rest of the target is out of reach.
                return self._finish(loss, max_error, "plateau", self.explain_plateau(loss, max_error))
            return self._finish(loss, max_error, "converged",
                                f"matched the target: max |weights − target| = {max_error:.2g} after {self.step_count} steps")
        loss_t.backward()
        # A NaN or infinite gradient needs no check of its own: it makes the weights NaN, whose
        # loss the next step finds, and the weights kept are then these (the last good ones).
        for key, frozen in self._frozen.items():
            self._params[key].grad[frozen] = 0.0
        self._opt.step()
        self.step_count += 1
        self._history.append(self.best_loss)
        if len(self._history) > PLATEAU_STEPS:
            before = self._history[-PLATEAU_STEPS - 1]
            if self.best_loss > before - 1e-3 * abs(before) and self.best_loss > 1e-9:
                self._restore(self._best)  # the best reached, which the message reports
                loss, max_error = self.loss_and_max_error()
                return self._finish(loss, max_error, "plateau", self.explain_plateau(loss, max_error))
        if self.step_count >= self.steps:
            loss, max_error = self.loss_and_max_error()
            return self._finish(loss, max_error, "done", f"{self.step_count} steps: loss {loss:.3g}, "
                                f"max |weights − target| = {max_error:.2g}")
        self.last = FitProgress(self.step_count, loss, max_error, self.best_loss)
        return self.last

    def _restore(self, saved=None):
        """Put ``saved`` (default: the last good weights) back into the parameters and ``_good``."""
        saved = self._good if saved is None else saved
        with self._torch.no_grad():
            for k, v in self._params.items():
                v.copy_(saved[k])
                self._good[k].copy_(saved[k])

    def _finish(self, loss, max_error, status, message) -> FitProgress:
        self.best_loss = min(self.best_loss, loss)
        self.last = FitProgress(self.step_count, loss, max_error, self.best_loss, status, message)
        return self.last

    def _diverged(self, loss: float, what: str = "the loss") -> FitProgress:
        self._restore()
        good_loss, max_error = self.loss_and_max_error()
        if math.isfinite(loss):
            why = f"the loss grew from {self._first_loss:.3g} to {loss:.3g} (more than {DIVERGENCE_GROWTH:g}×)"
        else:
            why = f"{what} became NaN or infinite"
        message = (f"the fit diverged at step {self.step_count}: {why}; stopped and kept the last good weights "
                   f"(loss {good_loss:.3g}); try a learning rate below {self.lr:g}")
        return self._finish(good_loss, max_error, "diverged", message)

    def run(self, on_progress=None, should_stop=None) -> FitProgress:
        """Step until the fit finishes or ``should_stop()`` says so; ``on_progress(p)`` after each step."""
        progress = self.last
        while progress is None or not progress.finished:
            if should_stop is not None and should_stop():
                break
            progress = self.step()
            if on_progress is not None:
                on_progress(progress)
        return progress

    # -- results ----------------------------------------------------------------------------
    def session(self) -> Session:
        """The session with the weights reached (the last good ones); trained biases included,
        zero for heads without a target when the session had none."""
        s = self.start_session
        fields = {"q": ("w_query", s.w_query), "k": ("w_key", s.w_key)}
        if "biases" in self.train:
            fields["bq"] = ("b_query", np.zeros((s.heads, s.d_k)) if s.b_query is None else s.b_query)
            fields["bk"] = ("b_key", np.zeros((s.kv_heads, s.d_k)) if s.b_key is None else s.b_key)
        changes = {}
        for key, (name, original) in fields.items():
            if not self._params[key].requires_grad:
                continue
            fitted = self._fitted[key].reshape((-1,) + (1,) * (original.ndim - 1))
            # Heads without a target keep their exact float64 values (a float32 fit would round them).
            reached = self._good[key].detach().to("cpu", self._torch.float64).numpy()
            changes[name] = np.where(fitted, reached, original)
        return s.replace(**changes)

    def explain_plateau(self, loss: float, max_error: float) -> str:
        """Why the loss stopped falling short of the target, as one message (``reasons.py``)."""
        return explain_plateau(self, loss, max_error)


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
