"""Handouts of a lesson: a PDF with one page per step, a LaTeX beamer deck with one frame
per step, or Markdown with SVG figures, written into a folder.

Every step's figures are its panels drawn offscreen from one result (``figure_batch.
offscreen_panels``, the route ``attnexplorer export --figures`` takes) with the step's
selection and its hidden values covered; they are vector graphics (PDF, SVG). The numbers a
step quotes are a table beside them, and a hidden value appears on the next page as the
answer (``core/lessons/pages.py``). Everything is written to a staging folder and moved into
the target folder only when all of it succeeded (``io.atomic.atomic_directory``).

Files: ``handout.pdf``; ``handout.tex`` and ``figures/stepNN-<panel>.pdf``; ``handout.md``
and ``figures/stepNN-<panel>.svg``.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QMarginsF, QPointF, QRectF, QSizeF, Qt
from PySide6.QtGui import QColor, QFont, QFontMetricsF, QPageLayout, QPageSize, QPainter, QPdfWriter
from PySide6.QtWidgets import QApplication

from ...core.lessons import LessonError, quotes
from ...core.lessons.pages import Page, handout_pages
from .step_panels import TELLING_KINDS
from .covers import cover_panels
from .tex import tex_text

FORMATS = ("pdf", "beamer", "md")
PAGE_MARGIN = 36.0


def write_handout(lesson, fmt: str, out_dir, session=None, dtype: str = "float32") -> list[Path]:
    """Write the handout of ``lesson`` (over ``session``: the one edited in class, default the
    lesson's own) as ``fmt`` into ``out_dir``; the paths written. LessonError for an unknown
    format; WriteError when the folder cannot be written (nothing half-written is left)."""
    if fmt not in FORMATS:
        raise LessonError(f"handout format {fmt!r} is not supported; choose one of {', '.join(FORMATS)}")
    from ...core.compute.engine import compute
    from ...io.atomic import atomic_directory
    from ..exports.figures import exportable  # before figure_batch, which it imports at its end
    from ..exports.figure_batch import offscreen_panels

    session = lesson.session if session is None else session
    result = compute(session, dtype=dtype)
    pages = handout_pages(lesson, result)
    figure_fmt = {"pdf": None, "beamer": "pdf", "md": "svg"}[fmt]
    with atomic_directory(out_dir) as stage, offscreen_panels(result) as (source, shown):
        by_kind = {p.kind: p for p in exportable(shown)}
        covers: dict = {}
        figures: list[list[tuple[str, object]]] = []
        files: dict[tuple[int, str], str] = {}
        pdf = _PdfHandout(stage / "handout.pdf", lesson.title) if fmt == "pdf" else None
        for page in pages:
            _show_step(source, shown, page, result, covers)
            # As in the window, the panels that spell the selected query out wait for the answer.
            kinds = [k for k in page.panels if k in by_kind and not (page.hidden and k in TELLING_KINDS)]
            if figure_fmt is not None:
                from ..exports.figures import export_panel

                for kind in kinds:
                    # Hyphens, not underscores: a file name LaTeX reads needs no escaping.
                    name = f"figures/step{page.number:02d}-{kind.replace('_', '-')}.{figure_fmt}"
                    (stage / "figures").mkdir(exist_ok=True)
                    export_panel(by_kind[kind], stage / name, figure_fmt)
                    files[(page.number, kind)] = name
            if pdf is not None:
                pdf.page(page, [by_kind[k] for k in kinds])
            figures.append(kinds)
        if pdf is not None:
            pdf.finish()
        elif fmt == "beamer":
            (stage / "handout.tex").write_text(beamer(lesson.title, pages, files), encoding="utf-8")
        else:
            (stage / "handout.md").write_text(markdown(lesson.title, pages, files), encoding="utf-8")
        # The handout itself first, then its figures.
        written = sorted((p.relative_to(stage) for p in stage.rglob("*") if p.is_file() and not p.name.startswith(".")),
                         key=lambda p: (len(p.parts), str(p)))
    return [Path(out_dir) / p for p in written]


def _show_step(source, panels, page: Page, result, covers: dict) -> None:
    """The offscreen panels as the class saw the step: its selection, its values covered."""
    session = result.session
    keys = result.key_tokens
    query, key = page.select
    try:
        i = None if query is None else quotes.token_index(query, session.tokens, "token", "select")
        j = None if key is None else quotes.token_index(key, keys, "key", "select")
    except quotes.QuoteError:
        i = j = None
    source.selection.set(query=i, key=j)
    cover_panels(panels, page.hidden, result, source.selection.current.head, covers)
    QApplication.processEvents()


# -- PDF --------------------------------------------------------------------------------------------
class _PdfHandout:
    """A4 landscape pages at the figures' resolution (logical px = device px)."""

    def __init__(self, path: Path, title: str):
        from ..exports.figure_paint import _dpi

        self.writer = QPdfWriter(str(path))
        self.writer.setResolution(_dpi())
        self.writer.setTitle(title)
        self.writer.setCreator("attnexplorer")
        self.writer.setPageLayout(QPageLayout(QPageSize(QPageSize.PageSizeId.A4), QPageLayout.Orientation.Landscape,
                                              QMarginsF(0, 0, 0, 0)))
        self.painter: QPainter | None = None
        rect = self.writer.pageLayout().fullRectPixels(self.writer.resolution())
        self.size = QSizeF(rect.width(), rect.height())

    def page(self, page: Page, panels) -> None:
        if self.painter is None:
            self.painter = QPainter(self.writer)
            self.painter.setRenderHint(QPainter.RenderHint.Antialiasing, True)
            self.painter.setRenderHint(QPainter.RenderHint.TextAntialiasing, True)
        else:
            self.writer.newPage()
        p = self.painter
        w, h, m = self.size.width(), self.size.height(), PAGE_MARGIN
        y = m
        if page.answer:
            y = self._text(QRectF(m, y, w - 2 * m, h), page.answer, 13, color=QColor("#1a5e20"), italic=True) + 8
        y = self._text(QRectF(m, y, w - 2 * m, h), page.heading, 22, bold=True) + 4
        if page.formula:
            y = self._text(QRectF(m, y, w - 2 * m, h), page.formula, 18, italic=True) + 6
        if page.text:
            y = self._text(QRectF(m, y, w - 2 * m, h), page.text, 13) + 6
        if page.question:
            y = self._text(QRectF(m, y, w - 2 * m, h), f"Question: {page.question}", 13, bold=True) + 6
        table_w = 300.0 if page.numbers else 0.0
        if page.numbers:
            self._table(QRectF(w - m - table_w, y, table_w, h - m - y), page.numbers)
        if panels:
            from ..exports.figure_paint import _panel_figure

            area = QRectF(m, y, w - 2 * m - table_w - (12 if table_w else 0), h - m - y)
            # The figures in the grid (1 to n columns) that gives each one the most room,
            # each laid out afresh at its cell's size, between square and 16:9 (its text keeps
            # its size; only a figure that cannot be laid out again is scaled).
            def room(cols):
                rows = -(-len(panels) // cols)
                w, h = area.width() / cols, area.height() / rows
                return min(w, h * 1.8) * min(h, w)

            cols = max(range(1, len(panels) + 1), key=room)
            rows = -(-len(panels) // cols)
            cell = QSizeF(area.width() / cols, area.height() / rows)
            for k, panel in enumerate(panels):
                fig = _panel_figure(panel, selection=True)
                r, c = divmod(k, cols)
                box = QRectF(area.left() + c * cell.width(), area.top() + r * cell.height(),
                             cell.width() - 8, cell.height() - 8)
                natural = fig.natural
                size = QSizeF(min(box.width(), box.height() * 1.8), min(box.height(), box.width()))
                if not fig.flexible:
                    aspect = natural.width() / max(natural.height(), 1.0)
                    size = QSizeF(min(box.width(), box.height() * aspect), min(box.height(), box.width() / aspect))
                p.save()
                p.translate(box.topLeft())
                if fig.flexible:
                    fig.paint(p, size, True, 1.0)
                else:
                    s = size.width() / natural.width()
                    p.scale(s, s)
                    fig.paint(p, natural, True, s)
                p.restore()

    def _text(self, rect: QRectF, text: str, px: int, bold=False, italic=False, color=None) -> float:
        """Draw wrapped ``text`` at the top of ``rect``; the y below it."""
        font = QFont()
        font.setPixelSize(px)
        font.setBold(bold)
        font.setItalic(italic)
        self.painter.setFont(font)
        self.painter.setPen(color or QColor("black"))
        flags = int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop) | int(Qt.TextFlag.TextWordWrap)
        bound = QFontMetricsF(font).boundingRect(rect, flags, text)
        self.painter.drawText(rect, flags, text)
        return rect.top() + bound.height()

    def _table(self, rect: QRectF, numbers) -> None:
        font = QFont()
        font.setPixelSize(12)
        metrics = QFontMetricsF(font)
        flags = int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop) | int(Qt.TextFlag.TextWordWrap)
        p = self.painter
        p.setFont(font)
        y = rect.top()
        label_w = rect.width() * 0.42
        p.setPen(QColor("#555555"))
        p.drawLine(QPointF(rect.left(), y), QPointF(rect.right(), y))
        for what, value in numbers:
            a = metrics.boundingRect(QRectF(0, 0, label_w - 6, 1e6), flags, what).height()
            b = metrics.boundingRect(QRectF(0, 0, rect.width() - label_w, 1e6), flags, value).height()
            row = max(a, b) + 6
            if y + row > rect.bottom():
                break
            p.setPen(QColor("black"))
            p.drawText(QRectF(rect.left(), y + 3, label_w - 6, row), flags, what)
            p.drawText(QRectF(rect.left() + label_w, y + 3, rect.width() - label_w, row), flags, value)
            y += row
            p.setPen(QColor("#bbbbbb"))
            p.drawLine(QPointF(rect.left(), y), QPointF(rect.right(), y))

    def finish(self) -> None:
        if self.painter is not None:
            self.painter.end()
        del self.writer


# -- LaTeX beamer --------------------------------------------------------------------------------------
def beamer(title: str, pages: list[Page], files: dict) -> str:
    """The beamer deck: one frame per step (and one for the last answer), figures as PDF,
    numbers as a tabular. Plain pdflatex: ASCII only, every special character escaped."""
    out = [r"\documentclass[aspectratio=169]{beamer}", r"\usepackage{graphicx}", r"\usepackage{amsmath}",
           r"\usepackage{amssymb}", r"\setbeamertemplate{navigation symbols}{}",
           rf"\title{{{tex_text(title)}}}", r"\author{attnexplorer}", r"\date{}", r"\begin{document}",
           r"\begin{frame}", r"\titlepage", r"\end{frame}", ""]
    for page in pages:
        out.append(rf"\begin{{frame}}[t,shrink]{{{tex_text(page.heading)}}}")
        if page.answer:
            out.append(rf"{{\small\itshape {tex_text(page.answer)}}}\par\medskip")
        if page.latex:
            out.append(rf"\[ {page.latex} \]")
        elif page.formula:
            out.append(rf"\begin{{center}}\itshape {tex_text(page.formula)}\end{{center}}")
        if page.text:
            out.append(rf"{{\small {tex_text(page.text)}}}\par\medskip")
        if page.question:
            out.append(rf"{{\small\bfseries Question: {tex_text(page.question)}}}\par\medskip")
        figures = [files[(page.number, k)] for k in page.panels if (page.number, k) in files]
        if figures or page.numbers:
            out.append(r"\begin{columns}[T]")
            if figures:
                width = 0.62 if page.numbers else 0.98
                out.append(rf"\begin{{column}}{{{width}\textwidth}}")
                each = 0.98 / len(figures)
                out.extend(rf"\includegraphics[width={each:.2f}\linewidth]{{{f}}}" for f in figures)
                out.append(r"\end{column}")
            if page.numbers:
                out.append(rf"\begin{{column}}{{{0.36 if figures else 0.98}\textwidth}}")
                out.append(r"{\scriptsize\begin{tabular}{@{}ll@{}}")
                out.append(r"\hline")
                for what, value in page.numbers:
                    lines = r"\\".join(tex_text(v) for v in value.splitlines())
                    cell = rf"\begin{{tabular}}[t]{{@{{}}l@{{}}}}{lines}\end{{tabular}}" if "\n" in value else lines
                    out.append(rf"{tex_text(what)} & {cell} \\")
                out.append(r"\hline")
                out.append(r"\end{tabular}}")
                out.append(r"\end{column}")
            out.append(r"\end{columns}")
        out.append(r"\end{frame}")
        out.append("")
    out.append(r"\end{document}")
    return "\n".join(out) + "\n"


# -- Markdown ------------------------------------------------------------------------------------------
def _md_cell(text: str) -> str:
    return text.replace("|", r"\|").replace("\n", "<br>")


def markdown(title: str, pages: list[Page], files: dict) -> str:
    """The Markdown handout: a section per step, its formula as display maths, its figures
    as SVG images, its numbers as a table."""
    out = [f"# {title}", ""]
    for page in pages:
        out += [f"## {page.heading}", ""]
        if page.answer:
            out += [f"> **{page.answer}**", ""]
        if page.latex:
            out += [f"$$ {page.latex} $$", ""]
        elif page.formula:
            out += [f"*{page.formula}*", ""]
        if page.text:
            out += [line + "  " for line in page.text.splitlines()] + [""]
        if page.question:
            out += [f"**Question:** {page.question}", ""]
        for kind in page.panels:
            name = files.get((page.number, kind))
            if name:
                out += [f"![{kind}]({name})", ""]
        if page.numbers:
            out += ["| quote | value |", "| --- | --- |"]
            out += [f"| `{_md_cell(what)}` | {_md_cell(value)} |" for what, value in page.numbers]
            out.append("")
    return "\n".join(out)
