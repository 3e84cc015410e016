"""Ctrl+C stops the test run, even when the code under test catches it.

The product catches KeyboardInterrupt where a user's Ctrl+C has a meaning: ``cli.main`` turns
it into exit status 130, ``attnexplorer fit`` keeps the weights reached, and many tests call
them in-process. So a Ctrl+C that landed in one of those was taken for the command's own,
that test failed, and pytest went on to the next: the run "ignored Ctrl+C" (twice, in issue
27; SIGTERM was needed). Here the first Ctrl+C is also remembered, and the run stops after the
test it landed in, whatever that test made of it; a second one ends the process at once.
"""

import os
import signal

import pytest

_pressed = []


def _on_sigint(signum, frame):
    if _pressed:
        os.write(2, b"\nattnexplorer tests: second Ctrl+C, stopping now\n")
        os._exit(130)
    _pressed.append(True)
    signal.default_int_handler(signum, frame)


def pytest_configure(config):
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _on_sigint)


@pytest.hookimpl(trylast=True)
def pytest_runtest_logreport(report):
    if _pressed and report.when == "teardown":
        pytest.exit("stopped by Ctrl+C", returncode=130)
