"""The floors, checked: ``lint-imports`` against the contracts in pyproject.toml.

Data flows one way: inputs → engine → result → views. pyproject.toml declares it as
import-linter contracts (README "Development"): the floors bench → cli → selftest, commands →
ui → app → models → io → core, Qt only in ui and above, the parts of a floor that stand
alone, and no import cycle between the modules of a package. import-linter reads every
import, the lazy ones inside functions too (grimp walks the syntax tree).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# import-linter's own command (``lint-imports``), run by this Python in a folder: it reads
# that folder's pyproject.toml and analyses the attnexplorer package found there first.
LINT = "import sys; from importlinter.cli import lint_imports; sys.exit(lint_imports(no_cache=True, no_logo=True))"


def lint_imports(folder: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", LINT], cwd=folder, capture_output=True, text=True, timeout=300)


def test_every_import_keeps_the_contracts():
    proc = lint_imports(ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 broken" in proc.stdout


def _copy(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "attnexplorer", tmp_path / "attnexplorer", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def _append(path: Path, code: str) -> None:
    path.write_text(path.read_text() + "\n\n" + code)


def test_the_check_sees_a_lazy_import_that_climbs_or_reaches_qt(tmp_path):
    # The holes of the hand-made check this replaced: io and core importing real models.
    copy = _copy(tmp_path)
    _append(copy / "attnexplorer" / "io" / "atomic.py", "def _probe():\n    from ..models import sources\n")
    _append(copy / "attnexplorer" / "core" / "limits.py",
            "def _probe():\n    from ..models.sources import ModelError\n    import PySide6.QtCore\n")
    proc = lint_imports(copy)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Each floor imports only the floors below it BROKEN" in proc.stdout
    assert "attnexplorer.io.atomic -> attnexplorer.models.sources" in proc.stdout
    assert "attnexplorer.core.limits -> attnexplorer.models.sources" in proc.stdout
    assert "attnexplorer.core is not allowed to import PySide6" in proc.stdout
    assert "attnexplorer.core.limits -> PySide6" in proc.stdout


def test_the_check_sees_a_cycle_and_an_import_into_the_bench(tmp_path):
    copy = _copy(tmp_path)
    _append(copy / "attnexplorer" / "core" / "session.py", "def _probe():\n    from .presets import check_params\n")
    _append(copy / "attnexplorer" / "ui" / "app.py", "def _probe():\n    from ..bench.harness import open_window\n")
    proc = lint_imports(copy)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "No import cycles between the modules of a package BROKEN" in proc.stdout
    assert ".session -> .presets" in proc.stdout or ".presets -> .session" in proc.stdout
    assert "attnexplorer.ui.app -> attnexplorer.bench.harness" in proc.stdout
