"""``attnexplorer fit``: learn W_q and W_k of a head toward a target pattern, with no window.

``attnexplorer fit (--preset NAME [--set K=V ...] | --session FILE) --target SPEC [--head H|all]
[--train q,k[,biases]] [--optimizer adam|sgd] [--lr X] [--steps N] --out FITTED.json``

SPEC is a built-in (``previous-token``, ``first-token``, ``self``, ``uniform``, ``window:W``,
``head:H``) or a matrix file (``.npy``, ``.csv``, ``.tsv``, ``.txt``) read by ``io.matrices``.
A progress bar with the loss goes to stderr; the fitted session is written atomically (also
after a divergence, with the last good weights, and after Ctrl+C, with the weights reached);
one summary line goes to stdout. Every bad input is an ``AttnExplorerError`` raised before any
work: ``cli.main`` prints it as one line and exits 2.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from ..core.errors import AttnExplorerError

MATRIX_SUFFIXES = (".npy", ".csv", ".tsv", ".txt")


def parse_heads(text: str | None, session) -> list[int]:
    """``--head``: a head number, or ``all`` for one target per head; default the head the file
    was saved with selected (its ``"view"``), else 0."""
    if text is None:
        view = session.extra.get("view")
        selected = view.get("head", 0) if isinstance(view, dict) else 0
        ok = isinstance(selected, int) and not isinstance(selected, bool) and 0 <= selected < session.heads
        return [selected if ok else 0]
    if text.strip().lower() == "all":
        return list(range(session.heads))
    try:
        h = int(text.strip())
    except ValueError:
        raise AttnExplorerError(f"--head: expected a head number or 'all', got {text!r}") from None
    if not 0 <= h < session.heads:
        raise AttnExplorerError(f"--head: the session has heads 0..{session.heads - 1}, got {h}")
    return [h]


def parse_train(text: str) -> tuple[str, ...]:
    return tuple(part.strip().lower() for part in text.split(",") if part.strip())


def read_targets(session, spec: str, heads: list[int], device: str) -> dict:
    """{head: Target} for ``--target``: the same matrix file for every head, or the built-in per head."""
    from ..core.fit import check_target, target_for

    if Path(spec).suffix.lower() in MATRIX_SUFFIXES:
        from ..io.matrices import read_matrix

        matrix = read_matrix(spec)
        return {h: check_target(session, matrix, source=spec) for h in heads}
    return {h: target_for(session, spec, head=h, device=device) for h in heads}


def parse_lr(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        return float(text)
    except ValueError:
        raise AttnExplorerError(f"--lr: the learning rate must be a number, got {text!r}") from None


def parse_steps(text: str) -> int:
    try:
        return int(str(text).strip())
    except ValueError:
        raise AttnExplorerError(f"--steps: must be a whole number, got {text!r}") from None


def check_out(out: Path) -> None:
    if out.suffix.lower() != ".json":
        raise AttnExplorerError(f"--out {out}: the fitted session is a .json file")
    if out.is_dir():
        raise AttnExplorerError(f"--out {out} is a folder; give a file name such as fitted.json")
    if not out.parent.is_dir():
        raise AttnExplorerError(f"--out {out}: the folder {out.parent} does not exist")


class ProgressBar:
    """``[#####-----] 123/500 loss 0.0123 max|w−t| 0.051`` on one stderr line, at most ~10 times a second."""

    def __init__(self, total: int, stream=None, width: int = 30):
        self.total, self.stream, self.width = total, stream or sys.stderr, width
        self._last = 0.0

    def update(self, p, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last < 0.1:
            return
        self._last = now
        filled = int(self.width * min(p.step, self.total) / self.total)
        bar = "#" * filled + "-" * (self.width - filled)
        self.stream.write(f"\r[{bar}] {p.step}/{self.total} loss {p.loss:.4g} max|w-t| {p.max_error:.3g}")
        self.stream.flush()

    def close(self, p) -> None:
        self.update(p, force=True)
        self.stream.write("\n")
        self.stream.flush()


def run_fit(args) -> int:
    """Run ``attnexplorer fit`` for parsed ``args``; 0 when fitted (any way it ended), 130 on Ctrl+C."""
    from ..core.fit import Fitter
    from ..core.fit.settings import check_fit_memory
    from ..io.export_command import apply_overrides, load_source
    from ..io.session_file import save_session

    out = Path(args.out)
    check_out(out)
    session = load_source(args)
    session = apply_overrides(session, args)
    heads = parse_heads(args.head, session)
    check_fit_memory(session, len(heads), args.dtype, args.device)   # before a target of n × n is made
    targets = read_targets(session, args.target, heads, args.device)
    for target in targets.values():
        for note in target.notes:
            print(f"attnexplorer: note: {note}", file=sys.stderr)
    fitter = Fitter(session, targets, train=parse_train(args.train), optimizer=args.optimizer, lr=parse_lr(args.lr),
                    steps=parse_steps(args.steps), device=args.device, dtype=args.dtype)
    for note in fitter.notes:
        print(f"attnexplorer: note: {note}", file=sys.stderr)
    bar = ProgressBar(fitter.steps)
    interrupted = False
    progress = None
    try:
        progress = fitter.run(on_progress=bar.update)
    except KeyboardInterrupt:  # stop keeps the weights reached, as in the window
        interrupted = True
    if progress is None or interrupted:
        loss, max_error = fitter.loss_and_max_error()
        summary = f"stopped at step {fitter.step_count}: loss {loss:.3g}, max |weights − target| = {max_error:.2g}"
    else:
        bar.close(progress)
        summary = progress.message
    save_session(fitter.session(), out)
    print(f"wrote {out}: {summary}")
    return 130 if interrupted else 0

