"""Handouts: a PDF page per step, a beamer frame per step, Markdown with SVG figures; a
hidden value is not on its step's page and appears on the next one as the answer."""

from __future__ import annotations

import re

import pytest

from attnexplorer.cli import main
from attnexplorer.io.lesson_file import builtin_lesson
from attnexplorer.ui.lesson.handout import write_handout
from attnexplorer.ui.lesson.tex import tex_text


def check_tex(text: str, folder) -> list[str]:
    """What pdflatex would choke on, found without it: non-ASCII characters, unbalanced
    braces, environments that do not nest, missing or non-PDF figures, an unescaped & % # _
    outside a tabular. Returns the frames' titles."""
    assert all(ord(c) < 128 for c in text), [c for c in text if ord(c) >= 128][:5]
    body = re.sub(r"\\[{}%&#_$]", "", text)   # escaped specials
    depth = 0
    for c in body:
        depth += {"{": 1, "}": -1}.get(c, 0)
        assert depth >= 0
    assert depth == 0
    stack = []
    for kind, name in re.findall(r"\\(begin|end)\{(\w+)\}", body):
        if kind == "begin":
            stack.append(name)
        else:
            assert stack and stack.pop() == name
    assert not stack
    for line in body.splitlines():
        assert "%" not in line and "#" not in line
        if "&" in line:
            assert line.rstrip().endswith(r"\\")   # a tabular row
        outside_math = re.sub(r"\\\[.*?\\\]|\\ensuremath\{[^{}]*(\{[^{}]*\}[^{}]*)*\}", "", line)
        assert "_" not in outside_math and "^" not in outside_math, line
    for name in re.findall(r"\\includegraphics\[[^\]]*\]\{([^}]+)\}", text):
        assert (folder / name).read_bytes().startswith(b"%PDF")
    return re.findall(r"\\begin\{frame\}\[t,shrink\]\{(.*)\}", text)


def test_tex_text_escapes_everything():
    assert tex_text("a_b & 50% #1 {x} ~^\\") == r"a\_b \& 50\% \#1 \{x\} \textasciitilde{}\textasciicircum{}\textbackslash{}"
    assert tex_text("q·kᵀ ÷√3 ▢\nnoir → black") == (r"q\ensuremath{\cdot}k\ensuremath{^{\top}} \ensuremath{\div}"
                                                    r"\ensuremath{\surd}3 \fbox{?}\\ noir \ensuremath{\rightarrow} black")
    assert tex_text("日本") == "??"


@pytest.mark.slow
def test_beamer_one_frame_per_step(tmp_path):
    lesson = builtin_lesson("pronoun")
    written = write_handout(lesson, "beamer", tmp_path / "deck")
    folder = tmp_path / "deck"
    assert written[0] == folder / "handout.tex"
    text = (folder / "handout.tex").read_text(encoding="utf-8")
    titles = check_tex(text, folder)
    assert len(titles) == len(lesson.steps)
    assert titles[3].startswith("Step 4 of 10: score(she, dog)")
    frames = text.split(r"\begin{frame}[t,shrink]")[1:]
    # Step 4 hides she's scores: its frame does not give 13.83 away; step 5's says it as the answer.
    assert "13.83" not in frames[3] and r"\fbox{?}" in frames[3]
    assert "Answer to step 4" in frames[4] and "dog (13.83)" in frames[4]
    assert r"\begin{tabular}" in frames[5] and "7.99" in frames[5]
    assert len(list((folder / "figures").glob("*.pdf"))) >= len(lesson.steps)


@pytest.mark.slow
def test_markdown_with_svg_figures(tmp_path):
    import cairosvg

    lesson = builtin_lesson("dessert")
    write_handout(lesson, "md", tmp_path)
    text = (tmp_path / "handout.md").read_text(encoding="utf-8")
    sections = text.split("\n## ")[1:]
    assert len(sections) == len(lesson.steps)
    images = re.findall(r"!\[[^\]]*\]\(([^)]+\.svg)\)", text)
    assert images and all((tmp_path / i).exists() for i in images)
    png = cairosvg.svg2png(bytestring=(tmp_path / images[-1]).read_bytes())
    assert png.startswith(b"\x89PNG")
    assert "| `scores[is]` | [-0.6004, 3.4707, -1.5023, 0.4991, 1.2903, -1.3374] |" in text
    assert "1.2903" not in sections[3].split("| quote |")[0]   # hidden on its own step
    assert "Answer to step 4" in sections[4] and "1.2903" in sections[4]


@pytest.mark.slow
def test_pdf_one_page_per_step_and_the_cli(tmp_path, capsys):
    assert main(["lesson", "translate", "--handout", "pdf", "--out", str(tmp_path / "h")]) == 0
    data = (tmp_path / "h" / "handout.pdf").read_bytes()
    assert data.startswith(b"%PDF")
    pages = len(re.findall(rb"/Type\s*/Page(?!s)", data))
    assert pages == len(builtin_lesson("translate").steps)
    assert "wrote 1 files" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["lesson", "pronoun", "--handout", "docx", "--out", "x"], "--handout 'docx' is not a handout format"),
    (["lesson", "pronoun", "--handout", "pdf"], "--handout needs --out DIR"),
    (["lesson", "nope"], "unknown lesson 'nope'"),
])
def test_the_cli_refuses_in_one_line(argv, message, capsys, tmp_path):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err
    assert not (tmp_path / "x").exists()


def test_the_cli_prints_the_steps(capsys):
    assert main(["lesson", "pronoun"]) == 0
    out = capsys.readouterr().out
    assert "Step 6 of 10: ÷√d_k" in out and "13.83 ÷ √3 = 7.99" in out
    assert "Answer to step 7 (What weight does she give dog? Type a number between 0 and 1.): 0.883" in out


@pytest.mark.slow
def test_the_beamer_deck_compiles_with_pdflatex(tmp_path):
    """Runs where pdflatex is installed (Debian: texlive-latex-base texlive-latex-recommended
    texlive-pictures, about 220 MB); the parser check above runs everywhere."""
    import shutil
    import subprocess

    if shutil.which("pdflatex") is None:
        pytest.skip("pdflatex is not installed (apt-get install texlive-latex-base texlive-latex-recommended "
                    "texlive-pictures)")
    write_handout(builtin_lesson("sine"), "beamer", tmp_path)
    done = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "handout.tex"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:]
    # The title frame, one frame per step.
    assert f"Output written on handout.pdf ({1 + len(builtin_lesson('sine').steps)} pages" in done.stdout
