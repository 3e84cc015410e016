"""One list of Qt's system libraries: packaging/debian-packages.txt, quoted by the README and
installed by CI; and the diagnosis the app prints when one of them is missing."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from attnexplorer import qt_platform

ROOT = Path(__file__).resolve().parent.parent


def listed() -> list[str]:
    lines = (ROOT / "packaging" / "debian-packages.txt").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]


def test_the_readme_apt_line_is_the_file():
    lines = [line for line in (ROOT / "README.md").read_text().splitlines()
             if line.startswith("sudo apt-get install -y ")]
    assert len(lines) == 1, lines
    assert lines[0].split()[4:] == listed()


def test_ci_installs_the_file():
    run = (ROOT / ".ci" / "run").read_text()
    assert "$(grep -v '^#' packaging/debian-packages.txt)" in run
    assert "libxcb-" not in run  # no second list to drift from the first


def test_the_list_holds_what_qts_x11_plugin_links():
    # the libraries Qt 6's xcb plugin links beyond the base system (ldd libqxcb.so)
    needed = ["libxcb-cursor.so.0", "libxcb-icccm.so.4", "libxcb-keysyms.so.1", "libxcb-image.so.0",
              "libxcb-randr.so.0", "libxcb-render-util.so.0", "libxcb-shape.so.0", "libxcb-xfixes.so.0",
              "libxkbcommon-x11.so.0", "libxkbcommon.so.0", "libEGL.so.1", "libGL.so.1",
              "libfontconfig.so.1", "libdbus-1.so.3"]
    assert {qt_platform.debian_package(name) for name in needed} <= set(listed())


LDD = """\
\tlinux-vdso.so.1 (0x00007ffd)
\tlibxcb-cursor.so.0 => /lib/x86_64-linux-gnu/libxcb-cursor.so.0 (0x00007f69)
\tlibxcb-icccm.so.4 => not found
\tlibxcb-keysyms.so.1 => not found
\tlibxcb-icccm.so.4 => not found
"""


def test_missing_libraries_and_their_packages():
    assert qt_platform.missing_libraries(LDD) == ["libxcb-icccm.so.4", "libxcb-keysyms.so.1"]
    assert qt_platform.missing_libraries("") == []
    assert qt_platform.debian_package("libxcb-icccm.so.4") == "libxcb-icccm4"
    assert qt_platform.debian_package("libxcb-render-util.so.0") == "libxcb-render-util0"
    assert qt_platform.debian_package("libxkbcommon-x11.so.0") == "libxkbcommon-x11-0"
    assert qt_platform.debian_package("libdbus-1.so.3") == "libdbus-1-3"


def test_the_problem_names_the_libraries_and_the_command(tmp_path):
    plugin = tmp_path / "libqxcb.so"
    plugin.write_bytes(b"")
    env = {"DISPLAY": ":0"}
    problem = qt_platform.platform_problem(env, plugin=plugin, ldd=lambda path: LDD)
    assert "libxcb-icccm.so.4, libxcb-keysyms.so.1" in problem
    assert "sudo apt-get install -y libxcb-icccm4 libxcb-keysyms1" in problem
    assert "cursor" not in problem.split("install")[0]
    # nothing missing, another platform, or no display: nothing to say
    assert qt_platform.platform_problem(env, plugin=plugin, ldd=lambda path: "") is None
    assert qt_platform.platform_problem({"QT_QPA_PLATFORM": "offscreen", "DISPLAY": ":0"}, plugin=plugin,
                                        ldd=lambda path: LDD) is None
    assert qt_platform.platform_problem({}, plugin=plugin, ldd=lambda path: LDD) is None
    assert qt_platform.platform_problem({"QT_QPA_PLATFORM": "xcb"}, plugin=plugin, ldd=lambda path: LDD)


def test_app_and_self_test_say_which_library_is_missing(tmp_path):
    """Run the real entry points with a plugin whose ldd has a "not found" line."""
    code = (
        "import sys, attnexplorer.qt_platform as q\n"
        "q.xcb_plugin = lambda: __import__('pathlib').Path(sys.executable)\n"
        f"q.run_ldd = lambda path: {LDD!r}\n"
        "from attnexplorer.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("QT_QPA_PLATFORM", "WAYLAND_DISPLAY")}
    env.update(DISPLAY=":93", ATTNEXPLORER_CONFIG_DIR=str(tmp_path / "c"), ATTNEXPLORER_DATA_DIR=str(tmp_path / "d"))
    app = subprocess.run([sys.executable, "-c", code, "--preset", "pronoun"], env=env, capture_output=True,
                         text=True, timeout=120)
    assert app.returncode == 2, app.stdout + app.stderr
    assert app.stderr.count("\n") == 1 and "Traceback" not in app.stderr
    assert "libxcb-icccm.so.4, libxcb-keysyms.so.1" in app.stderr
    assert "sudo apt-get install -y libxcb-icccm4 libxcb-keysyms1" in app.stderr
    assert "Could not load the Qt platform plugin" not in app.stderr
    test = subprocess.run([sys.executable, "-c", code, "--self-test"], env=env, capture_output=True, text=True,
                          timeout=600)
    assert test.returncode == 1
    line = [ln for ln in test.stdout.splitlines() if ln.startswith("FAIL window platform:")]
    assert line and "sudo apt-get install -y libxcb-icccm4 libxcb-keysyms1" in line[0], test.stdout
    assert re.search(r"^self-test FAILED: 1 of \d+ checks failed$", test.stdout, re.MULTILINE), test.stdout
