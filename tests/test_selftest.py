"""``attnexplorer --self-test``: passes on this install, and says FAIL (never a traceback)
for each kind of breakage it exists to catch.

The breakage tests run the self-test in-process on a stand-in preset, stand-in panels and a
stand-in figure exporter, so that each fault can be planted exactly; the first test runs
the real thing in a fresh process from another folder.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from attnexplorer import selftest
from attnexplorer.core.errors import PresetError
from attnexplorer.core.inputs.presets import BuiltPreset, Preset
from attnexplorer.core.inputs.session import Mask, Session


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


@pytest.mark.slow
def test_self_test_passes_on_this_install(tmp_path):
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    proc = subprocess.run([sys.executable, "-m", "attnexplorer", "--self-test"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert "Traceback" not in out + proc.stderr
    checks = _lines(out)[1:-1]  # between the header and the summary
    assert checks and all(line.startswith("ok   ") for line in checks), out
    from attnexplorer.core.inputs.presets import list_presets

    for preset in list_presets():
        assert any(line.startswith(f"ok   preset {preset.name}: computed ") for line in checks), out
        assert any(line.startswith(f"ok   panels {preset.name}: ") for line in checks), out
    for fmt in ("png", "svg", "pdf"):
        assert any(line.startswith(f"ok   export {fmt}: ") for line in checks), out
    assert _lines(out)[-1] == f"self-test passed: {len(checks)} checks"


# -- stand-ins for the pieces, so that each fault can be planted ------------------------------

def _tiny_session() -> Session:
    rng = np.random.default_rng(0)
    return Session(tokens=("a", "b", "c"), embeddings=rng.normal(size=(3, 2)),
                   w_query=rng.normal(size=(1, 2, 2)), w_key=rng.normal(size=(1, 2, 2)),
                   w_value=rng.normal(size=(1, 2, 2)), mask=Mask("causal"))


def _tiny_build(params):
    return BuiltPreset(_tiny_session())


def _broken_build(params):
    raise PresetError("parameter N: 0 is outside 2..500")


class _Fakes:
    """What the planted pieces do; each test flips one thing."""

    def __init__(self):
        self.build = _tiny_build
        self.blank_panel = False
        self.pdf_bytes = None  # None: a real PDF
        self.svg_text = None
        self.formats = ("png", "svg", "pdf")


@pytest.fixture
def fakes(monkeypatch, qapp):
    from PySide6.QtCore import Qt
    from PySide6.QtGui import QColor, QImage, QPainter, QPageSize, QPdfWriter

    from attnexplorer.core.inputs import presets
    from attnexplorer.ui.panels.base import Panel

    f = _Fakes()
    # These tests plant faults in the app's own pieces; whether this machine's Qt binding
    # leaks None (PySide6 6.12.0 on Python 3.11) is checked by the tests below instead.
    monkeypatch.setattr(selftest, "check_binding_refcounts", lambda: "checked elsewhere")
    monkeypatch.setattr(presets, "registry", lambda: {
        "tiny": Preset("tiny", "Tiny", "three tokens", (), lambda params: f.build(params))})

    class DrawnPanel(Panel):
        kind, title = "drawn", "Drawn"

        def refresh(self):
            self.update()

        def paintEvent(self, event):
            painter = QPainter(self)
            painter.fillRect(self.rect(), QColor("white"))
            if not f.blank_panel:
                painter.fillRect(10, 10, 100, 80, QColor("darkblue"))
            painter.end()

    class OnlyForLongSessions(DrawnPanel):
        kind = "long"

        def applies_to(self, session):
            return session.n > 100

    panels_module = types.ModuleType("attnexplorer.ui.panels")
    panels_module.make_panels = lambda doc: [DrawnPanel(doc), OnlyForLongSessions(doc)]
    monkeypatch.setitem(sys.modules, "attnexplorer.ui.panels", panels_module)

    def export_figures(result, out_dir, formats):
        written = []
        for fmt in formats:
            if fmt not in f.formats:
                continue
            path = Path(out_dir) / f"weights.{fmt}"
            if fmt == "png":
                image = QImage(64, 48, QImage.Format.Format_ARGB32)
                image.fill(Qt.GlobalColor.white)
                painter = QPainter(image)
                painter.fillRect(4, 4, 30, 20, QColor("darkred"))
                painter.end()
                image.save(str(path))
            elif fmt == "svg":
                path.write_text(f.svg_text if f.svg_text is not None else
                                '<svg xmlns="http://www.w3.org/2000/svg"><g><text>a</text></g></svg>')
            elif f.pdf_bytes is not None:
                path.write_bytes(f.pdf_bytes)
            else:
                writer = QPdfWriter(str(path))
                writer.setPageSize(QPageSize(QPageSize.PageSizeId.A6))
                painter = QPainter(writer)
                painter.drawText(100, 100, "weights")
                painter.end()
            written.append(path)
        return written

    figures_module = types.ModuleType("attnexplorer.ui.exports.figure_batch")
    figures_module.export_figures = export_figures
    monkeypatch.setitem(sys.modules, "attnexplorer.ui.exports.figure_batch", figures_module)
    return f


def _run() -> tuple[int, list[str]]:
    out = io.StringIO()
    code = selftest.run_self_test(stream=out)
    text = out.getvalue()
    assert "Traceback" not in text
    return code, _lines(text)


def test_all_ok_prints_one_ok_line_per_check(fakes):
    code, lines = _run()
    assert code == 0, lines
    assert "ok   preset tiny: computed 3 tokens, 1 head, d=2" in lines
    assert "ok   panels tiny: 1 rendered (drawn); not applicable: long" in lines
    assert any(line.startswith("ok   export pdf: 1 files") for line in lines)
    assert lines[-1] == f"self-test passed: {len(lines) - 2} checks"


def test_a_preset_that_fails_to_build_is_a_fail_line(fakes):
    fakes.build = _broken_build
    code, lines = _run()
    assert code == 1
    assert "FAIL preset tiny: parameter N: 0 is outside 2..500" in lines
    assert lines[-1].startswith("self-test FAILED: ")


def test_a_blank_panel_is_named(fakes):
    fakes.blank_panel = True
    code, lines = _run()
    assert code == 1
    assert "FAIL panels tiny: blank when rendered: drawn" in lines, "\n".join(lines)


@pytest.mark.parametrize("pdf", [b"", b"%PDF-1.4\n1 0 obj", b"<html>not a pdf</html>\n%%EOF"])
def test_a_broken_pdf_is_caught(fakes, pdf):
    fakes.pdf_bytes = pdf
    code, lines = _run()
    assert code == 1
    assert any(line.startswith("FAIL export pdf: weights.pdf") for line in lines), lines
    assert any(line.startswith("ok   export png") for line in lines)


def test_an_unparsable_svg_is_caught(fakes):
    fakes.svg_text = "<svg><g>"  # truncated
    code, lines = _run()
    assert code == 1
    assert any(line.startswith("FAIL export svg: ParseError") for line in lines), lines


def test_a_format_the_exporter_skipped_is_caught(fakes):
    fakes.formats = ("png", "pdf")  # e.g. pyqtgraph without QtSvg writes no SVG
    code, lines = _run()
    assert code == 1
    assert "FAIL export svg: no .svg figure was written" in lines


def test_a_missing_figure_module_is_a_fail_line_not_a_crash(fakes, monkeypatch):
    monkeypatch.setitem(sys.modules, "attnexplorer.ui.exports.figure_batch", None)  # import now fails
    code, lines = _run()
    assert code == 1
    assert any(line.startswith("FAIL export figures: ModuleNotFoundError") for line in lines), lines
    assert "ok   panels tiny: 1 rendered (drawn); not applicable: long" in lines


def test_missing_resources_are_reported(fakes, monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "_MEIPASS", str(tmp_path), raising=False)
    (tmp_path / "attnexplorer" / "resources").mkdir(parents=True)  # an empty bundle folder
    code, lines = _run()
    assert code == 1
    assert any(line.startswith("FAIL resources: FileNotFoundError") and "attnexplorer.svg" in line
               for line in lines), lines


# -- the Qt binding's reference counting --------------------------------------------------------

@pytest.fixture
def leaky_point(monkeypatch):
    """A stand-in QPointF whose setX drops a reference to None, as PySide6 6.12.0's void calls do."""
    import ctypes

    import PySide6.QtCore

    dropped = []

    class LeakyPoint:
        def setX(self, x):
            ctypes.pythonapi.Py_DecRef(ctypes.py_object(None))
            dropped.append(1)

    monkeypatch.setattr(PySide6.QtCore, "QPointF", LeakyPoint)
    yield dropped
    for _ in dropped:  # give None its references back
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(None))


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="None is immortal from Python 3.12: nothing to lose")
def test_binding_check_catches_a_binding_that_drops_none(leaky_point, monkeypatch, qapp):
    monkeypatch.setattr(selftest, "none_is_protected", lambda: False)
    with pytest.raises(selftest.CheckFailed, match="drops a reference to None on every call"):
        selftest.check_binding_refcounts()
    assert len(leaky_point) == 200


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="None is immortal from Python 3.12: nothing to lose")
def test_binding_check_accepts_a_leak_when_none_is_pinned(leaky_point, monkeypatch, qapp):
    monkeypatch.setattr(selftest, "none_is_protected", lambda: True)
    assert "harmless here" in selftest.check_binding_refcounts()


def test_the_ui_package_protects_none_or_the_binding_keeps_it(qapp):
    import attnexplorer.ui  # noqa: F401

    from PySide6.QtCore import QPointF

    point, before = QPointF(), sys.getrefcount(None)
    for _ in range(100):
        point.setX(1.0)
    assert before - sys.getrefcount(None) < 50 or selftest.none_is_protected()
    selftest.check_binding_refcounts()  # and the self-test agrees: no CheckFailed


def test_a_leaking_binding_stops_before_rendering(fakes, monkeypatch):
    def leaking():
        raise selftest.CheckFailed("PySide6 9.9 drops a reference to None on every call")

    monkeypatch.setattr(selftest, "check_binding_refcounts", leaking)
    code, lines = _run()
    assert code == 1
    assert "FAIL panels and figures: not run: the Qt binding above would crash the process" in lines
    assert not any(line.startswith(("ok   panels", "ok   export")) for line in lines)
