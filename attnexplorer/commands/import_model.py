"""``attnexplorer import-model MODEL --text TEXT [--layer L] --out FILE.json``.

Every check that needs no model runs first (the extra installed, the text, the layer number,
the model on disk, the output folder), so a typo costs no load; then the model is opened, the
layer range and the text's length are checked against it, and the session is written
atomically. Any failure is one ModelError line (exit 2 at the CLI) and no file is written.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ..models.sources import ModelError, missing_dependencies, resolve


def _json(session: dict) -> str:
    # Compact: a layer of MiniLM is over half a million numbers.
    return json.dumps(session, separators=(",", ":"), allow_nan=False) + "\n"


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
    from ..models.loading import load_model

    loaded = load_model(source)
    if args.layer >= loaded.num_layers:
        raise ModelError(f"--layer {args.layer} is out of range: {source.label} has layers 0..{loaded.num_layers - 1}")
    run = loaded.run(args.text)
    session = loaded.layer_session(run, args.layer)
    atomic_write_text(out, _json(session))
    print(f"{out}: layer {args.layer} of {loaded.describe()}; {len(run.tokens)} tokens", file=sys.stderr)
    return 0
