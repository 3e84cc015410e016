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

What trains, the loss and the gradient are ``problem.FitProblem``; what a fit may be asked
for is checked in ``settings.py``; the plateau's reasons and the notes on shared K/V heads are
written in ``reasons.py``. It is Qt-free and runs on whatever thread
calls it (the window's worker, the CLI's loop). torch is imported lazily.
"""

from __future__ import annotations

import math
from typing import Mapping


from ..compute.engine import resolve
from ..inputs.session import Session
from .problem import FitProblem
from .reasons import explain_plateau, shared_kv_notes
from .settings import FitError, FitProgress, check_fit_memory, check_settings
from .targets import Target

PLATEAU_STEPS = 150
DIVERGENCE_GROWTH = 100.0
SMALL_PROBLEM = 1 << 16  # heads × n × n at or below which a CPU fit runs on one thread


class Fitter:
    """One fit of ``session``'s heads toward ``targets`` ({head: Target}); see the module.

    ``single_thread``: run each CPU step on one torch thread (None: only small problems, where
    waking more threads costs more than it saves; the window passes True so that a fit
    leaves the other cores to the window's own compute and drawing).

    ``shown_weights``: the weights the window already shows for ``session`` (the engine's);
    the first step checks that the fit reproduces them and refuses the session
    (``FitError``) otherwise. None: the engine computes them here, and the check runs now.

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
        self._torch = torch
        self.start_session = session
        self.heads = tuple(sorted(targets))
        self.targets = {h: targets[h] for h in self.heads}
        self.tolerance = float(tolerance)
        self.problem = FitProblem(session, self.targets, self.train, torch, dev, tdtype)
        self.biased = self.problem.biased
        self.notes = shared_kv_notes(session, self.targets, self.train)
        if single_thread is None:
            single_thread = session.heads * session.n * session.n <= SMALL_PROBLEM
        self._single_thread = dev.type == "cpu" and single_thread
        # Made by the first step, on the thread that runs the fit.
        self._opt = None
        # The window passes the weights it already shows for this session; comparing with them
        # waits for the first step, on the fit's own thread, so that Start does not compute
        # the whole attention twice on the GUI thread (80 ms at n = 512).
        self._atol = 1e-5 if dtype == "float64" else 1e-3
        self._shown_weights = shown_weights
        if shown_weights is None:
            from ..compute.engine import compute

            self.problem.check_reproduces(compute(session, device=device, dtype=dtype, keep=("weights",)).weights,
                                          self._atol)
        self.step_count = 0
        params = self.problem.params
        self._good = {k: v.detach().clone() for k, v in params.items()}
        self._best = {k: v.detach().clone() for k, v in params.items()}
        self._first_loss: float | None = None
        self.best_loss = math.inf
        self._history: list[float] = []  # best loss after each step, for the plateau rule
        self.last: FitProgress | None = None

    def _make_optimizer(self):
        # One fused kernel per step instead of a handful per parameter: about 20 % more steps
        # per second at n = 16; called without torch.optim, whose first use imports
        # torch._dynamo (see ``optimiser``).
        from .optimiser import optimiser

        return optimiser(self._torch, self.problem.trained, self.optimizer_name, self.lr)

    # -- the weights now (FitProblem) -------------------------------------------------------
    def loss_function(self):
        """(f, inputs) for ``torch.autograd.gradcheck``: see ``FitProblem.loss_function``."""
        return self.problem.loss_function()

    def loss_and_max_error(self) -> tuple[float, float]:
        """The loss and max |weights − target| of the weights now (no step taken)."""
        return self.problem.loss_and_max_error()

    def gradient(self) -> dict:
        """d loss / d parameter at the weights now, by autograd, as float64 host arrays (no step)."""
        return self.problem.gradient()

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
            self.problem.check_reproduces(shown, self._atol)
        if self._opt is None:
            self._opt = self._make_optimizer()
        self._opt.zero_grad(set_to_none=True)
        problem = self.problem
        loss_t, weights = problem.forward()
        loss = float(loss_t.detach())
        max_error = problem.max_error(weights)
        if self._first_loss is None:
            self._first_loss = loss
        if not math.isfinite(loss) or loss > DIVERGENCE_GROWTH * max(self._first_loss, 1e-3):
            return self._diverged(loss)
        # These weights are good: they are what a stop or a later divergence keeps.
        for k, v in problem.params.items():
            self._good[k].copy_(v.detach())
        if loss < self.best_loss:
            self.best_loss = loss
            for k, v in problem.params.items():
                self._best[k].copy_(v.detach())
        reach_error = max_error if not problem.unreachable else problem.max_error(weights, problem.reach)
        if reach_error <= self.tolerance:
            if problem.unreachable:
                # All that the mask lets the head do is done; the rest of the target is out of reach.
                return self._finish(loss, max_error, "plateau", self.explain_plateau(loss, max_error))
            return self._finish(loss, max_error, "converged",
                                f"matched the target: max |weights − target| = {max_error:.2g} after {self.step_count} steps")
        loss_t.backward()
        # A NaN or infinite gradient needs no check of its own: it makes the weights NaN, whose
        # loss the next step finds, and the weights kept are then these (the last good ones).
        problem.zero_frozen_gradients()
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
            for k, v in self.problem.params.items():
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
        return self.problem.session_with(self._good)

    def explain_plateau(self, loss: float, max_error: float) -> str:
        """Why the loss stopped falling short of the target, as one message (``reasons.py``)."""
        return explain_plateau(self, loss, max_error)
