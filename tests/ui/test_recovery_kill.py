"""Kill the app mid-session (SIGKILL, no clean-up at all) and get the work back.

The app runs in a subprocess exactly as a user starts it (``python -m attnexplorer --preset
pronoun``) with private settings and data folders. The documented test hook
``ATTNEXPLORER_TEST_EDIT`` makes it apply one edit after start, so it holds unsaved work; once
its recovery file appears the process is killed, and a window started here must offer that
file and restore exactly the edited session.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from attnexplorer.core.presets import build_preset
from attnexplorer.ui.document import SessionDocument
from attnexplorer.ui.main_window import MainWindow
from attnexplorer.ui.settings import AppSettings


pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs POSIX SIGKILL")


def _wait_for_recovery(folder, proc, timeout_s=120.0):
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        files = list(folder.glob("recovery-*.json")) if folder.is_dir() else []
        if files:
            return files
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"the app exited early ({proc.returncode}): {err.decode(errors='replace')[-2000:]}")
        time.sleep(0.1)
    proc.kill()
    pytest.fail("no recovery file appeared")


def test_killed_app_offers_and_restores_its_unsaved_work(qtbot, tmp_path, monkeypatch):
    config, data = tmp_path / "config", tmp_path / "data"
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", ATTNEXPLORER_CONFIG_DIR=str(config),
               ATTNEXPLORER_DATA_DIR=str(data), ATTNEXPLORER_AUTOSAVE_MS="200",
               ATTNEXPLORER_TEST_EDIT="embeddings[2,1]=7.25")
    proc = subprocess.Popen([sys.executable, "-m", "attnexplorer", "--preset", "pronoun"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        (recovery_file,) = _wait_for_recovery(data, proc)
        # The writer renames a finished file into place, so what we see is complete.
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        proc.stdout.close()
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    assert recovery_file.exists()

    expected = build_preset("pronoun").session
    x = expected.embeddings.copy()
    x[2, 1] = 7.25
    expected = expected.replace(embeddings=x)

    monkeypatch.setenv("ATTNEXPLORER_CONFIG_DIR", str(config))
    monkeypatch.setenv("ATTNEXPLORER_DATA_DIR", str(data))
    built = build_preset("dessert")
    doc = SessionDocument(built.session, built.signals)
    window = MainWindow(doc, AppSettings())
    qtbot.addWidget(window)
    offered = []
    window.ask_restore = lambda recovery: offered.append(recovery) or True
    window.ask_unsaved = lambda: "discard"
    try:
        assert window.offer_recovery()
        (recovery,) = offered
        assert recovery.file == recovery_file
        assert recovery.original_path is None  # it was never saved
        assert doc.session == expected
        assert doc.session.preset.name == "pronoun"
        assert window.actions.modified and window.isWindowModified()
        assert not recovery_file.exists()
        # Offered once: a second look finds nothing left by a dead window.
        assert not window.offer_recovery()
    finally:
        window.actions.autosaver.discard()
        doc.shutdown()
