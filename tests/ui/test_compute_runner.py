"""The compute runner's inline computes: one torch thread while they run, and the same numbers."""

import numpy as np
import torch
from strategies import small_session

from attnexplorer.core.engine import INTERMEDIATES, compute
from attnexplorer.ui.compute_runner import ComputeRunner


def test_an_inline_compute_runs_on_one_thread_and_puts_the_thread_count_back(qapp, monkeypatch):
    import attnexplorer.ui.compute_runner as runner_module

    threads_seen = []
    real = runner_module.compute_any

    def looking(*args, **kwargs):
        threads_seen.append(torch.get_num_threads())
        return real(*args, **kwargs)

    monkeypatch.setattr(runner_module, "compute_any", looking)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        runner = ComputeRunner()
        got = []
        runner.finished.connect(got.append)
        session = small_session()
        runner.request(session)  # small and on the CPU: computed inline, before request returns
        runner.shutdown()
        assert threads_seen == [1]
        assert torch.get_num_threads() == 2
        (result,) = got
        reference = compute(session)
        for name in INTERMEDIATES:
            np.testing.assert_array_equal(getattr(result, name), getattr(reference, name), err_msg=name)
    finally:
        torch.set_num_threads(before)
