"""torch's libraries loaded ahead of its import (``core/compute/torch_libraries.py``), checked
in fresh interpreters: the test process has imported torch long since."""

from __future__ import annotations

import subprocess
import sys

import pytest

from attnexplorer.core.compute.torch_libraries import _library_paths


def _run(code: str) -> str:
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.mark.skipif(_library_paths() is None, reason="no preload on this platform or torch build (by design)")
def test_the_libraries_load_without_torch_then_torch_imports_and_computes():
    out = _run(
        "import sys\n"
        "from attnexplorer.core.compute.torch_libraries import preload\n"
        "thread = preload()\n"
        "assert preload() is thread  # once per process\n"
        "thread.join()\n"
        "maps = open('/proc/self/maps').read()\n"
        "print('mapped', 'libtorch_cpu' in maps, 'torch' in sys.modules)\n"
        "import torch\n"
        "print('computes', float((torch.ones(3) @ torch.ones(3)).item()))\n"
        "paths = {line.split()[-1] for line in open('/proc/self/maps') if 'libtorch_cpu' in line}\n"
        "print('copies', len(paths))\n")
    assert "mapped True False" in out  # loaded, and still no torch module
    assert "computes 3.0" in out
    assert "copies 1" in out  # torch's import used the loaded library, not a second one


def test_nothing_is_preloaded_once_torch_is_in():
    out = _run("import torch\nfrom attnexplorer.core.compute.torch_libraries import preload\nprint(preload())")
    assert out.strip() == "None"
