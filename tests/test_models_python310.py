"""On Python 3.10 the models extra cannot install (transformers 5.24+ needs 3.11): the message
that import-model and File ▸ Open model… show must say so, not point at an install that fails."""

import types

from attnexplorer.models import sources


def _without_transformers(monkeypatch):
    real = sources.importlib.util.find_spec
    monkeypatch.setattr(sources.importlib.util, "find_spec",
                        lambda name, *a: None if name == "transformers" else real(name, *a))


def test_python_310_is_told_that_models_need_311(monkeypatch):
    _without_transformers(monkeypatch)
    monkeypatch.setattr(sources, "sys", types.SimpleNamespace(version_info=(3, 10, 13)))
    message = sources.missing_dependencies()
    assert "transformers" in message
    assert "Python 3.11 or newer" in message and "Python 3.10" in message
    assert "pip install" not in message


def test_newer_pythons_are_told_what_to_install(monkeypatch):
    _without_transformers(monkeypatch)
    monkeypatch.setattr(sources, "sys", types.SimpleNamespace(version_info=(3, 12, 1)))
    assert sources.missing_dependencies().endswith(sources.INSTALL_HINT)
