"""``attnexplorer import-model MODEL --text TEXT [--layer L] --out FILE.json``.

Every check that needs no model runs first (the extra installed, the text, the layer number,
the model on disk, the output folder), so a typo costs no load; then the model is opened, the
layer range and the text's length are checked against it, and the session is written
atomically. A long text (``LoadedModel.is_long``) shows a progress bar on stderr while the
model runs, as ``fit`` does. Any failure is one ModelError line (exit 2 at the CLI) and no file is written.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from ..models.sources import ModelError, missing_dependencies, resolve


def _json(session: dict) -> str:
    # Compact: a layer of MiniLM is over half a million numbers.
    return json.dumps(session, separators=(",", ":"), allow_nan=False) + "\n"


class LayerBar:
    """``[#####-----] running smollm2 on 4,096 tokens: layer 12 of 30`` on one stderr line, at most ~10 times a second."""

    def __init__(self, stream=None, width: int = 30, from_fraction: float = 0.0):
        self.stream, self.width, self.from_fraction = stream or sys.stderr, width, from_fraction
        self._last = 0.0
        self.shown = False

    def __call__(self, fraction: float, message: str) -> None:
        if fraction < self.from_fraction:
            return
        now = time.monotonic()
        if now - self._last < 0.1 and fraction < 1.0:
            return
        self._last = now
        filled = int(self.width * min(max(fraction, 0.0), 1.0))
        self.stream.write(f"\r[{'#' * filled}{'-' * (self.width - filled)}] {message}")
        self.stream.flush()
        self.shown = True

    def close(self) -> None:
        if self.shown:
            self.stream.write("\n")
            self.stream.flush()


def run_import_model(args) -> int:
    problem = missing_dependencies()
    if problem:
        raise ModelError(problem)
    if not args.text or not args.text.strip():
        raise ModelError("--text is empty: give the sentence the model should read")
    if args.layer < 0:
        raise ModelError(f"--layer {args.layer} is out of range: layers count from 0")
    out = Path(args.out)
    if out.is_dir():
        raise ModelError(f"--out {args.out} is a folder; give a file name such as layer0.json")
    if not out.parent.is_dir():
        raise ModelError(f"--out {args.out}: the folder {out.parent} does not exist")
    source = resolve(args.model)

    from ..io.atomic import atomic_write_text
    from ..models.loading import first_gguf_open, load_model

    # The first open of a GGUF model dequantises it (a minute or more: it printed nothing for
    # 85 s): its progress, tensor by tensor, on stderr. A cached or native open takes seconds.
    # Drawn once the file has been read as a model (0.2): a file refused before that stays the
    # usual single line.
    opening = LayerBar(from_fraction=0.2) if first_gguf_open(source) else None
    try:
        loaded = load_model(source, progress=opening)
    finally:
        if opening is not None:
            opening.close()
    if args.layer >= loaded.num_layers:
        raise ModelError(f"--layer {args.layer} is out of range: {source.label} has layers 0..{loaded.num_layers - 1}")
    bar = LayerBar() if loaded.is_long(len(loaded.tokenize(args.text)[0])) else None
    try:
        run = loaded.run(args.text, progress=bar)
    finally:
        if bar is not None:
            bar.close()
    session = loaded.layer_session(run, args.layer)
    atomic_write_text(out, _json(session))
    print(f"{out}: layer {args.layer} of {loaded.describe()}; {len(run.tokens)} tokens", file=sys.stderr)
    return 0
