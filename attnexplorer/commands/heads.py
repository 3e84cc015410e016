"""``attnexplorer heads MODEL (--text T | --probe repeated:N[:SEED] | --text-file F) [--scores …]
[--attribution dla|ablate:zero|ablate:mean|ablate:patch --target TOKEN [--versus TOKEN] [--position P]
[--patch-text TEXT2]]
--out SCORES.csv [--json] [--figures png,svg,pdf --out-figures DIR]``: a score per layer × head,
one row per head; with --figures each column's layers × heads heatmap, drawn by the model
window's Heads tab (``ui.model.head_scores_panel``) through the figure route every panel uses.

Every check that needs no model runs first (the extra, one text source, the scores and their
pattern files, the attribution with its --target, the output file), then the model is opened,
run once with the scores computed during the forward (a block of rows at a time on a long
text), and the attribution computed from that run. Any refusal is one ModelError line: exit 2.
"""

from __future__ import annotations

import csv
import io
import json
import sys
from pathlib import Path

from ..models.sources import ModelError, missing_dependencies, resolve
from .model_output import LayerBar, check_figures, make_folder, score_figures, writable_parent

ATTRIBUTIONS = ("dla", "ablate:zero", "ablate:mean", "ablate:patch")


def _text(args) -> str | None:
    given = [name for name in ("text", "probe", "text_file") if getattr(args, name) is not None]
    if len(given) != 1:
        raise ModelError("give exactly one of --text, --probe repeated:N[:SEED] or --text-file F")
    if args.text_file is not None:
        try:
            return Path(args.text_file).read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ModelError(f"--text-file {args.text_file}: no such file") from None
        except IsADirectoryError:
            raise ModelError(f"--text-file {args.text_file} is a folder: give a UTF-8 text file") from None
        except (OSError, UnicodeDecodeError) as err:
            raise ModelError(f"--text-file {args.text_file}: cannot read it as UTF-8 text ({err})") from None
    return args.text


def _check_first(args):
    problem = missing_dependencies()
    if problem:
        raise ModelError(problem)
    text = _text(args)
    if text is not None and not text.strip():
        raise ModelError("the text is empty: give the sentence the model should read")
    from ..models.head_scores import is_probe, parse_probe

    if args.probe is not None:
        parse_probe(args.probe)   # --probe is a probe whatever it starts with
    for given in (text, args.patch_text):
        if is_probe(given):
            parse_probe(given)    # a malformed probe costs no load
    from ..models.head_scores import DEFAULT, parse_scores

    if args.scores is not None and not args.scores.strip():   # it fell back to every score
        raise ModelError("--scores is empty: give scores such as previous-token,induction (or leave it out for all)")
    scores = parse_scores(args.scores or DEFAULT)
    if args.attribution is not None and args.attribution not in ATTRIBUTIONS:
        raise ModelError(f"--attribution {args.attribution!r}: choose dla, ablate:zero, ablate:mean or ablate:patch")
    if args.attribution is not None and args.target is None:
        raise ModelError("--attribution needs --target: the token whose logit is attributed, e.g. ' Mary'")
    if args.attribution is None and (args.target, args.versus, args.position) != (None, None, None):
        raise ModelError("--target, --versus and --position are for --attribution")
    if args.attribution == "ablate:patch" and not (args.patch_text or "").strip():
        raise ModelError("--attribution ablate:patch needs --patch-text: the second text (of the same token length) "
                         "each head takes its output from")
    if args.patch_text is not None and args.attribution != "ablate:patch":
        raise ModelError("--patch-text is only for --attribution ablate:patch")
    if args.versus is not None and args.target is None:
        raise ModelError("--versus needs --target: the logit difference is target − versus")
    check_figures(args)
    out = Path(args.out)
    if out.is_dir():
        raise ModelError(f"--out {args.out} is a folder; give a file name such as scores.csv")
    if not out.parent.is_dir():
        raise ModelError(f"--out {args.out}: the folder {out.parent} does not exist")
    writable_parent(out, "--out")
    return text, scores


def head_table(layers: int, heads: int, columns: dict) -> list[dict]:
    """One row per layer and head: ``{"layer", "head", column: value…}``."""
    return [{"layer": layer, "head": head, **{name: float(values[layer, head]) for name, values in columns.items()}}
            for layer in range(layers) for head in range(heads)]


def _csv(rows: list[dict]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def run_heads(args) -> int:
    text, scores = _check_first(args)
    source = resolve(args.model)
    from ..io.atomic import atomic_write_text
    from ..models.head_scores import HeadScores, document
    from ..models.interventions import Behaviour
    from ..models.loading import load_model
    loaded = load_model(source)
    ids, pieces, label, probe = document(loaded, args.probe if args.probe is not None else text)
    scorer = HeadScores(scores, ids, loaded.num_layers, loaded.num_heads, probe)
    bar = LayerBar() if loaded.is_long(len(ids)) else None
    try:
        run = loaded.run_ids(ids, pieces, label, progress=bar, observe=scorer)
    finally:
        if bar is not None:
            bar.close()
    columns = scorer.result()
    if args.attribution is not None:
        columns.update(_attribution(args, Behaviour(loaded, run)))
    rows = head_table(loaded.num_layers, loaded.num_heads, columns)
    if args.figure_formats:   # before the CSV: a folder that cannot be made writes nothing
        make_folder(Path(args.out_figures), "--out-figures")
    atomic_write_text(Path(args.out), _csv(rows))
    if args.figure_formats:
        score_figures(columns, args.figure_formats, Path(args.out_figures))
    if args.json:
        print(json.dumps(rows, indent=1))
    print(f"{args.out}: {len(rows)} heads of {loaded.describe()}; {len(ids)} tokens; "
          f"columns {', '.join(columns)}", file=sys.stderr)
    return 0


def _attribution(args, behaviour) -> dict:
    from ..models.head_attribution import ablation_sweep, direct_logit_attribution, pick

    picked = pick(behaviour, args.target, args.versus, args.position)
    what = f"the logit of {args.target!r}" if args.versus is None else f"the logit difference {args.target!r} − {args.versus!r}"
    if args.attribution == "dla":
        values, rest, logit = direct_logit_attribution(behaviour, picked)
        print(f"{what} at position {picked.position}: {logit:.4f} = heads {values.sum():.4f} + rest {rest:.4f}",
              file=sys.stderr)
        return {"dla": values}
    kind = args.attribution.split(":")[1]
    bar = LayerBar()
    try:
        effects, base = ablation_sweep(behaviour, picked, kind,
                                       progress=lambda done, total: bar(done / total, f"{kind}-ablating head {done} of {total}"),
                                       patch_text=args.patch_text)
    finally:
        bar.close()
    print(f"{what} at position {picked.position}: {base:.4f} unedited", file=sys.stderr)
    return {f"ablate_{kind}": effects}
