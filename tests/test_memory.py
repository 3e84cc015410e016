"""The allocator's settings made at start (attnexplorer/memory.py): big buffers reused."""

import os
import subprocess
import sys

import pytest

from attnexplorer import cli, memory

GLIBC = (os.confstr("CS_GNU_LIBC_VERSION") or "").startswith("glibc") if hasattr(os, "confstr") else False


def test_the_command_fixes_the_allocator_before_it_runs_anything(monkeypatch):
    seen = []
    monkeypatch.setattr(cli, "main", lambda argv: seen.append(memory.allocator_settings()) or 0)
    monkeypatch.setattr(sys, "argv", ["attnexplorer", "--preset", "pronoun"])  # the window: an ordinary exit
    with pytest.raises(SystemExit) as ended:
        cli.run()
    assert ended.value.code == 0
    if GLIBC:
        assert seen == [{"mmap_threshold": 32 << 20, "trim_threshold": 256 << 20}]
    else:
        assert seen == [None]


# Three 16 MB buffers alive at once and freed, as a compute's intermediates at n = 2,048: with
# glibc's own thresholds the heap's freed top (48 MB, over twice the 16 MB threshold) is given
# back, and every round maps and faults those pages in again (about 1,000 faults a round here).
ROUNDS = """
import resource, sys
import numpy as np
if sys.argv[1] == "steady":
    from attnexplorer.memory import steady_allocator
    steady_allocator()
def one_round():
    arrays = [np.ones(4 << 20, dtype=np.float32) for _ in range(3)]
    return sum(float(a[-1]) for a in arrays)
for _ in range(2):
    one_round()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(4):
    one_round()
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 4)
"""


@pytest.mark.skipif(not GLIBC, reason="mallopt is glibc's")
def test_big_buffers_are_reused_without_page_faults_once_the_allocator_is_steady():
    def faults(mode: str) -> float:
        done = subprocess.run([sys.executable, "-c", ROUNDS, mode], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return float(done.stdout)

    assert faults("steady") < 50
    assert faults("default") > 500  # the check can tell: glibc's defaults do fault them in again


@pytest.mark.skipif(not GLIBC, reason="the variables are glibc's")
def test_the_bench_measures_its_child_processes_with_the_apps_allocator():
    # A bench row's `python -c` child never passes through cli.run: the environment the bench
    # gives it must set the same thresholds, or its figures are of another allocator.
    from attnexplorer.bench.harness import child_env

    def faults(env) -> float:
        done = subprocess.run([sys.executable, "-c", ROUNDS, "default"], capture_output=True, text=True,
                              timeout=120, env=env)
        assert done.returncode == 0, done.stderr
        return float(done.stdout)

    assert faults(child_env()) < 50
    plain = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    assert faults(plain) > 500
