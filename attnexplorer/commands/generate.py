"""``attnexplorer generate``: a decoder writes on from a text, one token at a time from its KV
cache (``models.generation``), with the user's ablations and edited layers in force.

The arguments are ``predict``'s (the model, --ablate/--ablation, --layer/--session pairs), read
and checked by the same functions, plus --steps and the sampling; everything that needs no
model is checked first, and every refusal is one ModelError line (exit status 2). The text grows
on stdout as each token comes (without --json); stderr says what runs and how it ended.
"""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import numpy as np

from ..models.sources import ModelError
from .predict import _check_first, open_with_interventions

SAMPLING_ARGS = ("temperature", "top_k", "top_p", "seed")


def _sampling(args):
    from ..models.generation import Sampling

    given = [name for name in SAMPLING_ARGS if getattr(args, name) is not None]
    if args.greedy and given:
        raise ModelError(f"--greedy takes the most likely token: it cannot go with --{given[0].replace('_', '-')}")
    if not given:
        return Sampling()
    return Sampling(greedy=False, temperature=1.0 if args.temperature is None else args.temperature,
                    top_k=args.top_k, top_p=args.top_p, seed=0 if args.seed is None else args.seed)


def _check_trace(path: str | None) -> None:
    if path is None:
        return
    out = Path(path)
    if out.suffix.lower() != ".npz":
        raise ModelError(f"--trace {path}: the trace is a NumPy .npz file: give a name ending in .npz")
    if not out.parent.is_dir():
        raise ModelError(f"--trace {path}: the folder {out.parent} does not exist")
    if out.is_dir():
        raise ModelError(f"--trace {path} is a folder: give a file name ending in .npz")


class _GrowingText:
    """Writes the generated text to stdout as it grows: the tokenizer's text of all new ids, less
    what was written; held back while it ends in half a character (a byte-level token)."""

    def __init__(self, generation):
        self.generation, self.written = generation, ""

    def update(self, final: bool = False) -> None:
        text = self.generation.generated_text()
        if text.endswith("\ufffd") and not final:
            return
        if text.startswith(self.written):
            sys.stdout.write(text[len(self.written):])
            sys.stdout.flush()
            self.written = text


def run_generate(args) -> int:
    from ..models.generation import Generation

    _check_first(args)
    if args.steps < 1:
        raise ModelError(f"--steps {args.steps}: give a whole number ≥ 1")
    sampling = _sampling(args)
    _check_trace(args.trace)
    behaviour, interventions = open_with_interventions(args)
    generation = Generation(behaviour, interventions, sampling)
    loaded = behaviour.loaded
    edits = ", ".join(interventions.describe())
    print(f"{loaded.describe()}; {sampling.describe()}{'; with ' + edits if edits else ''}; "
          f"{generation.length} prompt tokens", file=sys.stderr)
    growing = None
    if not args.json:
        sys.stdout.write(args.text)
        growing = _GrowingText(generation)

    def progress(done, count, step):
        if growing is not None:
            growing.update()
        else:
            print(f"step {done}/{count}: {step.token!r}", file=sys.stderr)

    steps = generation.run(args.steps, progress)
    numbers, size = generation.cache_size()
    ended = ("a stop token" if steps and steps[-1].stop else
             f"{loaded.source.label}'s last position ({loaded.max_positions})" if len(steps) < args.steps else
             f"{args.steps} steps")
    if growing is not None:
        growing.update(final=True)
        sys.stdout.write("\n")
    print(f"{len(steps)} tokens added, ended by {ended}; KV cache {numbers:,} numbers, {_bytes(size)}",
          file=sys.stderr)
    if args.trace:
        _write_trace(args.trace, generation, steps)
    if args.json:
        print(json.dumps(_result(generation, steps, sampling, interventions, ended), ensure_ascii=False, indent=1))
    return 0


def _bytes(size: int) -> str:
    for unit, scale in (("GB", 1024**3), ("MB", 1024**2), ("KB", 1024)):
        if size >= scale:
            return f"{size / scale:.1f} {unit} ({size:,} bytes)"
    return f"{size:,} bytes"


def _result(generation, steps, sampling, interventions, ended: str) -> dict:
    behaviour = generation.behaviour
    numbers, size = generation.cache_size()
    prompt = generation.ids[:generation.prompt_length]
    return {
        "model": behaviour.loaded.describe(),
        "prompt": {"text": behaviour.run.text, "ids": prompt, "tokens": list(behaviour.run.tokens)},
        "sampling": {"greedy": sampling.greedy, "temperature": sampling.temperature, "top_k": sampling.top_k,
                     "top_p": sampling.top_p, "seed": sampling.seed},
        "interventions": interventions.describe(),
        "ids": list(generation.ids),
        "generated": {"ids": [s.token_id for s in steps], "tokens": [s.token for s in steps],
                      "pieces": [behaviour.loaded.tokenizer.piece(s.token_id) for s in steps],
                      "text": generation.generated_text()},
        "steps": [{"position": s.position, "id": s.token_id, "token": s.token, "prob": s.prob, "top": s.top,
                   "stop": s.stop, "cache_numbers": s.cache_numbers, "cache_bytes": s.cache_bytes} for s in steps],
        "ended_by": ended,
        "cache": {"numbers": numbers, "bytes": size},
    }


def _write_trace(path: str, generation, steps) -> None:
    """Each step's attention rows, zero-padded to the last step's keys (a key not yet written is
    one the row cannot read: weight 0), with the keys each row has and the cache sizes."""
    from ..io.atomic import atomic_write_bytes

    keys = max((s.attention.shape[-1] for s in steps), default=0)
    layers, heads = generation.loaded.num_layers, generation.loaded.num_heads
    attention = np.zeros((len(steps), layers, heads, keys), dtype=np.float32)
    for i, s in enumerate(steps):
        attention[i, :, :, :s.attention.shape[-1]] = s.attention
    buffer = io.BytesIO()
    np.savez(buffer, attention=attention,
             keys=np.array([s.attention.shape[-1] for s in steps], dtype=np.int64),
             ids=np.array([s.token_id for s in steps], dtype=np.int64),
             prompt_ids=np.array(generation.ids[:generation.prompt_length], dtype=np.int64),
             cache_numbers=np.array([s.cache_numbers for s in steps], dtype=np.int64),
             cache_bytes=np.array([s.cache_bytes for s in steps], dtype=np.int64),
             top_ids=np.array([[t["id"] for t in s.top] for s in steps], dtype=np.int64).reshape(len(steps), -1),
             top_probs=np.array([[t["prob"] for t in s.top] for s in steps], dtype=np.float64).reshape(len(steps), -1))
    atomic_write_bytes(path, buffer.getvalue())
