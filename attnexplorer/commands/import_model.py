"""``attnexplorer import-model MODEL --text TEXT [--layer L|L,L…|all] --out FILE.json|DIR
[--figures png,svg,pdf --out-figures DIR]``: the asked layers from ONE run of the model (a list
or ``all`` into a folder, ``layer<L>.json`` each), and the model window's figures.

Every check that needs no model runs first (the extra installed, the text, the layer number,
the model on disk, the output folder), so a typo costs no load; then the model is opened, the
layer range and the text's length are checked against it, and the session is written
atomically. A long text (``LoadedModel.is_long``) shows a progress bar on stderr while the
model runs, as ``fit`` does. Any failure is one ModelError line (exit 2 at the CLI) and no file is written.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ..models.sources import ModelError, missing_dependencies, resolve
from .model_output import LayerBar, check_figures, figure_app, make_folder, score_figures, writable_parent


def _json(session: dict) -> str:
    # Compact: a layer of MiniLM is over half a million numbers.
    return json.dumps(session, separators=(",", ":"), allow_nan=False) + "\n"


def _check_first(args) -> bool:
    """Every check that needs no model; True when several layers go into a folder."""
    problem = missing_dependencies()
    if problem:
        raise ModelError(problem)
    if not args.text or not args.text.strip():
        raise ModelError("--text is empty: give the sentence the model should read")
    from ..models.head_scores import is_probe, parse_probe

    if is_probe(args.text):
        parse_probe(args.text)
    several = args.layer == "all" or len(args.layer) > 1
    out = Path(args.out)
    if several:
        if out.exists() and not out.is_dir():
            raise ModelError(f"--out {args.out} is a file; several layers are written into a folder "
                             "(layer<L>.json each)")
        if not out.parent.is_dir():
            raise ModelError(f"--out {args.out}: the folder {out.parent} does not exist")
    elif out.is_dir():
        raise ModelError(f"--out {args.out} is a folder; give a file name such as layer0.json")
    elif not out.parent.is_dir():
        raise ModelError(f"--out {args.out}: the folder {out.parent} does not exist")
    writable_parent(out, "--out")
    check_figures(args)
    return several


def run_import_model(args) -> int:
    several = _check_first(args)
    source = resolve(args.model)

    from ..io.atomic import atomic_write_text
    from ..models.head_scores import DEFAULT, HeadScores, document, parse_scores
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
    layers = list(range(loaded.num_layers)) if args.layer == "all" else args.layer
    for layer in layers:
        if layer >= loaded.num_layers:
            raise ModelError(f"--layer {layer} is out of range: {source.label} has layers 0..{loaded.num_layers - 1}")
    ids, pieces, label, probe = document(loaded, args.text)   # a repeated:N[:SEED] probe too
    # the head scores ride along for the figures' heatmaps (made during the forward)
    scorer = HeadScores(parse_scores(DEFAULT), ids, loaded.num_layers, loaded.num_heads, probe) \
        if args.figure_formats else None
    bar = LayerBar() if loaded.is_long(len(ids)) else None
    try:
        run = loaded.run_ids(ids, pieces, label, progress=bar, observe=scorer)   # once, for every layer
    finally:
        if bar is not None:
            bar.close()
    out = Path(args.out)
    if args.figure_formats:   # before the sessions: a folder that cannot be made writes nothing
        make_folder(Path(args.out_figures), "--out-figures")
    if several:
        make_folder(out, "--out")
    for layer in layers:
        # one layer's JSON at a time: SmolLM2's 30 as lists of floats at once would be gigabytes
        path = out / f"layer{layer}.json" if several else out
        atomic_write_text(path, _json(loaded.layer_session(run, layer)))
    where = f"{out}: layers {_ranges(layers)}" if several else f"{out}: layer {layers[0]}"
    print(f"{where} of {loaded.describe()}; {len(run.tokens)} tokens", file=sys.stderr)
    if args.figure_formats:

        figure_app()
        from ..ui.model.figure_files import write_model_figures

        folder = Path(args.out_figures)
        written = write_model_figures(loaded, run, layers, args.figure_formats, folder)
        written += score_figures(scorer.result(), args.figure_formats, folder, quiet=True)
        print(f"{folder}: {len(written)} figures", file=sys.stderr)
    return 0


def _ranges(layers: list[int]) -> str:
    """``[0, 1, 2, 5]`` → ``0..2, 5``."""
    parts, start = [], None
    for k, layer in enumerate(layers):
        if start is None:
            start = layer
        if k + 1 == len(layers) or layers[k + 1] != layer + 1:
            parts.append(str(start) if start == layer else f"{start}..{layer}")
            start = None
    return ", ".join(parts)
