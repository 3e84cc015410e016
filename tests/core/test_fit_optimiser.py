"""The fit's optimiser (core/fit/optimiser.py): the same numbers as torch.optim's fused Adam and
SGD, without importing torch._dynamo (whose import froze the window when a fit started)."""

import subprocess
import sys

import pytest
import torch

from attnexplorer.core.fit.optimiser import FusedStep


@pytest.mark.parametrize("name", ["adam", "sgd"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_fused_step_equals_torch_optim_bit_for_bit(name, dtype):
    gen = torch.Generator().manual_seed(0)
    ours = [torch.randn(4, 5, dtype=dtype, generator=gen, requires_grad=True),
            torch.randn(3, dtype=dtype, generator=gen, requires_grad=True)]
    theirs = [t.detach().clone().requires_grad_(True) for t in ours]
    reference = (torch.optim.Adam if name == "adam" else torch.optim.SGD)(theirs, lr=0.03, fused=True)
    step = FusedStep(torch, ours, name, 0.03)
    for i in range(40):
        grads = [torch.randn(t.shape, dtype=dtype, generator=gen) for t in ours]
        step.zero_grad()
        reference.zero_grad(set_to_none=True)
        for a, b, g in zip(ours, theirs, grads):
            a.grad, b.grad = g.clone(), g.clone()
        if i % 7 == 3:   # a parameter without a gradient is left alone, its moments too
            ours[1].grad = theirs[1].grad = None
        step.step()
        reference.step()
    assert all(torch.equal(a, b) for a, b in zip(ours, theirs))
    assert not torch.equal(ours[0], theirs[0].new_zeros(theirs[0].shape))


def test_a_fit_does_not_import_torch_dynamo():
    code = """
import sys
from attnexplorer.core.fit import Fitter, target_for
from attnexplorer.core.inputs.presets import build_preset
from attnexplorer.core.inputs.session import Mask
session = build_preset("random", {"n": 8, "d": 8, "d_k": 4, "d_v": 4, "heads": 1}).session.replace(mask=Mask("causal"))
for optimizer in ("adam", "sgd"):
    fitter = Fitter(session, {0: target_for(session, "previous-token")}, optimizer=optimizer, steps=5, tolerance=0.0)
    for _ in range(5):
        fitter.step()
    assert fitter.step_count == 5, fitter.step_count
print(sorted(m for m in sys.modules if m.startswith("torch._dynamo")))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]"
