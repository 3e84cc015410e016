"""Desktop integration and resources: the .desktop entry and AppStream metainfo validate and
agree with the package, the icon PNGs are the committed SVG rendered, and ``resource_path``
finds files from a checkout and from a PyInstaller bundle."""

from __future__ import annotations

import configparser
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

import attnexplorer
from attnexplorer.paths import APP_ID, ICON_SIZES, app_icon_path, resource_path, resources_dir

ROOT = Path(__file__).resolve().parent.parent
DESKTOP = ROOT / "resources" / f"{APP_ID}.desktop"
METAINFO = ROOT / "resources" / f"{APP_ID}.metainfo.xml"


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _desktop_entry() -> configparser.SectionProxy:
    parser = configparser.ConfigParser(interpolation=None)
    parser.optionxform = str  # keys are case-sensitive in desktop entries
    parser.read(DESKTOP, encoding="utf-8")
    return parser["Desktop Entry"]


# -- validators (installed here; CI installs desktop-file-utils and appstream) ---------------

@pytest.mark.skipif(shutil.which("desktop-file-validate") is None, reason="desktop-file-utils not installed")
def test_desktop_entry_validates():
    proc = subprocess.run(["desktop-file-validate", str(DESKTOP)], capture_output=True, text=True)
    assert proc.returncode == 0 and "error" not in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.skipif(shutil.which("appstreamcli") is None, reason="appstream not installed")
def test_metainfo_validates():
    proc = subprocess.run(["appstreamcli", "validate", "--no-net", str(METAINFO)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# -- the metadata agrees with the package -----------------------------------------------------

def test_desktop_entry_launches_our_command_with_our_icon():
    entry = _desktop_entry()
    command = entry["Exec"].split()[0]
    assert command in _pyproject()["project"]["scripts"]
    assert entry["TryExec"] == command
    assert entry["Icon"] == APP_ID
    assert entry["Type"] == "Application" and entry["Terminal"] == "false"


def test_metainfo_names_the_desktop_entry_and_the_current_release():
    root = ET.parse(METAINFO).getroot()
    assert root.get("type") == "desktop-application"
    assert root.findtext("id") == APP_ID
    assert root.find("launchable").text == DESKTOP.name
    assert root.find("launchable").get("type") == "desktop-id"
    newest = root.find("releases/release")
    assert newest.get("version") == attnexplorer.__version__ == _pyproject()["project"]["version"]
    assert root.find("content_rating").get("type").startswith("oars-")
    assert root.findtext("project_license") == _pyproject()["project"]["license"]["text"]
    assert root.find("screenshots/screenshot/image").text.startswith("https://")
    assert root.find("provides/binary").text in _pyproject()["project"]["scripts"]
    for required in ("name", "summary", "description", "metadata_license", "url", "developer"):
        assert root.find(required) is not None, required


# -- the icon ---------------------------------------------------------------------------------

def _pixels(image) -> np.ndarray:
    from PySide6.QtGui import QImage

    image = image.convertToFormat(QImage.Format.Format_RGBA8888)
    w, h = image.width(), image.height()
    raw = np.frombuffer(image.constBits(), dtype=np.uint8, count=image.bytesPerLine() * h)
    return raw.reshape(h, image.bytesPerLine())[:, : w * 4].reshape(h, w, 4).astype(int)


@pytest.mark.parametrize("size", ICON_SIZES)
def test_icon_png_is_the_svg_rendered_at_its_size(qapp, size):
    """The committed PNGs must be regenerated (packaging/make_icons.py) when the SVG changes."""
    from PySide6.QtGui import QImage

    sys.path.insert(0, str(ROOT / "packaging"))
    try:
        from make_icons import render_icon
    finally:
        sys.path.remove(str(ROOT / "packaging"))
    committed = QImage(str(app_icon_path(size)))
    assert (committed.width(), committed.height()) == (size, size)
    png = _pixels(committed)
    fresh = _pixels(render_icon(app_icon_path(), size))
    # Same picture, allowing for antialiasing differences between Qt versions.
    assert np.abs(png - fresh).mean() < 2.0
    alpha = png[..., 3]
    assert alpha[size // 2, size // 2] == 255 and alpha[0, 0] < 255  # a tile with rounded corners
    assert len(np.unique(png.reshape(-1, 4), axis=0)) > 3  # more than a flat square


def test_qt_reads_the_svg_icon(qapp):
    from PySide6.QtGui import QIcon

    icon = QIcon(str(app_icon_path()))
    assert not icon.isNull()
    assert not icon.pixmap(48, 48).isNull()


# -- resource_path -----------------------------------------------------------------------------

def test_resource_path_finds_the_shipped_files():
    assert resources_dir() == ROOT / "resources"  # this test suite runs against the checkout
    assert resource_path("icons/attnexplorer.svg") == ROOT / "resources" / "icons" / "attnexplorer.svg"
    assert resource_path(f"{APP_ID}.desktop").read_text().startswith("[Desktop Entry]")


@pytest.mark.parametrize("bad", ["../pyproject.toml", "/etc/passwd", "icons/../../pyproject.toml", ""])
def test_resource_path_refuses_paths_outside_the_resources(bad):
    with pytest.raises(ValueError, match="inside the resources folder"):
        resource_path(bad)


def test_resource_path_names_a_missing_file():
    with pytest.raises(FileNotFoundError, match=r"icons/nope\.svg.*looked for .*resources"):
        resource_path("icons/nope.svg")
    with pytest.raises(ValueError, match="no 20px icon"):
        app_icon_path(20)


def test_resource_path_inside_a_pyinstaller_bundle(monkeypatch, tmp_path):
    bundled = tmp_path / "attnexplorer" / "resources" / "icons"
    bundled.mkdir(parents=True)
    (bundled / "attnexplorer.svg").write_text("<svg/>")
    monkeypatch.setattr(sys, "_MEIPASS", str(tmp_path), raising=False)
    assert app_icon_path() == bundled / "attnexplorer.svg"
    with pytest.raises(FileNotFoundError):
        app_icon_path(16)  # the bundle's own folder is authoritative; no fallback to the checkout


def test_paths_module_does_not_import_qt_or_torch():
    code = "import sys, attnexplorer.paths as p; p.app_icon_path(); print(sorted(m for m in ('PySide6', 'torch') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"



# -- the tested Pythons: pyproject, README and CI name the same ones ---------------------------

def _tested_pythons() -> list[str]:
    prefix = "Programming Language :: Python :: "
    return [c[len(prefix):] for c in _pyproject()["project"]["classifiers"]
            if c.startswith(prefix) and c[len(prefix):].count(".") == 1]


def test_readme_and_requires_python_name_the_tested_pythons():
    versions = _tested_pythons()
    minors = [int(v.split(".")[1]) for v in versions]
    assert versions and all(v.startswith("3.") for v in versions)
    assert minors == list(range(minors[0], minors[-1] + 1)), "a run of minor versions, in order"
    assert _pyproject()["project"]["requires-python"] == f">={versions[0]}"
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    assert f"Python {', '.join(versions[:-1])} or {versions[-1]}: CI runs the tests on each" in readme


@pytest.mark.skipif(shutil.which("bash") is None, reason="CI's scripts are bash")
def test_ci_tests_the_pythons_pyproject_lists():
    proc = subprocess.run(["bash", str(ROOT / ".ci" / "pythons"), "--list"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    supported, *found = proc.stdout.splitlines()
    assert supported.split() == _tested_pythons()
    assert [line.split(":")[0] for line in found] == _tested_pythons()


# -- build output stays out of git -------------------------------------------------------------

@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="not a git checkout")
def test_build_output_is_git_ignored():
    for path in ("build/attnexplorer/x", "dist/attnexplorer/attnexplorer", "dist/attnexplorer-0.1.0-py3-none-any.whl"):
        proc = subprocess.run(["git", "check-ignore", "-q", path], cwd=ROOT)
        assert proc.returncode == 0, f"{path} is not ignored"
    assert subprocess.run(["git", "check-ignore", "-q", "resources/icons/attnexplorer-16.png"], cwd=ROOT).returncode == 1
