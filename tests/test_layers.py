"""The layers, checked on every import in the package (top-level and inside functions).

Data flows one way: inputs → engine → result → views. The folders show it, and this test
keeps it so (napari does the same with import-linter contracts; an AST walk needs no extra
tool and sees lazy imports inside functions too):

- ``core``: Qt-free and file-free: imports nothing from ``io``, ``ui`` or the commands.
- ``io``: Qt-free: imports ``core`` and ``io`` only.
- ``models``: real models as inputs; Qt-free, imports ``core`` and ``io`` (and torch/transformers).
- ``ui``: the only importer of Qt; never imports the commands above it.
- the top floor (``cli``, ``commands``, ``bench``, ``selftest``) may import everything.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "attnexplorer"
QT = ("PySide6", "pyqtgraph", "superqt", "shiboken6", "matplotlib")
TOP = ("attnexplorer.cli", "attnexplorer.commands", "attnexplorer.bench", "attnexplorer.selftest")

# layer -> (the attnexplorer packages it must not import, whether it must stay Qt-free)
RULES = {
    "attnexplorer.core": (("attnexplorer.io", "attnexplorer.ui", *TOP), True),
    "attnexplorer.io": (("attnexplorer.ui", *TOP), True),
    # real models are an input, like io: Qt-free, below the window and the commands
    "attnexplorer.models": (("attnexplorer.ui", *TOP), True),
    "attnexplorer.ui": (TOP, False),
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in ``path``, relative ones resolved."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.append((node.lineno, module))
            # ``from . import panels`` imports a module too: check each name as one.
            found += [(node.lineno, f"{module}.{alias.name}") for alias in node.names]
    return found


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def violations(layer: str) -> list[str]:
    forbidden, qt_free = RULES[layer]
    folder = PACKAGE.joinpath(*layer.split(".")[1:])
    out = []
    for path in sorted(folder.rglob("*.py")):
        for line, module in imports_of(path):
            bad = [p for p in forbidden if _within(module, p)]
            if qt_free:
                bad += [q for q in QT if _within(module, q)]
            if bad:
                out.append(f"{path.relative_to(PACKAGE.parent)}:{line} imports {module}")
    return out


@pytest.mark.parametrize("layer", sorted(RULES))
def test_no_layer_imports_upward(layer):
    assert violations(layer) == []


def test_the_check_sees_a_forbidden_import(tmp_path, monkeypatch):
    # A lazy, relative import of the ui from inside a core function is caught.
    fake = tmp_path / "attnexplorer"
    (fake / "core").mkdir(parents=True)
    (fake / "core" / "engine.py").write_text("def f():\n    from ..ui.figures import x\n    import PySide6.QtCore\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", fake)
    assert violations("attnexplorer.core") == [
        "attnexplorer/core/engine.py:2 imports attnexplorer.ui.figures",
        "attnexplorer/core/engine.py:2 imports attnexplorer.ui.figures.x",
        "attnexplorer/core/engine.py:3 imports PySide6.QtCore",
    ]
