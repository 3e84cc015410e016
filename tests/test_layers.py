"""The floors, checked: ``lint-imports`` against the contracts in pyproject.toml.

Data flows one way: inputs → engine → result → views. pyproject.toml declares it as
import-linter contracts (README "Development"): the floors bench → cli → selftest, commands →
ui → app → models → io → core, Qt only in ui and above, the parts of a floor that stand
alone, and no import cycle between the modules of a package. import-linter reads every
import, the lazy ones inside functions too (grimp walks the syntax tree).
"""

from __future__ import annotations

import ast
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
    _append(copy / "attnexplorer" / "core" / "inputs" / "limits.py",
            "def _probe():\n    from ...models.sources import ModelError\n    import PySide6.QtCore\n")
    proc = lint_imports(copy)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Each floor imports only the floors below it BROKEN" in proc.stdout
    assert "attnexplorer.io.atomic -> attnexplorer.models.sources" in proc.stdout
    assert "attnexplorer.core.inputs.limits -> attnexplorer.models.sources" in proc.stdout
    assert "attnexplorer.core is not allowed to import PySide6" in proc.stdout
    assert "attnexplorer.core.inputs.limits -> PySide6" in proc.stdout


def test_the_check_sees_a_cycle_and_an_import_into_the_bench(tmp_path):
    copy = _copy(tmp_path)
    _append(copy / "attnexplorer" / "core" / "inputs" / "session.py",
            "def _probe():\n    from .presets import check_params\n")
    _append(copy / "attnexplorer" / "ui" / "app.py", "def _probe():\n    from ..bench.harness import open_window\n")
    proc = lint_imports(copy)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "No import cycles between the modules of a package BROKEN" in proc.stdout
    assert ".session -> .presets" in proc.stdout or ".presets -> .session" in proc.stdout
    assert "attnexplorer.ui.app -> attnexplorer.bench.harness" in proc.stdout


def _imports_of_ours(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import of an attnexplorer module in ``path``,
    relative ones resolved, the lazy ones inside functions too."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    package = parts[:-1]  # a module's package; for __init__.py, the package itself
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - (node.level - 1)] if node.level else []
            found.append((node.lineno, ".".join(base + ([node.module] if node.module else []))))
    return [(line, name) for line, name in found if name == "attnexplorer" or name.startswith("attnexplorer.")]


def _exists(module: str) -> bool:
    path = ROOT.joinpath(*module.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file() or module == "attnexplorer.resources"


def test_every_import_of_ours_names_a_module_that_exists():
    # lint-imports skips an import it cannot resolve, and a lazy one fails only when it runs:
    # a module moved into a sub-package kept `from .core.engine import ...`, which broke
    # `attnexplorer bench` with every test passing.
    broken = [f"{path.relative_to(ROOT)}:{line} imports {module}"
              for path in sorted((ROOT / "attnexplorer").rglob("*.py"))
              for line, module in _imports_of_ours(path) if not _exists(module)]
    assert broken == []
