"""The fit's optimiser step: torch's fused Adam and SGD kernels, called as ``torch.optim`` calls
them, without ``torch.optim``.

``torch.optim.Adam(params, lr, fused=True)`` and ``SGD`` run exactly these kernels
(``torch._fused_adam_``, ``torch._fused_sgd_``) on the same state (the moments, a float32 step
count per parameter), so the numbers are the same; what ``torch.optim`` adds is a first call
that imports ``torch._dynamo``: 1.5-2.3 s of imports on the fit's thread, loading extension
modules with the GIL held, which froze the window for up to 220 ms at a time while a fit at
n = 512 started (the bench's ``fit_gui`` row). ``optimiser(...)`` returns ``torch.optim``'s own
where this torch has no fused CPU kernels.
"""

from __future__ import annotations

BETAS = (0.9, 0.999)   # torch.optim.Adam's defaults
EPS = 1e-8


class FusedStep:
    """``zero_grad`` and ``step`` of ``torch.optim.Adam(params, lr, fused=True)`` (or ``SGD``)."""

    def __init__(self, torch, params, name: str, lr: float):
        self._torch, self.params, self.name, self.lr = torch, list(params), name, float(lr)
        self._state: dict[int, tuple] = {}   # id(param) → (exp_avg, exp_avg_sq, step)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            p.grad = None

    def step(self) -> None:
        torch = self._torch
        groups: dict = {}
        for p in self.params:
            if p.grad is not None:   # as torch.optim: a parameter without a gradient is left alone
                groups.setdefault((p.device, p.dtype), []).append(p)
        for params in groups.values():
            grads = [p.grad for p in params]
            if self.name == "sgd":
                torch._fused_sgd_(params, grads, [], weight_decay=0.0, momentum=0.0, lr=self.lr, dampening=0.0,
                                  nesterov=False, maximize=False, is_first_step=False, grad_scale=None,
                                  found_inf=None)
                continue
            for p in params:
                if id(p) not in self._state:
                    self._state[id(p)] = (torch.zeros_like(p, memory_format=torch.preserve_format),
                                          torch.zeros_like(p, memory_format=torch.preserve_format),
                                          torch.zeros((), dtype=torch.float32, device=p.device))
            exp_avgs, exp_avg_sqs, steps = zip(*(self._state[id(p)] for p in params))
            torch._foreach_add_(list(steps), 1)
            torch._fused_adam_(params, grads, list(exp_avgs), list(exp_avg_sqs), [], list(steps), amsgrad=False,
                               lr=self.lr, beta1=BETAS[0], beta2=BETAS[1], weight_decay=0.0, eps=EPS,
                               maximize=False, grad_scale=None, found_inf=None)


def optimiser(torch, params, name: str, lr: float):
    """The fit's optimiser for ``params`` (``name`` "adam" or "sgd"): the fused kernels where
    this torch has them for the parameters' device, else ``torch.optim``'s classes."""
    params = list(params)
    kernel = "_fused_adam_" if name == "adam" else "_fused_sgd_"
    if hasattr(torch, kernel) and all(p.device.type == "cpu" for p in params):
        return FusedStep(torch, params, name, lr)
    opt = torch.optim.Adam if name == "adam" else torch.optim.SGD
    try:
        return opt(params, lr=lr, fused=True)
    except (RuntimeError, TypeError, ValueError):
        return opt(params, lr=lr)
