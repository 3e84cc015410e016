"""Test-wide set-up: Qt runs offscreen unless the caller chose a platform (e.g. xcb under Xvfb).

Garbage is collected between tests, not during them. Python's cyclic collector otherwise runs
at whatever allocation tips it over, which can be in the middle of Qt building the next
test's widgets; finalising an earlier test's pyqtgraph items there is a known way for PySide
to segfault (seen here: inside ViewBox.itemChange while a new plot was being made). So
automatic collection is off while a test runs. After each test only the youngest generation is
collected: with collection off, everything the test made is still in it, so its garbage goes,
for about a millisecond. A full collection (about 0.12 s of CPU once torch, Qt and transformers
are loaded: minutes over the suite if run after every test) runs once per test module, after the
module's own fixtures (its windows) are torn down.
"""

import atexit
import gc
import os
import shutil
import tempfile

import pytest

# Ctrl+C stops the run even when the code under test catches it (see the module).
from interrupt_plugin import pytest_configure, pytest_runtest_logreport  # noqa: F401

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
# Keep the user's real settings and recovery files out of the tests: a settings folder of this
# process's own (each test then gets a fresh one, below; this one serves what runs outside a
# test, such as a session-scoped fixture's window). Set, not defaulted, so that each process
# (an xdist worker too) has its own.
os.environ["ATTNEXPLORER_CONFIG_DIR"] = tempfile.mkdtemp(prefix="attnexplorer-tests-")
atexit.register(shutil.rmtree, os.environ["ATTNEXPLORER_CONFIG_DIR"], True)


@pytest.fixture(autouse=True)
def _settings_of_its_own(tmp_path_factory, monkeypatch):
    """Each test gets fresh settings and recovery folders: a window remembers its layout, so
    a test that closed a dock or raised a tab left it so for whichever test came next (with
    pytest-randomly's order, a different one each run)."""
    # Not under the test's own tmp_path: tests check that nothing else was written there.
    monkeypatch.setenv("ATTNEXPLORER_CONFIG_DIR", str(tmp_path_factory.mktemp("settings")))


@pytest.fixture
def isolated(tmp_path, monkeypatch):
    """The settings and the recovery files (the data folder) under the test's own ``tmp_path``
    (``config/`` and ``data/``), for tests that look at them; returns ``tmp_path``."""
    monkeypatch.setenv("ATTNEXPLORER_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("ATTNEXPLORER_DATA_DIR", str(tmp_path / "data"))
    return tmp_path


@pytest.fixture(autouse=True)
def _collect_garbage_between_tests():
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
        gc.collect(0)


@pytest.fixture(autouse=True, scope="module")
def _collect_all_garbage_after_each_module():
    yield
    gc.collect()
