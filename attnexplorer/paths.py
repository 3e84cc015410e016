"""Where attnexplorer's shipped files (icons, desktop metadata, preset data) live.

The top-level ``resources/`` folder of the source tree is packaged as the
``attnexplorer.resources`` package (pyproject's ``package-dir``), so one lookup serves every
way the app can be run:

- from a source checkout or an editable install: ``<checkout>/resources``;
- from an installed wheel: ``site-packages/attnexplorer/resources``;
- from a PyInstaller bundle: ``<bundle>/attnexplorer/resources`` (the spec puts it there,
  under ``sys._MEIPASS``).

Callers may rely on ``resource_path`` returning a real file-system path (Qt wants one for
icons), and on it raising ``FileNotFoundError`` naming the looked-for file when the file is
missing, rather than returning a path that does not exist. Qt-free, so core code may use it.
"""

from __future__ import annotations

import sys
from pathlib import Path, PurePosixPath

# The application id: the desktop entry, the AppStream metainfo and the installed icon are
# all named after it, as the freedesktop specifications ask.
APP_ID = "io.github.attnexplorer.AttnExplorer"

# The PNG sizes shipped next to the SVG icon (packaging/make_icons.py renders them).
ICON_SIZES = (16, 24, 32, 48, 64, 128, 256, 512)


def resources_dir() -> Path:
    """The folder that holds the shipped resources, whichever way the app was installed."""
    bundle = getattr(sys, "_MEIPASS", None)
    if bundle:
        candidate = Path(bundle) / "attnexplorer" / "resources"
        if candidate.is_dir():
            return candidate
    # Imported rather than located relative to this file: in a source checkout the
    # resources sit beside the package, not inside it, and the package mapping knows that.
    import attnexplorer.resources as package

    return Path(package.__file__).resolve().parent


def resource_path(relative: str | Path) -> Path:
    """The absolute path of a shipped file, e.g. ``resource_path("icons/attnexplorer.svg")``.

    ``relative`` uses forward slashes and must stay inside the resources folder (no absolute
    paths, no ``..``): a ``ValueError`` says so otherwise. A missing file raises
    ``FileNotFoundError`` with the full path that was looked for.
    """
    parts = PurePosixPath(str(relative).replace("\\", "/"))
    if parts.is_absolute() or ".." in parts.parts or not parts.parts:
        raise ValueError(f"resource path {str(relative)!r} must be relative and inside the resources folder")
    path = resources_dir().joinpath(*parts.parts)
    if not path.exists():
        raise FileNotFoundError(f"attnexplorer resource {str(relative)!r} is missing (looked for {path})")
    return path


def app_icon_path(size: int | None = None) -> Path:
    """The application icon: the SVG by default, or the PNG of one of ``ICON_SIZES``.

    The window sets it with ``QIcon(str(app_icon_path()))``; Qt renders the SVG at any size.
    """
    if size is None:
        return resource_path("icons/attnexplorer.svg")
    if size not in ICON_SIZES:
        raise ValueError(f"no {size}px icon; sizes: {', '.join(map(str, ICON_SIZES))}")
    return resource_path(f"icons/attnexplorer-{size}.png")
