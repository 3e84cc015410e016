"""``attnexplorer lesson NAME|FILE [--handout pdf|beamer|md --out DIR]``.

Without ``--handout``: the lesson's steps as text, every quoted number computed (a check of a
lesson file before class). With it: the handout written into DIR (no window; figures are
drawn offscreen). A bad lesson, format or folder is one line and exit status 2, and DIR is
left as it was.
"""

from __future__ import annotations

import os

from ..core.errors import AttnExplorerError


def lesson_text(lesson, result) -> str:
    from ..core.lessons.pages import handout_pages

    lines = [lesson.title, ""]
    for page in handout_pages(lesson, result):
        if page.answer:
            lines.append(f"  {page.answer}")
        lines.append(page.heading)
        if page.formula:
            lines.append(f"  {page.formula}")
        lines += [f"  {line}" for line in page.text.splitlines()]
        if page.question:
            lines.append(f"  Question: {page.question}")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def run_lesson(args) -> int:
    from ..core.compute.engine import compute
    from ..io.lesson_file import open_lesson

    if args.handout is None and args.out is not None:
        raise AttnExplorerError("--out needs --handout pdf, beamer or md")
    if args.handout is not None and not args.out:
        raise AttnExplorerError("--handout needs --out DIR, the folder to write it into")
    lesson = open_lesson(args.lesson)
    if args.handout is None:
        print(lesson_text(lesson, compute(lesson.session, dtype=args.dtype)), end="")
        return 0
    from ..ui.lesson.handout import FORMATS

    if args.handout not in FORMATS:
        raise AttnExplorerError(f"--handout {args.handout!r} is not a handout format; choose one of {', '.join(FORMATS)}")
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from ..ui.lesson.handout import write_handout

    written = write_handout(lesson, args.handout, args.out, dtype=args.dtype)
    print(f"wrote {len(written)} files to {args.out}: {', '.join(str(p.name) for p in written[:4])}"
          + (" …" if len(written) > 4 else ""))
    return 0
