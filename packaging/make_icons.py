"""Render resources/icons/attnexplorer.svg to the PNG sizes the desktop and the window use.

Run it after changing the SVG and commit the PNGs: ``python packaging/make_icons.py``.
Qt's own SVG renderer draws them (no extra tools), on the offscreen platform so that no
display is needed. tests/test_packaging.py checks that the committed PNGs still match.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ICONS = ROOT / "resources" / "icons"
SVG = ICONS / "attnexplorer.svg"


def render_icon(svg: Path, size: int):
    """The SVG drawn into a transparent ``size`` x ``size`` QImage (ARGB32, premultiplied)."""
    from PySide6.QtCore import Qt
    from PySide6.QtGui import QImage, QPainter
    from PySide6.QtSvg import QSvgRenderer

    renderer = QSvgRenderer(str(svg))
    if not renderer.isValid():
        raise ValueError(f"{svg}: Qt cannot read this SVG")
    image = QImage(size, size, QImage.Format.Format_ARGB32_Premultiplied)
    image.fill(Qt.GlobalColor.transparent)
    painter = QPainter(image)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    renderer.render(painter)
    painter.end()
    return image


def main() -> int:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtGui import QGuiApplication

    sys.path.insert(0, str(ROOT))
    from attnexplorer.paths import ICON_SIZES

    app = QGuiApplication.instance() or QGuiApplication([])  # noqa: F841 (fonts need it)
    for size in ICON_SIZES:
        out = ICONS / f"attnexplorer-{size}.png"
        if not render_icon(SVG, size).save(str(out), "PNG"):
            print(f"could not write {out}", file=sys.stderr)
            return 1
        print(f"wrote {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
