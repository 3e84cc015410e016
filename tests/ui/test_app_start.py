"""What ``attnexplorer`` opens at start-up, and how a bad command line is refused."""

from __future__ import annotations

import os
import subprocess
import sys
from argparse import Namespace

import pytest
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication, QLabel

from attnexplorer.commands.arguments import build_parser
from attnexplorer.core.errors import PresetError, SessionError
from attnexplorer.core.inputs.presets import build_preset, reference_curves
from attnexplorer.io.session_file import save_session
from attnexplorer.ui.app import initial_session, run_app
from attnexplorer.ui.window import MainWindow
from attnexplorer.ui.settings import AppSettings



@pytest.fixture
def settings(isolated, qapp):
    return AppSettings()


def args(*argv):
    return build_parser().parse_args(list(argv))


def test_a_session_file(settings, tmp_path):
    path = tmp_path / "s.json"
    session = build_preset("sine", {"N": 20}).session
    save_session(session, path)
    got, where, note = initial_session(args(str(path)), settings)
    assert got == session and where == path and note is None
    assert "clean" in reference_curves(got)  # the sine's reference curve comes from the recorded preset


def test_a_preset_with_parameters(settings):
    got, where, note = initial_session(args("--preset", "sine", "--set", "tau=0.05"), settings)
    assert got.preset.name == "sine" and got.preset.params["tau"] == 0.05
    assert got == build_preset("sine", {"tau": 0.05}).session
    assert where is None and note is None


def test_nothing_given_opens_the_last_session_else_pronoun(settings, tmp_path):
    got, where, note = initial_session(args(), settings)
    assert got.preset.name == "pronoun" and where is None and note is None
    last = tmp_path / "last.json"
    save_session(build_preset("dessert").session, last)
    settings.set_last_session(last)
    got, where, _ = initial_session(args(), settings)
    assert got.preset.name == "dessert" and where == last.resolve()
    last.write_text("{broken")
    got, where, note = initial_session(args(), settings)
    assert got.preset.name == "pronoun" and where is None
    assert "last.json" in note


@pytest.mark.parametrize("argv, error, needle", [
    (["--preset", "nope"], PresetError, "nope"),
    (["--preset", "sine", "--set", "tau=-1"], PresetError, "tau"),
    (["--preset", "sine", "--set", "bogus=1"], PresetError, "bogus"),
    (["--set", "tau=1"], PresetError, "--preset"),
    (["missing.json"], SessionError, "missing.json"),
])
def test_a_bad_command_line_raises_a_clear_error(settings, argv, error, needle):
    with pytest.raises(error, match=needle.replace("-", r"\-")):
        initial_session(args(*argv), settings)


@pytest.mark.parametrize("argv, needle", [
    (["--preset", "nope"], "unknown preset 'nope'"),
    (["nowhere.json"], "nowhere.json"),
])
def test_the_command_exits_2_with_one_line_and_no_window(tmp_path, argv, needle):
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", ATTNEXPLORER_CONFIG_DIR=str(tmp_path / "c"),
               ATTNEXPLORER_DATA_DIR=str(tmp_path / "d"))
    proc = subprocess.run([sys.executable, "-m", "attnexplorer", *argv], env=env, capture_output=True,
                          text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.startswith("attnexplorer:")]
    assert len(lines) == 1 and needle in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr


def test_run_app_opens_the_window_and_remembers_the_file(settings, tmp_path, monkeypatch):
    path = tmp_path / "open-me.json"
    save_session(build_preset("dessert").session, path)
    seen = {}

    def look_and_close():
        (window,) = [w for w in QApplication.topLevelWidgets() if isinstance(w, MainWindow) and w.isVisible()]
        seen["title"] = window.windowTitle()
        seen["session"] = window.document.session
        seen["icon"] = not window.windowIcon().isNull()
        window.close()

    QTimer.singleShot(500, look_and_close)
    assert run_app(args(str(path))) == 0
    assert seen["title"] == "open-me.json[*]"  # Qt appends the app name once
    assert seen["session"].preset.name == "dessert"
    assert seen["icon"]
    assert QApplication.applicationName() == "attnexplorer"
    assert AppSettings().last_session() == path.resolve()
    assert AppSettings().recent_files()[0] == path.resolve()
    assert AppSettings().geometry() is not None


def test_run_app_refuses_a_bad_preset_before_any_window(settings, capsys, monkeypatch):
    from PySide6.QtWidgets import QMessageBox

    shown = []
    monkeypatch.setattr(QMessageBox, "critical", staticmethod(lambda *a: shown.append(a[2])))
    assert run_app(args("--preset", "nope")) == 2
    assert "unknown preset 'nope'" in capsys.readouterr().err
    # A dialog too, wherever someone could see it (under Xvfb, not offscreen).
    assert len(shown) == (0 if QApplication.platformName() in ("offscreen", "minimal") else 1)
    assert not [w for w in QApplication.topLevelWidgets() if isinstance(w, MainWindow) and w.isVisible()]


def test_namespace_without_optional_fields_is_accepted(settings):
    got, *_ = initial_session(Namespace(), settings)
    assert got.preset.name == "pronoun"


@pytest.mark.slow
def test_the_window_paints_before_torch_is_imported_then_draws_the_result(tmp_path):
    """The start-up path up to the first paint imports no torch (it loads on the compute's
    thread afterwards, 1-3 s), and the panels are drawn once the result is in. Checked in a
    fresh interpreter, where nothing has imported torch before (the bench's start-up probe)."""
    from attnexplorer.bench.startup_probe import COMMAND

    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", ATTNEXPLORER_CONFIG_DIR=str(tmp_path / "config"),
               ATTNEXPLORER_DATA_DIR=str(tmp_path / "data"))
    # The probe, then what the start had imported by the time every panel was drawn.
    code = COMMAND.replace("sys.exit(first_paint(sys.argv[1:]))", "status = first_paint(sys.argv[1:]); "
                           "print('loaded', *[m for m in HEAVY if m in sys.modules]); sys.exit(status)")
    code = f"HEAVY = {HEAVY_AT_START!r}; {code}"
    proc = subprocess.run([sys.executable, "-c", code, "--preset", "pronoun"], capture_output=True, text=True,
                          timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr
    lines = {line.split()[0]: line.split()[1:] for line in proc.stdout.splitlines()}
    assert lines["painted"][1] == "torch=0", "torch was imported before the window first painted"
    assert float(lines["painted"][0]) < float(lines["drawn"][0])
    assert lines["loaded"] == [], "imported at start-up though the first compute needs none of it"


# What `import torch` itself does not load and the start does not need: each of these costs
# tenths of a second on the way to the first result (transformers and sympy more than torch's
# import of its own), so none may creep in through an import of ours.
HEAVY_AT_START = ("transformers", "sympy", "torch._dynamo", "torch._inductor", "scipy", "matplotlib", "pandas")


def test_the_app_imports_numpy_before_pyside6():
    """PySide6's import hook reads the source of every module that imports after it (about 60 ms
    of CPU for numpy's modules before the first paint): the ui package brings numpy in first.
    sys.modules keeps the order modules were first imported in. (On Python 3.12+ the ui package's
    binding check imports no PySide6, so the window's own Qt import is made here after it.)"""
    code = ("import sys, attnexplorer.ui.app, PySide6.QtWidgets; names = list(sys.modules); "
            "print(names.index('numpy') < names.index('PySide6'))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "True"


def test_pyside6s_import_hook_reads_module_files_without_keeping_their_lines():
    """PySide6 asks of every module imported after it whether its source names PySide6; the ui
    package has it read the file's bytes (ui/__init__.py), not go through inspect and linecache
    (torch's 880 modules on the compute thread: 0.13-0.2 s of CPU and 16 MB of kept source). The
    answers are the hook's own, and modules imported afterwards leave no lines behind."""
    code = (
        "import sys, inspect, linecache, attnexplorer.ui, attnexplorer.ui.window\n"
        "feature = sys.modules['shibokensupport.feature']\n"
        "cached = len(linecache.cache)\n"
        "import colorsys, wave\n"  # through the hook: it sees the module each import returns
        "print('kept', len(linecache.cache) - cached)\n"
        "print('flags', feature.pyside_feature_dict['colorsys'], feature.pyside_feature_dict['wave'])\n"
        "sources = [m for m in list(sys.modules.values()) if str(getattr(m, '__file__', '')).endswith('.py')]\n"
        "def theirs(m):\n"  # the hook's own test (an empty file has no source for inspect)
        "    try:\n"
        "        return 'PySide6' in inspect.getsource(m)\n"
        "    except (TypeError, OSError, SyntaxError):\n"
        "        return False\n"
        "answers = [(feature._mod_uses_pyside(m), theirs(m)) for m in sources]\n"
        "print('checked', len(answers), sum(ours for ours, _ in answers), sum(a != b for a, b in answers))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = {line.split()[0]: line.split()[1:] for line in proc.stdout.splitlines()}
    assert lines["kept"] == ["0"]
    assert lines["flags"] == ["-1", "-1"]  # neither names PySide6: ignored by its switches
    checked, using_pyside, differ = map(int, lines["checked"])
    assert checked > 300 and using_pyside > 20 and differ == 0  # the window's modules among them


def test_every_panel_says_computing_until_the_first_result(settings, qtbot):
    from attnexplorer.ui.document import SessionDocument

    document = SessionDocument(build_preset("pronoun").session, compute=False)
    window = MainWindow(document, settings)
    qtbot.addWidget(window)
    window.show()
    qtbot.waitExposed(window)
    shown = [p for p in window.panels if p.is_on_screen]
    notes = [p.findChild(QLabel, "panel-waiting") for p in shown]
    assert shown and all(note is not None and note.isVisible() for note in notes)
    assert {note.text() for note in notes} == {"computing…"}
    # Until torch is in, the compute lists hold only the document's own device and dtype.
    assert window.controls.dtype_combo.count() == 1
    document.compute.request()
    qtbot.waitUntil(lambda: document.result is not None)
    assert not any(note.isVisible() for note in notes)
    # The device and dtype lists are asked of torch once it is in (the CPU has several dtypes).
    assert window.controls.device_combo.count() >= 1 and window.controls.dtype_combo.count() > 1
    document.undo_stack.setClean()
    window.close()
    document.shutdown()


def test_a_document_with_its_result_already_in_connects_and_disconnects_nothing(settings, qtbot):
    """open_window waits for the first result before it freezes the start-up's objects out of
    the collector's reach; a document that already holds one (a lesson's session computed as the
    window opened it) has nothing to wait for. Disconnecting slots that were never connected
    raised PySide6's "Failed to disconnect" warning, an error here (warnings are errors)."""
    import gc

    from attnexplorer.ui.app import collect_after_first_result
    from attnexplorer.ui.document import SessionDocument

    document = SessionDocument(build_preset("pronoun").session, compute=False)
    document.compute.request()
    qtbot.waitUntil(lambda: document.result is not None)
    gc.disable()
    try:
        collect_after_first_result(document, collecting=True)
        assert gc.isenabled()
    finally:
        gc.enable()
        gc.unfreeze()
        document.shutdown()


@pytest.fixture
def slow_import(monkeypatch):
    """The first compute's torch import, made slow: the compute waits in it until the test
    says it is done (``finish``), or until the document is shut down (its cancel token)."""
    import threading

    import attnexplorer.app.compute as compute_module

    real = compute_module.compute_any
    state = {"importing": threading.Event(), "finish": threading.Event()}

    def compute_any(*args, cancelled=None, **kwargs):
        state["importing"].set()
        while not state["finish"].wait(0.01):  # the import: it ends when told or when shut down
            if cancelled is not None and cancelled():
                break
        return real(*args, cancelled=cancelled, **kwargs)

    monkeypatch.setattr(compute_module, "compute_any", compute_any)
    return state


def _window_importing(settings, qtbot, slow_import):
    from attnexplorer.ui.document import SessionDocument

    document = SessionDocument(build_preset("pronoun").session, compute=False)
    window = MainWindow(document, settings)
    qtbot.addWidget(window)
    window.show()
    qtbot.waitExposed(window)
    document.compute.request(background=True)  # the app's first compute, after the first paint
    assert slow_import["importing"].wait(30)
    return document, window


def test_closing_while_torch_imports_waits_for_the_import_and_ends_the_thread(settings, qtbot, slow_import):
    # Regression: closing the window while torch was still importing left the compute thread
    # running past the window ("QThread: Destroyed while thread is still running").
    document, window = _window_importing(settings, qtbot, slow_import)
    thread = document.compute.worker_thread
    window.close()  # returns at once: the import goes on
    assert not window.isVisible() and thread.is_alive()
    document.shutdown()  # what the app does once its event loop ends: the import ends, then the thread
    assert not thread.is_alive()
    QApplication.processEvents()
    assert document.result is None  # nothing computed for the closed window reached it


def test_an_import_ending_after_the_close_draws_nothing_and_fails_nothing(settings, qtbot, slow_import):
    document, window = _window_importing(settings, qtbot, slow_import)
    window.close()  # the panels are taken apart (Panel.dispose)
    slow_import["finish"].set()  # torch is in: the compute finishes for a closed window
    with qtbot.waitSignal(document.compute.settled, timeout=60000):
        pass
    assert not window.isVisible()
    document.shutdown()
    assert not document.compute.worker_thread.is_alive()


def test_a_window_not_painted_within_a_second_computes_all_the_same(settings, qtbot):
    """The first compute waits for the first paint, or a second at most. Regression: the
    second's timer asked whether it was itself still active, which a single-shot timer is not
    in its own timeout, so a first paint later than that (a busy machine: the bench's start-up
    probe hung at "painted") never started the compute, and every panel said "computing…"."""
    from attnexplorer.ui.app import _compute_after_first_paint
    from attnexplorer.ui.document import SessionDocument

    document = SessionDocument(build_preset("pronoun").session, compute=False)
    _compute_after_first_paint(QApplication.instance(), document)  # no window: nothing paints
    try:
        qtbot.waitUntil(lambda: document.result is not None, timeout=60000)
    finally:
        document.shutdown()
