"""``attnexplorer export``: compute a preset or a session once, with no window, and write files.

The matrices and ``session.json`` come from ``io.export_command``; figures, when asked for,
are drawn by ``ui.exports.figures`` from the very same result (no second compute). Everything is
written to a staging folder first and moved into ``--out`` only when all of it succeeded.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from ..core.errors import AttnExplorerError
from ..io.export_command import (
    FIGURE_FORMATS,
    MATRIX_FORMATS,
    apply_overrides,
    load_source,
    parse_formats,
    write_export,
)


def _figure_exporter():
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    try:
        from ..ui.exports.figure_batch import export_figures
    except ImportError as err:
        raise AttnExplorerError(f"figure export needs PySide6 and pyqtgraph: {err}") from None
    return export_figures


def _summary(out: Path, stage: Path, written: list[Path]) -> str:
    groups: dict[str, int] = {}
    for p in written:
        rel = Path(p).relative_to(stage)
        key = rel.parts[0] + ("/" if len(rel.parts) > 1 else "")
        groups[key] = groups.get(key, 0) + 1
    parts = [f"{k} ({n} files)" if k.endswith("/") else k for k, n in groups.items()]
    return f"wrote {len(written)} files to {out}: {', '.join(parts)}"


def _note(message: str) -> None:
    print(f"attnexplorer: note: {message}", file=sys.stderr)


def choice_from_args(session, args):
    """The part of the attention matrices ``args`` ask for, checked (``io.export_choice``)."""
    from ..io.export_choice import parse_choice

    return parse_choice(session, head=getattr(args, "head", None), rows=getattr(args, "rows", None),
                        selected_rows=getattr(args, "selected_rows", None), overview=getattr(args, "overview", None),
                        attention=getattr(args, "attention", None))


def run_export(args) -> int:
    """Run ``attnexplorer export`` for parsed ``args``; 0 on success.

    Raises ``AttnExplorerError`` for any bad input (``cli.main`` prints it and exits 2);
    in that case ``--out`` is left exactly as it was. What does not fit on the disk or in
    memory is refused before anything is computed or written (``export_choice.check_fits``).
    """
    # What every export needs; a long session's compute and a region's writer are imported
    # where they are used (a cold `export --matrices npz` of one layer is mostly imports).
    from ..core.compute.engine import compute
    from ..core.compute.long.result import is_long
    from ..io.atomic import atomic_directory
    from ..io.export_choice import check_fits, disk_bytes, parse_cols
    from ..io.export_progress import StagingProgress

    matrices = parse_formats(args.matrices, MATRIX_FORMATS, "--matrices")
    figures = parse_formats(getattr(args, "figures", ""), FIGURE_FORMATS, "--figures")
    if "\0" in args.out:  # not from a shell, but main() takes any list of strings
        raise AttnExplorerError("--out: the folder name holds a NUL character")
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise AttnExplorerError(f"--out {out} is a file, not a folder")
    export_figures = _figure_exporter() if figures else None  # fail before computing when Qt is missing
    session = apply_overrides(load_source(args), args)
    choice = choice_from_args(session, args)
    cols = parse_cols(getattr(args, "cols", None), session)
    if cols is not None and not figures:
        raise AttnExplorerError("--cols zooms the figures' heatmaps to key columns; it needs --figures "
                                "(png, svg or pdf): the matrices are cut by --rows, --head or --overview")
    long = is_long(session, args.dtype, args.device)
    # A long session's n × n matrices are only ever written in part (all rows by default,
    # a block at a time); a dense one writes today's whole bundle unless a part is chosen.
    region = long or not choice.whole
    check_fits(session, choice, matrices, out, dtype=args.dtype, long=long, whole_bundle=not region,
               allow_large=bool(getattr(args, "allow_large", False)))
    expected = sum(disk_bytes(session, choice, matrices, args.dtype, whole_bundle=not region).values())
    if long:
        from ..core.compute.long.result import compute_long

        result = compute_long(session, device=args.device, dtype=args.dtype)
    else:
        result = compute(session, device=args.device, dtype=args.dtype)
    with atomic_directory(out, notice=_note) as stage, StagingProgress(stage, expected):
        if region:
            from ..io.region_export import write_region_export
            from ..io.session_file import save_session

            written = write_region_export(stage, result, choice, matrices)
            save_session(session, stage / "session.json")
            written.append(stage / "session.json")
        else:
            written = write_export(stage, result, matrices)
        if export_figures is not None:
            written += [Path(p) for p in export_figures(result, stage, list(figures),
                                                        selection=bool(getattr(args, "selection", False)),
                                                        rows=choice.rows, cols=cols,
                                                        head=None if choice.heads is None else choice.heads[0])]
        summary = _summary(out, stage, written)
    print(summary, file=sys.stdout)
    return 0
