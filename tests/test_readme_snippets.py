"""Every Python snippet of the README runs as written (issue 27, item 11: the notebook
snippet called ``explain_cell(s, r, head=…)``, which raises TypeError: the functions take the
result). The snippets of one section share a namespace, as in one notebook."""

import re
import sys
from pathlib import Path

import numpy as np
import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def _sections() -> dict[str, list[str]]:
    """{section heading: its ```python blocks in order}."""
    sections: dict[str, list[str]] = {}
    heading = ""
    text = README.read_text(encoding="utf-8")
    for match in re.finditer(r"^(#{2,3} [^\n]+)$|^```python\n(.*?)^```", text, re.M | re.S):
        if match[1]:
            heading = match[1].lstrip("# ").strip()
        else:
            sections.setdefault(heading, []).append(match[2])
    return sections


SECTIONS = _sections()
SLOW = {"Long inputs"}                 # 16,384 tokens streamed: tens of seconds on a busy machine
MODELS = {"Real models"}               # needs the models extra (Python 3.11+)


def test_the_readme_has_the_snippets_this_test_runs():
    assert {"Real models", "From a notebook", "Long inputs"} <= set(SECTIONS), sorted(SECTIONS)


def _params():
    for name in sorted(SECTIONS):
        marks = [pytest.mark.slow] if name in SLOW else []
        yield pytest.param(name, marks=marks, id=name.replace(" ", "-"))


@pytest.mark.parametrize("section", list(_params()))
def test_every_python_snippet_runs_as_written(section, tmp_path, monkeypatch):
    if section in MODELS and sys.version_info < (3, 11):
        pytest.skip("real models need transformers 5.24+, which needs Python 3.11+")
    monkeypatch.chdir(tmp_path)           # ax.save_session(s2, "mine.json") writes here
    namespace: dict = {}
    for block in SECTIONS[section]:
        exec(compile(block, f"README.md ({section})", "exec"), namespace)
    if section == "From a notebook":
        # the numbers the README quotes in its comments
        r = namespace["ax"].compute(namespace["ax"].build_preset("dessert").session)
        assert np.allclose(r.scores[0, 1][:2], [-0.6004, 3.4707], atol=1e-4)
        assert np.allclose(r.weights[0, 1][:2], [0.0386, 0.6870], atol=1e-4)
        assert (tmp_path / "mine.json").is_file()
