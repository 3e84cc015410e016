"""``attnexplorer export``, the Qt-free half: its arguments, its source and its matrix files.

``attnexplorer.commands.export.run_export`` runs the command: it computes once and adds the
figures (drawn by the ui layer from that same result) next to what this module writes.

What lands in ``--out`` (README, "Export"):

- ``attention.npz`` (npz) and ``attention.json`` (json): every intermediate under the names
  of ``matrices.result_arrays`` (tokens, X, W_q, W_k, W_v, [W_o], Q, K, V, scores,
  scaled_scores, mask, weights, head_outputs, concat, output, blocked_rows);
- ``npy/<name>.npy`` (npy): the same arrays, one file each;
- ``csv/<name>.csv``, ``tex/<name>.tex``, ``md/<name>.md``: one labelled 2-D table per matrix
  and head (``weights_head0.csv``, ``Q_head1.csv``, ``output.csv``, ...);
- ``figures/<panel>.<fmt>`` and ``figures/dashboard.<fmt>`` with ``--figures png,svg,pdf``;
- ``session.json``: the session that was computed (with the --mask/--scale overrides).

Everything is written to a staging folder first and moved into ``--out`` only when all of
it succeeded. Every user error is an ``AttnExplorerError``; ``cli.main`` turns it into one
line on stderr and exit status 2.
"""

from __future__ import annotations

from pathlib import Path

from ..core.errors import AttnExplorerError
from ..core.inputs.session import MAX_TOKENS, Mask, Scale

MATRIX_FORMATS = ("npz", "npy", "csv", "json", "tex", "md")
FIGURE_FORMATS = ("png", "svg", "pdf")


def parse_formats(text: str | None, allowed: tuple[str, ...], flag: str) -> list[str]:
    """``"npz, csv"`` → ``["npz", "csv"]`` in the given order, without repeats; empty → []."""
    out: list[str] = []
    for item in (text or "").split(","):
        item = item.strip().lower().lstrip(".")
        if not item:
            continue
        if item not in allowed:
            raise AttnExplorerError(f"{flag}: unknown format {item!r}; choose from {', '.join(allowed)}")
        if item not in out:
            out.append(item)
    return out


def _whole(text: str, flag: str, what: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise AttnExplorerError(f"{flag}: {what} must be a whole number, got {text.strip()!r}") from None


def parse_mask(text: str) -> Mask:
    """``none``, ``causal``, ``window:W`` or ``padding:J,K,...`` (key positions from 0)."""
    kind, _, arg = text.strip().partition(":")
    kind = kind.strip().lower()
    if kind in ("none", "causal") and not arg.strip():
        return Mask(kind)
    if kind == "window":
        w = _whole(arg, "--mask", "the window")
        if not 1 <= w <= MAX_TOKENS:
            raise AttnExplorerError(f"--mask: the window must be 1..{MAX_TOKENS}, got {w}")
        return Mask("window", window=w)
    if kind == "padding":
        if not arg.strip():
            raise AttnExplorerError("--mask: padding needs key positions, e.g. padding:4,5")
        return Mask("padding", padding=tuple(_whole(j, "--mask", "a padding position") for j in arg.split(",")))
    raise AttnExplorerError(f"--mask: expected none, causal, window:W or padding:J,K,..., got {text!r}")


def parse_scale(text: str) -> Scale:
    """``inv_sqrt_dk``, ``none``, ``temperature:T`` (T > 0) or ``factor:F`` (F > 0, a number or
    arithmetic such as ``256**-0.5``: scores × F)."""
    kind, _, arg = text.strip().partition(":")
    kind = kind.strip().lower()
    if kind in ("inv_sqrt_dk", "none") and not arg.strip():
        return Scale(kind)
    if kind == "temperature":
        try:
            t = float(arg.strip())
        except ValueError:
            raise AttnExplorerError(f"--scale: the temperature must be a number, got {arg.strip()!r}") from None
        if not (t > 0 and t < float("inf")):
            raise AttnExplorerError(f"--scale: the temperature must be a finite number > 0, got {arg.strip()!r}")
        return Scale("temperature", t)
    if kind == "factor":
        # The window's factor box reads the same text the same way (a number or arithmetic).
        from ..core.numbers.expr import parse_number

        try:
            f = parse_number(arg.strip()) if arg.strip() else None
        except AttnExplorerError as err:
            raise AttnExplorerError(f"--scale: the factor {err}") from None
        if f is None or not f > 0:
            raise AttnExplorerError(f"--scale: the factor must be a finite number > 0, got {arg.strip()!r}")
        return Scale("factor", multiplier=f)
    raise AttnExplorerError(f"--scale: expected inv_sqrt_dk, none, temperature:T or factor:F, got {text!r}")


def load_source(args):
    """The session named by ``--preset``/``--set`` or ``--session``."""
    if getattr(args, "session", None) is not None:
        if not args.session:
            raise AttnExplorerError("--session: the file name is empty")
        if args.params:
            raise AttnExplorerError("--set applies to presets only; edit the session file instead")
        from .session_file import load_session

        return load_session(args.session)
    from ..core.inputs.presets import build_preset, parse_assignments

    return build_preset(args.preset, parse_assignments(args.params)).session


def apply_overrides(session, args):
    """The session with ``--mask``/``--scale`` applied (a mask that does not fit says so)."""
    changes = {}
    if getattr(args, "mask", None):
        changes["mask"] = parse_mask(args.mask)
    if getattr(args, "scale", None):
        changes["scale"] = parse_scale(args.scale)
    if not changes:
        return session
    try:
        return session.replace(**changes)
    except AttnExplorerError as err:
        raise AttnExplorerError(f"--mask: {err}") from None


def write_export(stage: Path, result, matrices: list[str]) -> list[Path]:
    """Write the requested matrix files and ``session.json`` under ``stage``; returns the
    paths written. All of them come from ``result`` and the session it was computed from
    (``result.session``), so they always agree."""
    from . import matrices as mx
    from .session_file import save_session

    session = result.session
    written: list[Path] = []
    arrays = mx.result_arrays(result)
    for fmt in matrices:
        if fmt == "npz":
            mx.write_npz(stage / "attention.npz", arrays)
            written.append(stage / "attention.npz")
        elif fmt == "json":
            mx.write_json_bundle(stage / "attention.json", arrays)
            written.append(stage / "attention.json")
        elif fmt == "npy":
            written += mx.write_npy_bundle(stage / "npy", arrays)
        else:
            written += mx.write_table_bundle(stage / fmt, result, fmt)
    save_session(session, stage / "session.json")
    written.append(stage / "session.json")
    return written
