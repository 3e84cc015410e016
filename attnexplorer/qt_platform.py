"""Why Qt's window platform would fail to load, said before Qt tries (and aborts).

When a system library of Qt's X11 plugin (``libqxcb.so``) is missing, Qt prints "From 6.5.0,
xcb-cursor0 or libxcb-cursor0 is needed… Could not load the Qt platform plugin 'xcb'" and
aborts the process, whatever the missing library really is (often ``libxcb-icccm4`` or
``libxcb-keysyms1``). ``ldd`` on the plugin names the real gaps ("not found" lines), so
``attnexplorer`` and ``--self-test`` run it first and print the libraries and the command
that installs them.

Qt-free on purpose: this runs before any Qt module is imported.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Callable, Mapping

# sonames whose Debian package is not simply the soname's stem plus its version
_PACKAGE_OF = {
    "libEGL.so.1": "libegl1",
    "libGL.so.1": "libgl1",
    "libOpenGL.so.0": "libopengl0",
    "libX11-xcb.so.1": "libx11-xcb1",
    "libdbus-1.so.3": "libdbus-1-3",
    "libxkbcommon-x11.so.0": "libxkbcommon-x11-0",
    "libxkbcommon.so.0": "libxkbcommon0",
    "libfontconfig.so.1": "libfontconfig1",
    "libfreetype.so.6": "libfreetype6",
    "libglib-2.0.so.0": "libglib2.0-0",
    "libgthread-2.0.so.0": "libglib2.0-0",
}

_NOT_FOUND = re.compile(r"^\s*(\S+)\s*=>\s*not found", re.MULTILINE)


def debian_package(soname: str) -> str:
    """The Debian/Ubuntu package that ships ``soname`` (``libxcb-icccm.so.4`` → ``libxcb-icccm4``)."""
    if soname in _PACKAGE_OF:
        return _PACKAGE_OF[soname]
    match = re.fullmatch(r"(lib[\w.+-]*?)\.so\.(\d+)(?:\.\d+)*", soname)
    if match is None:
        return soname
    stem, version = match.groups()
    # Debian puts a hyphen between a stem that ends in a digit and its version (libfoo2-0).
    return f"{stem.lower()}{'-' if stem[-1].isdigit() else ''}{version}"


def missing_libraries(ldd_output: str) -> list[str]:
    """The sonames ``ldd`` reports as "not found", each once, in its order."""
    seen: dict[str, None] = {}
    for name in _NOT_FOUND.findall(ldd_output):
        seen.setdefault(name, None)
    return list(seen)


def chosen_platform(env: Mapping[str, str] | None = None) -> str | None:
    """The Qt platform a window would use here: ``QT_QPA_PLATFORM``, else "xcb" on an X11
    Linux desktop, else None (another OS, Wayland, or no display: not our concern here)."""
    env = os.environ if env is None else env
    explicit = env.get("QT_QPA_PLATFORM", "").split(":")[0].strip()
    if explicit:
        return explicit
    if sys.platform.startswith("linux") and env.get("DISPLAY") and not env.get("WAYLAND_DISPLAY"):
        return "xcb"
    return None


def xcb_plugin() -> Path | None:
    """Qt's X11 platform plugin of the PySide6 in use (None when it is not there)."""
    try:
        import importlib.util

        spec = importlib.util.find_spec("PySide6")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for base in spec.submodule_search_locations:
        plugin = Path(base) / "Qt" / "plugins" / "platforms" / "libqxcb.so"
        if plugin.is_file():
            return plugin
    return None


def run_ldd(path: Path) -> str:
    """``ldd path``'s output ("" when ldd is not available or fails)."""
    try:
        proc = subprocess.run(["ldd", str(path)], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return ""
    return proc.stdout


def install_command(packages: list[str]) -> str:
    return "sudo apt-get install -y " + " ".join(packages)


def platform_problem(env: Mapping[str, str] | None = None, *, plugin: Path | None = None,
                     ldd: Callable[[Path], str] | None = None) -> str | None:
    """One line saying which system libraries the window's platform plugin lacks, and the
    command that installs them; None when nothing is missing (or it is not xcb's case)."""
    if chosen_platform(env) != "xcb":
        return None
    plugin = plugin if plugin is not None else xcb_plugin()
    if plugin is None:
        return None
    missing = missing_libraries((ldd or run_ldd)(plugin))
    if not missing:
        return None
    packages = list(dict.fromkeys(debian_package(name) for name in missing))
    return (f"Qt cannot load its X11 platform plugin: these system libraries are missing: "
            f"{', '.join(missing)}. On Debian or Ubuntu install them with: {install_command(packages)} "
            f"(the README's set-up line installs every library Qt needs)")
