"""The command line's parsers: the window's (``attnexplorer [SESSION | --preset NAME]``) and one
per subcommand of ``cli.py``.

Apart from ``cli.py``, which dispatches, so that what opens the window the way the command
line does (the bench's start-up and long-window probes) reads the same arguments without
importing the dispatcher that launches the bench. Only argparse is imported, so that
``attnexplorer --help`` stays instant.
"""

from __future__ import annotations

import argparse

from .. import __version__


class UsageError(Exception):
    """A command line argparse could not parse; ``main`` prints it as one line, exit 2."""


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line like every other error (argparse prints the
    whole usage first, five lines for ``export``), naming where to read the usage."""

    def error(self, message: str):
        raise UsageError(f"{message} (see `{self.prog} --help`)")


def _add_source_args(p: argparse.ArgumentParser, required: bool) -> None:
    src = p.add_mutually_exclusive_group(required=required)
    src.add_argument("--preset", metavar="NAME", help="start from a preset (see `attnexplorer presets`)")
    src.add_argument("--session", metavar="FILE", help="a session file (.json)")
    p.add_argument("--set", metavar="KEY=VALUE", action="append", default=[], dest="params",
                   help="a preset parameter, e.g. --set tau=0.02 (repeatable)")


def _add_compute_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--mask", metavar="MASK",
                   help="override the mask: none, causal, window:W, padding:J,K,... ")
    p.add_argument("--scale", metavar="SCALE",
                   help="override the scale: inv_sqrt_dk, none, temperature:T, factor:F")
    p.add_argument("--device", default="cpu", help="cpu (default), cuda or mps when available")
    p.add_argument("--dtype", default="float32", help="float32 (default), float64, float16, bfloat16")


def build_parser() -> argparse.ArgumentParser:
    """The launcher's parser (no subcommand: open the window)."""
    p = Parser(
        prog="attnexplorer",
        description="Explore transformer self-attention by hand. Commands: "
        "export (write matrices and figures with no window), fit (learn W_q, W_k toward a target pattern), "
        "presets (list presets), bench (measure speed), import-model (a real model's layer as a session), "
        "predict (a real model's prediction with ablations and edits), generate (a decoder writes on, token by "
        "token from its KV cache), export-model (save the edited model), "
        "lesson (a lesson's steps, or its handout as PDF, beamer or Markdown), "
        "heads (which heads do what: scores and attribution). "
        "Run `attnexplorer COMMAND --help` for each.",
    )
    p.add_argument("session_file", nargs="?", metavar="SESSION", help="a session file to open")
    p.add_argument("--preset", metavar="NAME", help="open a preset, e.g. pronoun, dessert, sine, random, rope, translate")
    p.add_argument("--set", metavar="KEY=VALUE", action="append", default=[], dest="params",
                   help="a preset parameter (repeatable)")
    p.add_argument("--lesson", metavar="NAME|FILE",
                   help="teach a lesson: pronoun, dessert, sine, rope, translate or a lesson file")
    p.add_argument("--self-test", action="store_true",
                   help="check headlessly that this install works (presets, compute, panels, exports)")
    p.add_argument("--version", action="version", version=f"attnexplorer {__version__}")
    return p


def build_export_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="attnexplorer export",
        description="Compute a preset or a session with no window and write its matrices "
        "(and figures) to a folder.",
    )
    _add_source_args(p, required=True)
    p.add_argument("--out", required=True, metavar="DIR", help="the folder to write into (created if missing)")
    p.add_argument("--matrices", default="npz,json", metavar="FORMATS",
                   help="comma-separated: npz, npy, csv, json, tex, md (default: npz,json)")
    p.add_argument("--figures", default="", metavar="FORMATS",
                   help="comma-separated: png, svg, pdf (default: none)")
    p.add_argument("--allow-large", action="store_true",
                   help="write an export above 2 GB on disk (refused without it, saying its size)")
    p.add_argument("--selection", action="store_true",
                   help="draw the selected query and key in the figures (orange row box, dashed key "
                        "column); by default figures show the data alone")
    part = p.add_argument_group(
        "part of the attention matrices (for long inputs; a long session always writes them this way)")
    part.add_argument("--head", metavar="H", help="only head H (default: all)")
    part.add_argument("--rows", metavar="START:STOP",
                      help="only query rows START..STOP-1, e.g. 8000:8064 (figures: zoomed to them)")
    part.add_argument("--selected-rows", metavar="ROWS", nargs="?", const="selected",
                      help="only these query rows, e.g. 5,9,12; alone: the session's selected query")
    part.add_argument("--overview", metavar="POOL",
                      help="the pooled overview instead of rows: max or mean (about 1,024 cells a side)")
    part.add_argument("--cols", metavar="START:STOP",
                      help="figures only (with --figures): the key columns the heatmaps zoom to")
    part.add_argument("--attention", metavar="NAMES",
                      help="which n×n matrices: weights (default), scores, scaled_scores, comma-separated")
    _add_compute_args(p)
    return p


def build_fit_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="attnexplorer fit",
        description="Learn W_q and W_k of a head toward a target attention pattern (gradient descent "
        "on the mean KL(target || weights) over query rows) and write the fitted session.",
    )
    _add_source_args(p, required=True)
    p.add_argument("--target", required=True, metavar="TARGET",
                   help="previous-token, first-token, self, uniform, window:W, head:H, or a .npy/.csv n×n matrix")
    p.add_argument("--head", metavar="H", help="the head to fit, or 'all' for one target per head "
                   "(default: the head the session was saved with selected, else 0)")
    p.add_argument("--train", default="q,k", metavar="WHAT", help="comma-separated: q, k, biases (default: q,k)")
    p.add_argument("--optimizer", default="adam", help="adam (default) or sgd")
    p.add_argument("--lr", default=None, metavar="X",
                   help="learning rate (default: 0.05 for adam, 1.0 for sgd)")
    p.add_argument("--steps", default="500", metavar="N", help="the most steps (default 500)")
    p.add_argument("--out", required=True, metavar="FITTED.json", help="the fitted session file to write")
    _add_compute_args(p)
    return p


def build_presets_parser() -> argparse.ArgumentParser:
    p = Parser(prog="attnexplorer presets", description="List the presets and their parameters.")
    return p


def build_bench_parser() -> argparse.ArgumentParser:
    p = Parser(prog="attnexplorer bench",
                                description="Measure engine, redraw and start-up speed headlessly.")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    p.add_argument("--quick", action="store_true", help="fewer sizes and repeats; the real-model rows "
                   "(models, behaviour, generation, heads) only when --only names them")
    p.add_argument("--device", default=None, help="only this device (default: cpu and cuda when present)")
    p.add_argument("--only", metavar="ROWS", help="only these kinds of rows, comma-separated: engine, stages, redraw, "
                   "drag, edit_cost, heatmap, large, startup, export, long, fit_steps, fit_gui, models, behaviour, "
                   "generation, heads (default: all)")
    return p


def layer_list(text: str):
    """``--layer``: ``L``, a list ``0,3,5`` (kept in order, each once) or ``all`` → [L…] or "all"."""
    text = str(text).strip()
    if text.lower() == "all":
        return "all"
    layers = []
    for part in text.split(","):
        part = part.strip()
        if part.startswith("-") and part[1:].isdigit():
            raise argparse.ArgumentTypeError(f"{part} is out of range: layers count from 0")
        if not part.isdigit():
            raise argparse.ArgumentTypeError(f"{text!r} is not a layer: give L (0, 1, …), a list such as 0,3,5, or all")
        if int(part) in layers:
            raise argparse.ArgumentTypeError(f"{text!r} names layer {int(part)} twice")
        layers.append(int(part))
    return layers


def build_import_model_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="attnexplorer import-model",
        description="Run a real model on a text once and write the asked layers' attention as session files "
        "(version 2), exact to the model's own numbers; optionally the model window's figures. Nothing is downloaded.",
    )
    p.add_argument("model", metavar="MODEL",
                   help="minilm, smollm2, a folder in Hugging Face layout or a .gguf file")
    p.add_argument("--text", required=True, help="the text the model reads")
    p.add_argument("--layer", type=layer_list, default=[0], metavar="L|L,L…|all",
                   help="the layer to import (default 0), a list such as 0,3,5, or all: every one from one run")
    p.add_argument("--out", required=True, metavar="FILE.json|DIR",
                   help="the session file to write; for a list of layers or all, a folder (created if missing) "
                   "that gets layer<L>.json for each")
    p.add_argument("--figures", default="", metavar="FORMATS",
                   help="comma-separated png, svg, pdf: the model view, each layer's head view (all heads, and "
                   "each head), the head scores' heatmaps and, for a model with an LM head, the predictions and "
                   "the logit lens (with --out-figures)")
    p.add_argument("--out-figures", metavar="DIR", help="the folder the figures go into (created if missing)")
    return p


def _add_intervention_args(p: argparse.ArgumentParser, patch: bool = True) -> None:
    p.add_argument("model", metavar="MODEL",
                   help="minilm, smollm2, a folder in Hugging Face layout or a .gguf file")
    p.add_argument("--ablate", metavar="L.H[,L.H…]", help="heads to ablate, e.g. 0.0,17.4 (layer.head)")
    if patch:
        p.add_argument("--ablation", choices=("zero", "mean", "patch"),
                       help="zero (the head's output is 0, default), mean (its mean over the text's positions) or "
                            "patch (its output on --patch-text)")
        p.add_argument("--patch-text", metavar="TEXT2",
                       help="the second text, of the same token length, for --ablation patch")
    else:
        p.add_argument("--ablation", choices=("zero", "mean"),
                       help="zero (the head's output is 0, default) or mean (its mean over the prompt's positions, "
                            "held for the new tokens)")
    p.add_argument("--layer", type=int, action="append", metavar="L",
                   help="the layer --session edits (repeatable, one per --session)")
    p.add_argument("--session", action="append", metavar="EDITED.json",
                   help="an edited layer session (from import-model or the window) to put in place of layer L")


def build_predict_parser() -> argparse.ArgumentParser:
    p = Parser(prog="attnexplorer predict",
               description="A real model's next-token prediction on a text, unedited and with head ablations and "
               "edited layers, side by side; optionally a picked token, a logit difference and the logit lens.")
    _add_intervention_args(p)
    p.add_argument("--text", required=True, help="the text the model reads")
    p.add_argument("--position", type=int, metavar="P",
                   help="the token position to predict from (default: the last; a masked LM's first [MASK])")
    p.add_argument("--top", type=int, default=10, metavar="K", help="how many top tokens (default 10)")
    p.add_argument("--target", metavar="TOKEN", help='a token to follow, e.g. " Mary" (one token, its space included)')
    p.add_argument("--versus", metavar="TOKEN", help='a second token: the logit difference target − versus, e.g. " John"')
    p.add_argument("--logit-lens", action="store_true", help="every layer's residual through the final norm and unembedding")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    return p


def build_generate_parser() -> argparse.ArgumentParser:
    p = Parser(prog="attnexplorer generate",
               description="A decoder (GPT-2, Llama-family) writes on from a text one token at a time from its KV "
               "cache, with head ablations and edited layers in force: the text grows on stdout, progress on "
               "stderr; --json the tokens and each step's top 5, --trace each step's attention rows.")
    _add_intervention_args(p, patch=False)
    p.add_argument("--text", required=True, help="the prompt the model writes on from")
    p.add_argument("--steps", type=int, required=True, metavar="N", help="how many tokens to add (a stop token ends sooner)")
    p.add_argument("--greedy", action="store_true", help="always the most likely token (the default)")
    p.add_argument("--temperature", type=float, metavar="T", help="sample at this temperature (> 0; default 1)")
    p.add_argument("--top-k", type=int, metavar="K", help="sample among the K most likely tokens")
    p.add_argument("--top-p", type=float, metavar="P", help="sample among the likeliest tokens whose probability reaches P")
    p.add_argument("--seed", type=int, metavar="S", help="the sampling's seed (default 0): the same seed, the same text")
    p.add_argument("--json", action="store_true", help="print the ids, pieces and each step's top 5 as JSON")
    p.add_argument("--trace", metavar="OUT.npz",
                   help="write each step's attention rows (steps × layers × heads × keys) and the cache sizes")
    return p


def build_heads_parser() -> argparse.ArgumentParser:
    p = Parser(prog="attnexplorer heads",
               description="Which heads do what: a score per layer and head (previous-token, first-token, self, "
               "window, duplicate-token, induction, a pattern) and optionally each head's direct logit attribution "
               "or the effect of ablating it, one CSV row per head. See the README's 'Which heads do what'.")
    p.add_argument("model", metavar="MODEL", help="minilm, smollm2, a folder in Hugging Face layout or a .gguf file")
    p.add_argument("--text", help="the text the model reads")
    p.add_argument("--probe", metavar="repeated:N[:SEED]",
                   help="N random tokens then the same N again (a BOS first when the model uses one)")
    p.add_argument("--text-file", metavar="F", help="a UTF-8 file holding the text")
    p.add_argument("--scores", metavar="LIST", help="comma-separated: previous-token, first-token, self, window:W, "
                   "duplicate-token, induction, pattern:FILE.npy (default: all but pattern, window:3)")
    p.add_argument("--attribution", metavar="KIND", help="dla, ablate:zero, ablate:mean or ablate:patch (with --patch-text)")
    p.add_argument("--target", metavar="TOKEN", help='the token whose logit is attributed, e.g. " Mary"')
    p.add_argument("--versus", metavar="TOKEN", help='a second token: the logit difference target − versus')
    p.add_argument("--position", type=int, metavar="P", help="the position predicting it (default: the last)")
    p.add_argument("--patch-text", metavar="TEXT2", help="for ablate:patch: the second text, of the same token length, "
                   "each head's output is taken from (a repeated:N[:SEED] probe too)")
    p.add_argument("--out", required=True, metavar="SCORES.csv", help="the CSV file to write")
    p.add_argument("--json", action="store_true", help="also print the rows as a JSON list of objects")
    p.add_argument("--figures", default="", metavar="FORMATS",
                   help="comma-separated png, svg, pdf: each column's layers × heads heatmap (with --out-figures)")
    p.add_argument("--out-figures", metavar="DIR", help="the folder the figures go into (created if missing)")
    return p


def build_export_model_parser() -> argparse.ArgumentParser:
    p = Parser(prog="attnexplorer export-model",
               description="Save the model with edited layers and zero-ablated heads folded into its weights, as a "
               "Hugging Face folder that transformers loads (config.json, model.safetensors, the tokenizer files).")
    _add_intervention_args(p)
    p.add_argument("--text", help="the text the sessions' layers were read from (default: the one the session file names)")
    p.add_argument("--out", required=True, metavar="FOLDER", help="the new folder to write")
    return p


def build_lesson_parser() -> argparse.ArgumentParser:
    p = Parser(prog="attnexplorer lesson",
               description="Print a lesson's steps with their numbers, or write its handout: a PDF (one page "
               "per step), a LaTeX beamer deck or Markdown with SVG figures.")
    p.add_argument("lesson", metavar="NAME|FILE",
                   help="a built-in lesson (pronoun, dessert, sine, rope, translate) or a lesson file")
    p.add_argument("--handout", metavar="FORMAT", help="pdf, beamer or md")
    p.add_argument("--out", metavar="DIR", help="the folder to write the handout into (created if missing)")
    p.add_argument("--dtype", default="float32", help="float32 (default, as the window) or float64")
    return p
