"""What part of the n × n attention matrices an export writes, checked once for the window
and the command line, and whether it fits before anything is written.

An ``ExportChoice`` says which heads (one or all), which query rows (all, a range
``start:stop``, or the selected rows) or the pooled overview (``max`` or ``mean``), and which
attention matrices (weights by default; scores, scaled_scores). ``parse_choice`` turns the
texts the user typed (``--head 2 --rows 8000:8064``, or the same texts from the export dialog)
into one, checked against the session; both callers use it, so the window and
``attnexplorer export`` accept and refuse exactly the same things with the same words.

``check_fits`` estimates the bytes the export needs on disk (per format) and in memory from
the session's shapes alone, and refuses with one line naming the sizes when the target's
disk or the memory limit (``core.compute.memory.memory_limit``) is short:

    the weights of 4 heads at 16,384 tokens as CSV need about 21 GB; the disk has 9.8 GB
    free: export one head, a row range or the pooled overview

An export above 2 GB on disk (``LARGE_EXPORT_BYTES``) is written only when allowed: the command
line's ``--allow-large``, the window's question (``LargeExportError.question``).
"""

from __future__ import annotations

import math
import shutil
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import AttnExplorerError
from ..core.compute.memory import _ITEM_BYTES, memory_limit

# The per-head n × n_k matrices an export can cut into rows or pool (the panels' heatmaps).
ATTENTION = ("weights", "scores", "scaled_scores")
POOLS = ("max", "mean")
# The n × n_k arrays a region export writes only in part (or not at all: ALiBi's bias).
SQUARE = ("scores", "position_bias", "scaled_scores", "mask", "weights")
# About how many bytes one number takes in each format (a float32 weight's exact repr is ~20
# characters and a separator; LaTeX and Markdown round to 4 places).
CELL_TEXT_BYTES = {"csv": 22, "json": 24, "tex": 12, "md": 10}
FORMAT_NAMES = {"npz": "NPZ", "npy": "NPY", "csv": "CSV", "json": "JSON", "tex": "LaTeX", "md": "Markdown"}
# Rows of an n × n_k matrix held at once while writing: about this many cells (a few MB of
# numbers, a few tens of MB as Python floats while a text format writes them).
BLOCK_CELLS = 1 << 20
# What writing one block holds in memory at most, per cell (float64 + Python float + text).
BLOCK_BYTES_PER_CELL = 64
# A long session's streamed pass holds a few 64 MB blocks (core.compute.long.streamed.BLOCK_BYTES).
STREAM_BYTES = 4 * 64 * 1024**2


class ExportError(AttnExplorerError):
    """An export choice that does not fit this session, the disk or the memory."""


@dataclass(frozen=True)
class ExportChoice:
    """Which part of the attention matrices to write.

    ``heads``: the heads (None: every head). ``rows``: ``(start, stop)``, stop excluded
    (None: every row). ``selected_rows``: these query rows, in this order. ``overview``:
    ``"max"``/``"mean"``: the pooled overview instead of rows. ``matrices``: from
    ``ATTENTION``. At most one of ``rows``, ``selected_rows`` and ``overview`` is set.
    """

    heads: tuple[int, ...] | None = None
    rows: tuple[int, int] | None = None
    selected_rows: tuple[int, ...] | None = None
    overview: str | None = None
    matrices: tuple[str, ...] = ("weights",)

    @property
    def whole(self) -> bool:
        """Every row of every head: what a plain export writes."""
        return self.heads is None and self.rows is None and self.selected_rows is None and self.overview is None

    def head_list(self, session) -> list[int]:
        return list(range(session.heads)) if self.heads is None else list(self.heads)

    def row_count(self, session) -> int:
        if self.rows is not None:
            return self.rows[1] - self.rows[0]
        if self.selected_rows is not None:
            return len(self.selected_rows)
        return session.n


def _number(text: str, what: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise ExportError(f"{what} must be a whole number, got {text.strip()!r}") from None


def parse_heads(text: str | None, session) -> tuple[int, ...] | None:
    """``"all"``/empty → None; ``"2"`` → (2,) within 0..H−1."""
    if text is None or text.strip().lower() in ("", "all"):
        return None
    head = _number(text, "head")
    if not 0 <= head < session.heads:
        raise ExportError(f"head {head} is not in this session: it has heads 0..{session.heads - 1}")
    return (head,)


def parse_rows(text: str | None, session) -> tuple[int, int] | None:
    """``"8000:8064"`` (stop excluded, either side may be left out) or ``"8000"`` (one row)."""
    if text is None or not text.strip():
        return None
    n = session.n
    start_text, colon, stop_text = text.strip().partition(":")
    start = _number(start_text, "the first row") if start_text.strip() else 0
    if colon:
        stop = _number(stop_text, "the row after the last") if stop_text.strip() else n
    else:
        stop = start + 1
    if not 0 <= start < n or not start < stop <= n:
        raise ExportError(f"rows {text.strip()}: choose start:stop with 0 ≤ start < stop ≤ {n:,} "
                          f"(this session has {n:,} query rows)")
    return start, stop


def parse_cols(text: str | None, session) -> tuple[int, int] | None:
    """Key columns ``"0:64"`` for figures (stop excluded), within the session's n_k keys."""
    if text is None or not text.strip():
        return None
    n_k = session.n_keys
    start_text, colon, stop_text = text.strip().partition(":")
    start = _number(start_text, "the first column") if start_text.strip() else 0
    stop = (_number(stop_text, "the column after the last") if stop_text.strip() else n_k) if colon else start + 1
    if not 0 <= start < stop <= n_k:
        raise ExportError(f"columns {text.strip()}: choose start:stop with 0 ≤ start < stop ≤ {n_k:,} "
                          f"(this session has {n_k:,} keys)")
    return start, stop


def parse_selected_rows(text: str | None, session, selected: int | None = None) -> tuple[int, ...] | None:
    """``"5,9,12"``; ``"selected"`` is ``selected`` (the window's selected query, else the
    query the session was saved with selected)."""
    if text is None or not text.strip():
        return None
    if text.strip().lower() == "selected":
        if selected is None:
            view = session.extra.get("view") if isinstance(session.extra, dict) else None
            selected = view.get("query", 0) if isinstance(view, dict) else 0
            selected = selected if isinstance(selected, int) and not isinstance(selected, bool) else 0
        return (min(max(int(selected), 0), session.n - 1),)
    out: list[int] = []
    for item in text.split(","):
        if not item.strip():
            continue
        row = _number(item, "a selected row")
        if not 0 <= row < session.n:
            raise ExportError(f"selected row {row} is not in this session: it has rows 0..{session.n - 1:,}")
        if row not in out:
            out.append(row)
    if not out:
        raise ExportError("selected rows: give row numbers, e.g. 5,9,12")
    return tuple(out)


def parse_overview(text: str | None) -> str | None:
    if text is None or text.strip().lower() in ("", "none"):
        return None
    pool = text.strip().lower()
    if pool not in POOLS:
        raise ExportError(f"overview: choose max or mean, got {text.strip()!r}")
    return pool


def parse_matrices(text: str | None) -> tuple[str, ...]:
    if text is None or not text.strip():
        return ("weights",)
    out: list[str] = []
    for item in text.split(","):
        name = item.strip().lower().replace(" ", "_")
        if not name:
            continue
        if name not in ATTENTION:
            raise ExportError(f"attention matrix {item.strip()!r}: choose from {', '.join(ATTENTION)}")
        if name not in out:
            out.append(name)
    return tuple(out) or ("weights",)


def parse_choice(session, *, head: str | None = None, rows: str | None = None, selected_rows: str | None = None,
                 overview: str | None = None, attention: str | None = None,
                 selected: int | None = None) -> ExportChoice:
    """The one check of an export choice, for the window and the command line alike.

    Every argument is the text the user gave (None or empty: not given). Raises
    ``ExportError`` with one line for anything that does not fit ``session``.
    """
    given = [name for name, value in (("a row range", rows), ("selected rows", selected_rows),
                                      ("the pooled overview", overview)) if value is not None and value.strip()
             and not (name == "the pooled overview" and value.strip().lower() == "none")]
    if len(given) > 1:
        raise ExportError(f"choose one of a row range, selected rows or the pooled overview, not {' and '.join(given)}")
    return ExportChoice(heads=parse_heads(head, session), rows=parse_rows(rows, session),
                        selected_rows=parse_selected_rows(selected_rows, session, selected),
                        overview=parse_overview(overview), matrices=parse_matrices(attention))


# -- sizes ---------------------------------------------------------------------------------

def size_text(nbytes: float) -> str:
    """``21 GB``, ``9.8 GB``, ``350 MB``, ``12 kB``: about, for one line."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if nbytes >= scale:
            value = nbytes / scale
            return f"{value:.1f} {unit}" if value < 10 else f"{value:,.0f} {unit}"
    return f"{int(nbytes)} bytes"


def host_item_bytes(dtype: str) -> int:
    """Bytes of one number as the host holds it (half types come back as float32)."""
    return max(4, _ITEM_BYTES.get(dtype, 8))


def region_cells(session, choice: ExportChoice) -> int:
    """Numbers in the chosen part of one attention matrix, over the chosen heads."""
    heads = len(choice.head_list(session))
    if choice.overview is not None:
        from ..core.compute.long.result import overview_grid

        fy, fx = overview_grid(session)
        return heads * math.ceil(session.n / fy) * math.ceil(session.n_keys / fx)
    return heads * choice.row_count(session) * session.n_keys


def _small_cells(session) -> int:
    """Numbers in everything that is not n × n_k (embeddings, weights, Q, K, V, outputs)."""
    n, h, d = session.n, session.heads, session.d
    per_token = 3 * d + h * (3 * session.d_k + 3 * session.d_v) + h * session.d_v + session.d
    weights = h * d * (2 * session.d_k + session.d_v) + (h * session.d_v) ** 2
    return n * per_token + weights


def disk_bytes(session, choice: ExportChoice, formats, dtype: str = "float32", whole_bundle: bool = False) -> dict:
    """Estimated bytes on disk per format. ``whole_bundle``: today's full export of a dense
    result (every square matrix of every head, and ALiBi's bias when used)."""
    item = host_item_bytes(dtype)
    if whole_bundle:
        squares = session.heads * session.n * session.n_keys
        alibi = session.positions is not None and session.positions.kind == "alibi"
        cells = squares * (3 + alibi)
        mask_cells = session.n * session.n_keys
    else:
        cells = region_cells(session, choice) * len(choice.matrices)
        mask_cells = 0 if choice.overview is not None else choice.row_count(session) * session.n_keys
    small = _small_cells(session)
    out = {}
    for fmt in formats:
        if fmt in ("npz", "npy"):
            out[fmt] = (cells + small) * item + mask_cells
        else:
            # Tables and JSON write each number once; the mask as 0/1 (or false/true).
            out[fmt] = (cells + small) * CELL_TEXT_BYTES[fmt] + mask_cells * (2 if fmt != "json" else 6)
    return out


def memory_bytes(session, choice: ExportChoice, dtype: str = "float32", long: bool = False,
                 compute: bool = True) -> int:
    """Estimated peak memory of the export: the compute (dense estimate, or the streamed
    pass's blocks for a long session) when ``compute``, and one block being written."""
    from ..core.compute.long.result import dense_bytes

    need = 0
    if compute:
        if long:
            need += STREAM_BYTES + _small_cells(session) * host_item_bytes(dtype) * 2
        else:
            need += dense_bytes(session, dtype)
    if choice.overview is not None:
        need += 3 * region_cells(session, choice) * 8
    return need + BLOCK_CELLS * BLOCK_BYTES_PER_CELL


def free_disk(target) -> int:
    """Free bytes on the disk that holds ``target`` (or its nearest existing folder)."""
    path = Path(target).absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return shutil.disk_usage(path).free


def describe(session, choice: ExportChoice, formats, whole_bundle: bool = False) -> str:
    """``the weights of 4 heads at 16,384 tokens as CSV``, for the refusal line."""
    if whole_bundle:
        what = "all the matrices"
    else:
        names = [m.replace("_", " ") for m in choice.matrices]
        what = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
        if choice.overview is not None:
            what = f"the {choice.overview}-pooled overview of the {what}"
        else:
            what = f"the {what}"
    heads = len(choice.head_list(session))
    heads_text = f"head {choice.heads[0]}" if choice.heads is not None else f"{heads} head" + ("s" if heads != 1 else "")
    if choice.rows is not None:
        rows = f"query rows {choice.rows[0]:,}–{choice.rows[1] - 1:,}"
    elif choice.selected_rows is not None:
        k = len(choice.selected_rows)
        rows = f"{k} selected row" + ("s" if k != 1 else "")
    else:
        rows = f"{session.n:,} tokens"
    fmts = [FORMAT_NAMES.get(f, f) for f in formats]
    if not fmts:
        return f"{what} of {heads_text} at {rows}"
    fmt_text = fmts[0] if len(fmts) == 1 else ", ".join(fmts[:-1]) + " and " + fmts[-1]
    return f"{what} of {heads_text} at {rows} as {fmt_text}"


HINT = "export one head, a row range or the pooled overview"

# Above this an export is written only when asked for explicitly (``--allow-large``; the window
# asks): the README's own example, 16,384 tokens × 4 heads as CSV, wrote 3.8 GB in ten
# minutes on a disk with room for it, and an 8,193-token session as every format 8.5 GB.
LARGE_EXPORT_BYTES = 2 * 10**9


class LargeExportError(ExportError):
    """An export above ``LARGE_EXPORT_BYTES`` that was not allowed; ``question`` asks for it."""

    def __init__(self, message: str, question: str):
        super().__init__(message)
        self.question = question


def large_export(session, choice: ExportChoice, formats, *, dtype: str = "float32",
                 whole_bundle: bool = False) -> str | None:
    """``the weights … as CSV would write about 5.4 GB`` when the export is above
    ``LARGE_EXPORT_BYTES`` on disk, else None."""
    formats = [f for f in formats if f in FORMAT_NAMES]
    need = sum(disk_bytes(session, choice, formats, dtype, whole_bundle).values())
    if need <= LARGE_EXPORT_BYTES:
        return None
    return f"{describe(session, choice, formats, whole_bundle)} would write about {size_text(need)}"


def check_fits(session, choice: ExportChoice, formats, target, *, dtype: str = "float32", long: bool = False,
               whole_bundle: bool = False, compute: bool = True, limit: int | None = None,
               allow_large: bool = False) -> None:
    """Refuse (``ExportError``, one line naming the sizes) an export that would not fit on the
    disk holding ``target`` or in the memory limit, or (``LargeExportError``) one above
    ``LARGE_EXPORT_BYTES`` unless ``allow_large``; nothing is written either way."""
    formats = [f for f in formats if f in FORMAT_NAMES]
    need_disk = sum(disk_bytes(session, choice, formats, dtype, whole_bundle).values())
    what = describe(session, choice, formats, whole_bundle)
    if formats:
        free = free_disk(target)
        if need_disk > free:
            raise ExportError(f"{what} need about {size_text(need_disk)}; the disk has {size_text(free)} free: {HINT}")
    limit = memory_limit() if limit is None else limit
    need_memory = memory_bytes(session, choice, dtype, long=long, compute=compute)
    if need_memory > limit:
        raise ExportError(f"{what} need about {size_text(need_memory)} of memory, more than the limit of "
                          f"{size_text(limit)} (half of this machine's memory): {HINT}")
    large = large_export(session, choice, formats, dtype=dtype, whole_bundle=whole_bundle)
    if large and not allow_large:
        limit_text = size_text(LARGE_EXPORT_BYTES)
        raise LargeExportError(f"{large}, more than {limit_text}: add --allow-large to write it, or {HINT}",
                               f"{large[0].upper()}{large[1:]} (more than {limit_text}). Write it anyway?")
