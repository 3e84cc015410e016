"""Ctrl+C stops the test run even when the code under test catches KeyboardInterrupt, as
``cli.main`` does (exit 130) and ``attnexplorer fit`` does (issue 27, item 13: pytest
"ignored Ctrl+C twice")."""

import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent

SWALLOWING = '''
import os, signal
from pathlib import Path

def test_the_code_under_test_catches_it():
    try:
        os.kill(os.getpid(), signal.SIGINT)   # Ctrl+C while cli.main runs in-process
    except KeyboardInterrupt:
        pass                                   # cli.main returns 130 instead

def test_the_next_test_must_not_run(tmp_path):
    Path(os.environ["MARKER"]).write_text("ran")
'''


def test_a_caught_ctrl_c_still_stops_the_run(tmp_path):
    (tmp_path / "test_swallow.py").write_text(SWALLOWING)
    marker = tmp_path / "marker"
    env = dict(os.environ, MARKER=str(marker), PYTHONPATH=str(TESTS) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "interrupt_plugin", "-p", "no:cacheprovider", "-q",
                           "-p", "no:randomly", str(tmp_path / "test_swallow.py")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert not marker.exists(), done.stdout
    assert done.returncode == 130 and "stopped by Ctrl+C" in done.stdout + done.stderr, done.stdout + done.stderr
