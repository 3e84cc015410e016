"""``attnexplorer predict`` and ``attnexplorer export-model``: a real model's prediction with
head ablations and edited layers, and the edited model saved as a Hugging Face folder.

Every check that needs no model runs first (the extra, the text, --top, --ablation with its
--patch-text, the --layer/--session pairs, the output folder), then the model is opened and run
once on the text, and the interventions are checked against it (a layer or head out of range,
a patch text of another token length, a target that is not one token, a session that is not
that model's layer). Any refusal is one ModelError line: exit status 2 at the CLI.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ..models.sources import ModelError, missing_dependencies, resolve


def _sessions(args) -> list[tuple[int, object]]:
    """The --layer L --session FILE pairs, each file read and checked as a session file."""
    layers, files = args.layer or [], args.session or []
    if len(layers) != len(files):
        raise ModelError("give each --session with the --layer it edits: --layer L --session EDITED.json")
    from ..io.session_file import load_session

    out = []
    for layer, path in zip(layers, files):
        if layer < 0:
            raise ModelError(f"--layer {layer} is out of range: layers count from 0")
        out.append((layer, load_session(path)))
    if len({layer for layer, _ in out}) != len(out):
        raise ModelError("a layer is given twice: one --session per --layer")
    return out


def _check_first(args) -> None:
    problem = missing_dependencies()
    if problem:
        raise ModelError(problem)
    text = getattr(args, "text", None)
    if text is not None and not text.strip():
        raise ModelError("--text is empty: give the sentence the model should read")
    if args.ablate is not None and not args.ablate.strip():
        raise ModelError("--ablate is empty: give heads as LAYER.HEAD, e.g. 3.1,17.4")
    # --ablation says how the --ablate heads are ablated: alone it would be silently ignored
    # (the default, zero, is set here so that a given one can be told from it)
    if args.ablation is not None and not args.ablate:
        raise ModelError(f"--ablation {args.ablation} needs --ablate L.H[,L.H…]: the heads it ablates")
    args.ablation = args.ablation or "zero"
    patch_text = getattr(args, "patch_text", None)   # generate has no patched heads
    if args.ablation == "patch" and not (patch_text or "").strip():
        raise ModelError("--ablation patch needs --patch-text: the second text a patched head takes its output from")
    if patch_text is not None and args.ablation != "patch":
        raise ModelError("--patch-text is only for --ablation patch")


def _session_text(sessions, label: str, given: str | None) -> str:
    """The text the edited sessions were read from (import-model and the window write it in the
    file), which must be one text, and the one --text gives when given."""
    texts = set()
    for layer, session in sessions:
        origin = session.extra.get("model") if isinstance(session.extra.get("model"), dict) else {}
        if "layer" in origin and origin.get("layer") != layer:
            raise ModelError(f"the session given for --layer {layer} is layer {origin['layer']} of "
                             f"{origin.get('name', 'its model')}, not layer {layer}")
        if isinstance(origin.get("text"), str):
            texts.add(origin["text"])
    if given is not None:
        return given
    if len(texts) == 1:
        return texts.pop()
    if texts:
        raise ModelError("the sessions were read from different texts: give --text")
    raise ModelError("give --text: the session file does not say which text its layer was read from")


def _interventions(args, behaviour, sessions):
    from ..models.interventions import Interventions, parse_heads

    loaded = behaviour.loaded
    interventions = Interventions(patch_text=getattr(args, "patch_text", None))
    if args.ablate:
        for layer, head in parse_heads(args.ablate, loaded.num_layers, loaded.num_heads, loaded.source.label):
            interventions = interventions.with_ablation(layer, head, args.ablation)
    for layer, session in sessions:
        if layer >= loaded.num_layers:
            raise ModelError(f"--layer {layer} is out of range: {loaded.source.label} has layers 0..{loaded.num_layers - 1}")
        behaviour.layer_edit(layer, session)   # refuses a session that is not this model's layer
        interventions = interventions.with_edit(layer, session)
    behaviour.check(interventions)
    return interventions


def _open(args, text: str):
    from ..models.interventions import Behaviour
    from ..models.loading import load_model

    from ..models.head_scores import run_document

    loaded = load_model(resolve(args.model))
    return Behaviour(loaded, run_document(loaded, text))   # a repeated:N[:SEED] probe too


def open_with_interventions(args):
    """The model run on --text and the interventions the arguments give (``predict`` and
    ``generate``): the session files are read and checked before the model is opened."""
    sessions = _sessions(args)
    resolve(args.model)
    if sessions:
        _session_text(sessions, args.model, args.text)   # a file of another layer is refused here
    behaviour = _open(args, args.text)
    return behaviour, _interventions(args, behaviour, sessions)


def run_predict(args) -> int:
    _check_first(args)
    if args.top < 1:
        raise ModelError(f"--top {args.top}: give a whole number ≥ 1")
    if args.versus is not None and args.target is None:
        raise ModelError("--versus needs --target: the logit difference is target − versus")
    behaviour, interventions = open_with_interventions(args)
    asked = [flag for flag, given in (("--target", args.target), ("--versus", args.versus),
                                      ("--position", args.position), ("--logit-lens", args.logit_lens or None))
             if given is not None]
    if behaviour.problem and asked:   # they were ignored: only the embeddings' cosine was printed
        raise ModelError(f"{', '.join(asked)} {'need' if len(asked) > 1 else 'needs'} a prediction of tokens, which {behaviour.loaded.source.label} "
                         f"does not make: {behaviour.problem}")
    result = behaviour.predict(interventions, args.position, args.top, args.target, args.versus, args.logit_lens)
    if args.json:
        print(json.dumps(result, ensure_ascii=False, indent=1))
    else:
        print(readable(result, behaviour.loaded.describe()))
    return 0


def run_export_model(args) -> int:
    _check_first(args)
    out = Path(args.out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ModelError(f"--out {args.out} exists and is not an empty folder: give a new folder")
    if not out.parent.is_dir():
        raise ModelError(f"--out {args.out}: the folder {out.parent} does not exist")
    from .model_output import writable_parent

    writable_parent(out, "--out")
    if args.ablation in ("mean", "patch") and args.ablate:
        raise ModelError(f"cannot save a {args.ablation} ablation: it replaces the head's output by one that depends "
                         "on the text, which no weight can hold; only zero ablations and edited weights can be saved")
    sessions = _sessions(args)
    resolve(args.model)
    if not sessions and not args.ablate:
        raise ModelError("nothing to save: give --ablate L.H and/or --layer L --session EDITED.json")
    text = _session_text(sessions, args.model, args.text) if sessions else "a"
    behaviour = _open(args, text)
    interventions = _interventions(args, behaviour, sessions)
    from ..models.saving import save_edited_model

    save_edited_model(behaviour, interventions, out)
    print(f"{out}: {behaviour.loaded.describe()} with {', '.join(interventions.describe())}", file=sys.stderr)
    return 0


def _cell(entry: dict | None) -> str:
    if entry is None:
        return ""
    return f"{entry['token']:<14.14} {entry['prob']:7.4f} {entry['logit']:9.3f}"


def readable(result: dict, model: str) -> str:
    """``predict`` without --json: the tables a person reads."""
    tokens = result["tokens"]
    lines = [f"{model}", f"{len(tokens)} tokens: {' '.join(tokens)}"]
    embedding = result.get("embedding")
    if embedding is not None:
        lines.append(embedding["why"])
        if embedding["cosine"] is not None:
            lines.append(f"mean-pooled embedding with {', '.join(result['intervened']['interventions'])}: "
                         f"cosine similarity to the unedited one {embedding['cosine']:.6f}")
        return "\n".join(lines)
    position = result["position"]
    lines.append(f"prediction at position {position} ({tokens[position]})")
    edited = result["intervened"]
    head = f"{'rank':>4}  {'unedited':<14} {'prob':>7} {'logit':>9}"
    if edited is not None:
        head += f"   {'with ' + ', '.join(edited['interventions']):<32.32} {'Δlogit':>8} {'Δrank':>6}"
    lines.append(head)
    for i, base in enumerate(result["baseline"]["top"]):
        row = f"{i + 1:>4}  {_cell(base)}"
        if edited is not None:
            e = edited["top"][i]
            row += f"   {e['token']:<14.14} {e['prob']:7.4f} {e['logit']:9.3f} {e['delta_logit']:+8.3f} {e['delta_rank']:+6d}"
        lines.append(row)
    if result["target"] is not None:
        from ..models.prediction import target_lines

        lines += target_lines(result["target"])
    if result["logit_lens"] is not None:
        lines.append("logit lens (each layer's residual through the final norm and the unembedding):")
        for entry in result["logit_lens"]:
            row = f"  layer {entry['layer']:>3}  {_lens(entry['baseline'])}"
            if entry["intervened"] is not None:
                row += f"   |  {_lens(entry['intervened'])}"
            lines.append(row)
    return "\n".join(lines)


def _lens(entry: dict) -> str:
    top = entry["top"]
    text = f"{top['token']:<14.14} {top['prob']:.4f}"
    if entry["target_prob"] is not None:
        text += f"  p(target) {entry['target_prob']:.4f}"
    return text
