"""Make Qt's SVG output render the same in every SVG renderer, not only in Qt's own.

``QSvgGenerator`` writes three things that other renderers (librsvg/rsvg-convert, cairosvg,
resvg, browsers, Inkscape, PowerPoint) draw differently from the PNG export:

- **Cosmetic pens** become ``vector-effect="non-scaling-stroke"`` inside a group whose
  transform scales a heatmap cell (1 unit) to ~40 px. Renderers that ignore that attribute
  (or apply it differently) stroke the selection frame 40 px wide: big orange and black
  blobs over the data. Here such a stroke's coordinates are mapped to the page and the
  group's transform dropped, so its ``stroke-width`` is the real width in page units.
- **``font-family="Sans Serif"``** is Qt's alias for "the default sans font"; resvg finds
  no such font and draws no text. It becomes a generic stack ending in ``sans-serif``.
- **Embedded images** are scaled smoothly by most renderers (``image-rendering`` is a hint
  several ignore), so a heatmap cell became a blur. A small image (a heatmap of up to
  ``MAX_CELL_RECTS`` cells) becomes one ``<rect>`` per cell, drawn with crisp edges by every
  renderer, unless the figure's small images together pass ``MAX_FIGURE_RECTS`` cells (the
  model view's hundreds of thumbnails); a larger one keeps its image with
  ``image-rendering: pixelated``.

Only what Qt writes is handled: a flat list of ``<g transform="matrix(...)">`` groups whose
paths use absolute ``M``/``L``/``C``/``Z`` commands.
"""

from __future__ import annotations

import base64
import re
import xml.etree.ElementTree as ET

from PySide6.QtCore import QByteArray
from PySide6.QtGui import QImage

SVG_NS = "http://www.w3.org/2000/svg"
XLINK_NS = "http://www.w3.org/1999/xlink"
ET.register_namespace("", SVG_NS)
ET.register_namespace("xlink", XLINK_NS)

FONT_STACK = "DejaVu Sans, Arial, Helvetica, sans-serif"
# Qt's names for "the default sans-serif font", which no other renderer knows.
_QT_GENERIC_FAMILIES = {"sans serif", "sans", "sansserif", "helvetica", "arial", "dejavu sans"}
# A heatmap image with at most this many cells becomes one rect per cell (~70 bytes each), while
# the figure's images together have at most MAX_FIGURE_RECTS cells: the model view's 270
# thumbnails of 28 × 28 tokens would be 211,680 rects, a 14 MB file; past it they stay images.
MAX_CELL_RECTS = 4096
MAX_FIGURE_RECTS = 65536

_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
_TAG = lambda name: f"{{{SVG_NS}}}{name}"  # noqa: E731 (a one-line name builder)


def _matrix(text: str | None) -> tuple[float, ...] | None:
    if not text:
        return None
    m = re.fullmatch(r"\s*matrix\(([^)]*)\)\s*", text)
    if m is None:
        return None
    values = [float(v) for v in _NUMBER.findall(m.group(1))]
    return tuple(values) if len(values) == 6 else None


def _is_translation(m: tuple[float, ...]) -> bool:
    a, b, c, d, _e, _f = m
    return abs(a - 1) < 1e-9 and abs(d - 1) < 1e-9 and abs(b) < 1e-9 and abs(c) < 1e-9


def _fmt(v: float) -> str:
    return f"{v:.4f}".rstrip("0").rstrip(".") or "0"


def _map_pairs(text: str, m: tuple[float, ...]) -> str:
    """Every (x, y) pair of a path's ``d`` or a polyline's ``points`` mapped through ``m``.

    Qt writes absolute commands only (M, L, C, Z), so every two numbers are one point.
    """
    a, b, c, d, e, f = m
    numbers = iter(_NUMBER.finditer(text))
    out, last = [], 0
    for mx in numbers:
        my = next(numbers, None)
        if my is None:
            break
        x, y = float(mx.group()), float(my.group())
        out.append(text[last:mx.start()])
        out.append(f"{_fmt(a * x + c * y + e)},{_fmt(b * x + d * y + f)}")
        last = my.end()
    out.append(text[last:])
    return "".join(out)


def _rect_as_path(el: ET.Element) -> str:
    x, y = float(el.get("x", 0)), float(el.get("y", 0))
    w, h = float(el.get("width", 0)), float(el.get("height", 0))
    return f"M{x},{y} L{x + w},{y} L{x + w},{y + h} L{x},{y + h} Z"


def _unscale_strokes(root: ET.Element) -> None:
    """Move non-scaling strokes out of scaled groups, mapping their points to the page."""
    for parent in list(root.iter(_TAG("g"))):
        for group in list(parent):
            if group.tag != _TAG("g"):
                continue
            m = _matrix(group.get("transform"))
            cosmetic = [el for el in group if el.get("vector-effect") == "non-scaling-stroke"]
            if not cosmetic:
                continue
            if m is None or _is_translation(m):
                for el in cosmetic:
                    del el.attrib["vector-effect"]  # page units already: the width is right
                continue
            flat = ET.Element(_TAG("g"), {k: v for k, v in group.attrib.items() if k != "transform"})
            for el in cosmetic:
                group.remove(el)
                del el.attrib["vector-effect"]
                if el.tag == _TAG("rect"):
                    el = ET.Element(_TAG("path"), {k: v for k, v in el.attrib.items()
                                                   if k not in ("x", "y", "width", "height")} | {"d": _rect_as_path(el)})
                if el.tag == _TAG("path"):
                    el.set("d", _map_pairs(el.get("d", ""), m))
                elif el.tag in (_TAG("polyline"), _TAG("polygon")):
                    el.set("points", _map_pairs(el.get("points", ""), m))
                flat.append(el)
            parent.insert(list(parent).index(group) + 1, flat)


def _generic_fonts(root: ET.Element) -> None:
    for el in root.iter():
        family = el.get("font-family")
        if family is None:
            continue
        first = family.split(",")[0].strip().strip("'\"")
        if first.lower() in _QT_GENERIC_FAMILIES:
            el.set("font-family", FONT_STACK)
        else:
            el.set("font-family", f"{first}, {FONT_STACK}")


def _decode_image(href: str) -> QImage | None:
    prefix, _, data = href.partition(",")
    if not prefix.startswith("data:image/") or ";base64" not in prefix:
        return None
    image = QImage()
    if not image.loadFromData(QByteArray(base64.b64decode(data))):
        return None
    return image.convertToFormat(QImage.Format.Format_ARGB32)


def _crisp_images(root: ET.Element) -> None:
    href_key = f"{{{XLINK_NS}}}href"
    small = [image.width() * image.height() for el in root.iter() if el.tag == _TAG("image")
             for image in [_decode_image(el.get(href_key) or el.get("href") or "")]
             if image is not None and image.width() * image.height() <= MAX_CELL_RECTS]
    as_rects = sum(small) <= MAX_FIGURE_RECTS
    for parent in list(root.iter()):
        for index, el in enumerate(list(parent)):
            if el.tag != _TAG("image"):
                continue
            href = el.get(href_key) or el.get("href") or ""
            image = _decode_image(href)
            el.set("image-rendering", "optimizeSpeed")
            el.set("style", "image-rendering:pixelated;image-rendering:crisp-edges")
            if image is None or image.width() * image.height() > MAX_CELL_RECTS or not as_rects:
                continue
            x, y = float(el.get("x", 0)), float(el.get("y", 0))
            w, h = float(el.get("width", image.width())), float(el.get("height", image.height()))
            sx, sy = w / image.width(), h / image.height()
            cells = ET.Element(_TAG("g"), {"shape-rendering": "crispEdges", "stroke": "none"})
            for row in range(image.height()):
                for col in range(image.width()):
                    pixel = image.pixelColor(col, row)
                    if pixel.alpha() == 0:
                        continue  # a blocked (NaN) cell: the hatch behind shows through
                    attrs = {"x": _fmt(x + col * sx), "y": _fmt(y + row * sy), "width": _fmt(sx),
                             "height": _fmt(sy), "fill": pixel.name()}
                    if pixel.alpha() < 255:
                        attrs["fill-opacity"] = _fmt(pixel.alphaF())
                    ET.SubElement(cells, _TAG("rect"), attrs)
            parent.remove(el)
            parent.insert(index, cells)


def portable_svg(data: bytes) -> bytes:
    """Qt's SVG ``data`` rewritten to render alike in every renderer (see the module doc)."""
    root = ET.fromstring(data)
    _unscale_strokes(root)
    _generic_fonts(root)
    _crisp_images(root)
    body = ET.tostring(root, encoding="unicode")
    return ('<?xml version="1.0" encoding="UTF-8" standalone="no"?>\n' + body + "\n").encode("utf-8")
