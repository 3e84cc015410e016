"""`attnexplorer export --figures`: figures with no display, with the documented file names."""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest


def run_cli(*args, cwd):
    env = {k: v for k, v in os.environ.items() if k not in ("QT_QPA_PLATFORM", "DISPLAY", "WAYLAND_DISPLAY")}
    return subprocess.run([sys.executable, "-m", "attnexplorer", *args], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=300)


def test_export_figures_with_no_display(tmp_path):
    out = tmp_path / "out"
    proc = run_cli("export", "--preset", "dessert", "--out", str(out), "--matrices", "json",
                   "--figures", "png,svg,pdf", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    folder = out / "figures"
    names = sorted(p.name for p in folder.iterdir())
    for fmt in ("png", "svg", "pdf"):
        for kind in ("dashboard", "weights", "scores", "scaled_scores", "qkv", "output"):
            assert f"{kind}.{fmt}" in names, (kind, fmt, names)
    assert not any(n.startswith("explain.") for n in names)
    assert (folder / "weights.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert ET.parse(folder / "dashboard.svg").getroot().tag.endswith("svg")
    assert (folder / "dashboard.pdf").read_bytes().startswith(b"%PDF")
    assert "figures/" in proc.stdout
    # nothing but the export itself is left in the folder (no staging or temporary files)
    assert sorted(p.name for p in out.iterdir()) == ["attention.json", "figures", "session.json"]


@pytest.mark.parametrize("figures_arg", ["gif", "png,jpeg"])
def test_an_unknown_figure_format_is_one_line_and_writes_nothing(tmp_path, figures_arg):
    out = tmp_path / "out"
    proc = run_cli("export", "--preset", "pronoun", "--out", str(out), "--figures", figures_arg, cwd=tmp_path)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "--figures" in lines[0], proc.stderr
    assert not out.exists()


def _orange_pixels(path) -> int:
    """Pixels of the selection's orange (#ff8c00) in a PNG."""
    import numpy as np
    from PySide6.QtGui import QImage

    image = QImage(str(path)).convertToFormat(QImage.Format.Format_RGB888)
    w, h, stride = image.width(), image.height(), image.bytesPerLine()
    rgb = np.frombuffer(bytes(image.constBits()), np.uint8).reshape(h, stride)[:, : 3 * w].reshape(h, w, 3).astype(int)
    return int((np.abs(rgb - [255, 140, 0]).max(axis=2) <= 30).sum())


def test_figures_leave_the_selection_out_unless_asked(tmp_path):
    plain, marked = tmp_path / "plain", tmp_path / "marked"
    for out, extra in ((plain, []), (marked, ["--selection"])):
        proc = run_cli("export", "--preset", "pronoun", "--out", str(out), "--figures", "png", *extra, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
    for kind in ("weights", "scores", "qkv"):
        assert _orange_pixels(plain / "figures" / f"{kind}.png") == 0, kind
        assert _orange_pixels(marked / "figures" / f"{kind}.png") > 100, kind
