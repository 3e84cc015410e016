"""``attnexplorer --self-test``: a headless check that an installed or bundled app works.

It exercises the same code paths as the window and ``attnexplorer export``: the shipped
resources, every preset built and computed, every result panel rendered offscreen, and a
PNG, an SVG and a PDF figure exported to a temporary folder and read back. It prints one line
per check, ``ok   <what>: <detail>`` or ``FAIL <what>: <why>``, then a summary line, and
returns 0 only when every check passed. A missing or broken piece is a ``FAIL`` line, never a
traceback, so the output of a broken bundle still says what is broken.

Qt runs on the offscreen platform unless the caller chose one (``QT_QPA_PLATFORM``).
"""

from __future__ import annotations

import os
import platform
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import TextIO

FIGURE_FORMATS = ("png", "svg", "pdf")
# A rendered panel counts as drawn when at least this share of its pixels differ from its
# most common (background) colour: an empty plot frame is well below it, any drawn matrix,
# chart or text panel well above.
MIN_DRAWN_SHARE = 0.002
PANEL_SIZE = (640, 480)


class CheckFailed(Exception):
    """A check found the app broken; its message is the whole story (no exception type shown)."""


class _Check:
    """One reported check: a context manager that turns any exception into a FAIL line."""

    def __init__(self, report: "_Report", name: str):
        self.report = report
        self.name = name
        self.detail = ""
        self.ok = False

    def __enter__(self) -> "_Check":
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc_type is None:
            self.ok = True
            self.report.line(True, self.name, self.detail)
            return False
        if not issubclass(exc_type, Exception):  # KeyboardInterrupt, SystemExit: let them go
            return False
        self.report.line(False, self.name, _describe(exc))
        return True


class _Report:
    def __init__(self, stream: TextIO):
        self.stream = stream
        self.passed = 0
        self.failed = 0

    def check(self, name: str) -> _Check:
        return _Check(self, name)

    def line(self, ok: bool, name: str, detail: str) -> None:
        if ok:
            self.passed += 1
        else:
            self.failed += 1
        text = f"{'ok  ' if ok else 'FAIL'} {name}" + (f": {detail}" if detail else "")
        print(text, file=self.stream, flush=True)


def _describe(err: BaseException) -> str:
    """One line naming the problem: our own errors read as sentences, others with their type."""
    from .core.errors import AttnExplorerError

    plain = isinstance(err, (AttnExplorerError, CheckFailed))
    text = str(err) if plain else f"{type(err).__name__}: {err}"
    text = " ".join(text.split())
    return text if len(text) <= 300 else text[:297] + "..."


# -- checks that need no Qt ------------------------------------------------------------------

def _check_resources(report: _Report) -> None:
    with report.check("resources") as c:
        from .paths import APP_ID, ICON_SIZES, app_icon_path, resource_path, resources_dir

        ET.parse(app_icon_path())
        for size in ICON_SIZES:
            if app_icon_path(size).stat().st_size == 0:
                raise CheckFailed(f"icon {app_icon_path(size)} is empty")
        resource_path(f"{APP_ID}.desktop")
        ET.parse(resource_path(f"{APP_ID}.metainfo.xml"))
        c.detail = f"icon (svg + {len(ICON_SIZES)} png sizes), desktop entry, metainfo in {resources_dir()}"


def _check_torch(report: _Report) -> None:
    with report.check("torch") as c:
        import torch

        from .core.compute.engine import available_devices

        c.detail = f"torch {torch.__version__}, devices: {', '.join(available_devices())}"


def _check_presets(report: _Report) -> list:
    """Build and compute every preset; returns [(name, BuiltPreset, AttentionResult)] that worked."""
    import numpy as np

    built_ok = []
    with report.check("presets") as c:
        from .core.inputs.presets import build_preset, list_presets

        names = [p.name for p in list_presets()]
        if not names:
            raise CheckFailed("no presets are registered")
        c.detail = ", ".join(names)
    if not c.ok:
        return built_ok
    from .core.compute.engine import compute

    for name in names:
        with report.check(f"preset {name}") as c:
            built = build_preset(name)
            result = compute(built.session, device="cpu", dtype="float32")
            weights = np.asarray(result.weights)
            if not np.all(np.isfinite(weights)):
                raise CheckFailed("the weights hold non-finite numbers")
            sums = weights.sum(axis=-1)
            blocked = np.asarray(result.blocked_rows, dtype=bool)
            live = np.broadcast_to(~blocked, sums.shape)  # blocked_rows is (n,), sums (H, n)
            if not np.allclose(sums[live], 1.0, atol=1e-4) or not np.allclose(sums[~live], 0.0):
                raise CheckFailed("a weight row does not sum to 1 (or to 0 for a fully masked row)")
            s = built.session
            c.detail = (f"computed {s.n} tokens, {s.heads} head{'s' if s.heads != 1 else ''}, "
                        f"d={s.d}")
            built_ok.append((name, built, result))
    return built_ok


# -- checks that need Qt ---------------------------------------------------------------------

def _drawn_share(image) -> float:
    """The share of pixels that differ from the image's most common colour."""
    import numpy as np
    from PySide6.QtGui import QImage

    image = image.convertToFormat(QImage.Format.Format_ARGB32)
    w, h = image.width(), image.height()
    if w == 0 or h == 0:
        return 0.0
    stride = image.bytesPerLine() // 4
    pixels = np.frombuffer(image.constBits(), dtype=np.uint32, count=stride * h).reshape(h, stride)[:, :w]
    values, counts = np.unique(pixels, return_counts=True)
    return 1.0 - counts.max() / pixels.size


def _check_window_platform(report: _Report, env: dict) -> None:
    """The window's platform plugin can load: on X11, every library ``libqxcb.so`` needs."""
    from .qt_platform import chosen_platform, platform_problem

    with report.check("window platform") as c:
        problem = platform_problem(env)
        if problem is not None:
            raise CheckFailed(problem)
        chosen = chosen_platform(env)
        c.detail = ("xcb: every library of Qt's X11 plugin is present" if chosen == "xcb"
                    else f"{chosen or 'the desktop default'}: nothing to check")


def _check_qt(report: _Report):
    """Start (or reuse) the QApplication; returns it, or None when Qt cannot start."""
    app = None
    with report.check("Qt") as c:
        import PySide6
        from PySide6.QtWidgets import QApplication

        app = QApplication.instance() or QApplication([sys.argv[0] if sys.argv else "attnexplorer"])
        c.detail = f"PySide6 {PySide6.__version__} on the {app.platformName()} platform"
    with report.check("Qt binding reference counts") as c:
        import attnexplorer.ui  # noqa: F401  (the app's own start-up guards are part of what is checked)

        c.detail = check_binding_refcounts()
    if not c.ok:
        # Rendering would call the binding many thousands of times and abort the process,
        # so the Qt checks stop here with a clear line instead of a crash.
        report.line(False, "panels and figures", "not run: the Qt binding above would crash the process")
        return None
    with report.check("Qt SVG module") as c:
        # pyqtgraph quietly drops its SVG exporter when QtSvg is missing (a trimmed bundle).
        from PySide6 import QtSvg  # noqa: F401

        import pyqtgraph as pg
        from pyqtgraph.exporters import SVGExporter  # noqa: F401

        c.detail = f"present (pyqtgraph {pg.__version__})"
    return app


def none_is_protected() -> bool:
    """True when None's reference count cannot reach zero (immortal, Python 3.12+)."""
    return sys.getrefcount(None) >= 1 << 31


def check_binding_refcounts(calls: int = 200) -> str:
    """Fail when the Qt binding loses a reference to None on each call (PySide6 6.12.0 does)
    and nothing protects None from it; returns the detail for the ok line.

    On Python < 3.12 None is an ordinary object: a binding that drops one reference per
    void call crashes the whole app ("deallocating None") after some thousands of calls,
    long after the culprit ran. On 3.12+ None is immortal and its count never moves.
    """
    import PySide6
    from PySide6.QtCore import QPointF

    point = QPointF()
    before = sys.getrefcount(None)
    for _ in range(calls):
        point.setX(1.0)
    lost = before - sys.getrefcount(None)
    if lost < calls // 2:
        return "a void call keeps None's reference count"
    if none_is_protected():
        return (f"PySide6 {PySide6.__version__} drops a reference to None on every void call; "
                "harmless here, None's count is pinned")
    raise CheckFailed(f"PySide6 {PySide6.__version__} drops a reference to None on every call and will "
                      f"crash the app on Python {platform.python_version()}; install another version "
                      "(pip install 'PySide6-Essentials!=6.12.0') or use Python 3.12 or newer")


def _check_panels(report: _Report, app, name: str, built, result) -> None:
    with report.check(f"panels {name}") as c:
        from .ui.document import SessionDocument
        from .ui.panels import make_panels

        doc = SessionDocument(built.session)
        panels = []
        try:
            if not doc.compute.wait_idle():
                raise CheckFailed("the compute did not finish")
            if doc.result is None:
                raise CheckFailed("the document has no result")
            panels = list(make_panels(doc))
            if not panels:
                raise CheckFailed("make_panels returned no panels")
            drawn, skipped, blank = [], [], []
            for panel in panels:
                if not panel.applies_to(built.session):
                    skipped.append(panel.kind)
                    continue
                panel.resize(*PANEL_SIZE)
                panel.show()
                panel.refresh()
                app.processEvents()
                share = _drawn_share(panel.grab().toImage())
                (drawn if share >= MIN_DRAWN_SHARE else blank).append(panel.kind)
            if blank:
                raise CheckFailed(f"blank when rendered: {', '.join(blank)}")
            c.detail = f"{len(drawn)} rendered ({', '.join(drawn)})"
            if skipped:
                c.detail += f"; not applicable: {', '.join(skipped)}"
        finally:
            for panel in panels:
                panel.close()
                panel.deleteLater()
            doc.shutdown()
            doc.deleteLater()
            app.processEvents()


def _check_pdf(path: Path) -> None:
    data = path.read_bytes()
    if not data.startswith(b"%PDF-"):
        raise CheckFailed(f"{path.name} does not start with a PDF header")
    if b"%%EOF" not in data[-1024:]:
        raise CheckFailed(f"{path.name} has no PDF end-of-file marker (truncated?)")
    if b"/Type /Page" not in data and b"/Type/Page" not in data:
        raise CheckFailed(f"{path.name} has no pages")


def _check_svg(path: Path) -> None:
    root = ET.parse(path).getroot()
    if not root.tag.endswith("svg"):
        raise CheckFailed(f"{path.name}: the root element is <{root.tag}>, not <svg>")
    if sum(1 for _ in root.iter()) < 3:
        raise CheckFailed(f"{path.name} draws nothing")


def _check_png(path: Path) -> None:
    from PySide6.QtGui import QImage

    image = QImage(str(path))
    if image.isNull():
        raise CheckFailed(f"{path.name} is not a readable PNG")
    if _drawn_share(image) < MIN_DRAWN_SHARE:
        raise CheckFailed(f"{path.name} is blank")


def _check_exports(report: _Report, built_ok: list) -> None:
    readers = {"png": _check_png, "svg": _check_svg, "pdf": _check_pdf}
    with tempfile.TemporaryDirectory(prefix="attnexplorer-selftest-") as tmp:
        written: list[Path] = []
        with report.check("export figures") as c:
            from .ui.exports.figure_batch import export_figures

            if not built_ok:
                raise CheckFailed("no preset computed, nothing to export")
            for name, built, result in built_ok:
                out = Path(tmp) / name
                out.mkdir()
                written += [Path(p) for p in export_figures(result, out, FIGURE_FORMATS)]
            c.detail = f"{len(written)} files for {len(built_ok)} presets"
        if not c.ok:
            return
        for fmt in FIGURE_FORMATS:
            with report.check(f"export {fmt}") as c:
                files = [p for p in written if p.suffix.lower() == f".{fmt}"]
                if not files:
                    raise CheckFailed(f"no .{fmt} figure was written")
                for path in files:
                    if not path.is_file() or path.stat().st_size == 0:
                        raise CheckFailed(f"{path.name} is missing or empty")
                    readers[fmt](path)
                c.detail = f"{len(files)} files written and read back"


def run_self_test(stream: TextIO | None = None) -> int:
    """Run every check, print one line each to ``stream`` (stdout), return 0 when all pass."""
    user_env = dict(os.environ)  # the window's platform is the one the user would get
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    stream = stream if stream is not None else sys.stdout
    report = _Report(stream)
    from . import __version__

    where = getattr(sys, "_MEIPASS", None)
    print(f"attnexplorer {__version__} self-test (Python {platform.python_version()}, "
          f"{'bundle ' + where if where else 'installed at ' + str(Path(__file__).resolve().parent)})",
          file=stream, flush=True)
    try:
        _check_resources(report)
        _check_torch(report)
        built_ok = _check_presets(report)
        _check_window_platform(report, user_env)
        app = _check_qt(report)
        if app is not None:
            for name, built, result in built_ok:
                _check_panels(report, app, name, built, result)
            _check_exports(report, built_ok)
    except Exception as err:  # a bug in the self-test itself still ends in a plain line
        report.line(False, "self-test", _describe(err))
    total = report.passed + report.failed
    if report.failed:
        print(f"self-test FAILED: {report.failed} of {total} checks failed", file=stream, flush=True)
        return 1
    print(f"self-test passed: {total} checks", file=stream, flush=True)
    return 0
