"""Which heads do what: a score per layer × head from the attention weights, Qt-free.

Every score is the weight a head puts on a target set of keys, averaged over query rows:

    score = Σ_i∈R Σ_j A_ij · D_ij / |R|

with ``A`` the head's weights and ``D`` the score's detection pattern (1 on the target keys).
For the head-detector scores ``R`` is every query row and ``|R|`` is Σ_ij A_ij (= n when every
row sums to 1): exactly TransformerLens's ``detect_head`` with ``error_measure="mul"`` and its
defaults, so a user can check ours against theirs.

- ``previous-token``: D_ij = 1 when j = i − 1 (the first row has no target);
- ``first-token``: j = 0 (an attention sink);
- ``self``: j = i (TransformerLens's ``current_token``);
- ``window:W``: i − W < j ≤ i (the keys the window mask W allows);
- ``duplicate-token``: j < i and token j = token i (every earlier copy);
- ``induction``: on a ``repeated:N`` probe, TransformerLens's induction score: ``R`` the N
  query rows of the repeat, D the token just after the query's earlier copy (j = i − N + 1),
  divided by N; on any other text its head detector's induction pattern (1 ≤ j ≤ i and token
  j − 1 = token i), divided by Σ A;
- ``pattern:FILE.npy``: 1 − the mean over the rows of the total-variation distance to a target
  (n × n): 1 − (1/n) Σ_i ½ Σ_j |A_ij − T_ij|.

``HeadScores`` is called with one block of query rows at a time (``observe`` of the forward:
``LoadedModel.run(observe=…)``), so a long text is scored during its forward with nothing n × n
kept per head; a causal block's keys may stop at its last row (the later ones weigh 0).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .sources import ModelError

BUILT_IN = ("previous-token", "first-token", "self", "window", "duplicate-token", "induction")
DEFAULT = "previous-token,first-token,self,window:3,duplicate-token,induction"


@dataclass(frozen=True)
class Score:
    kind: str
    width: int | None = None          # window:W
    path: str | None = None           # pattern:FILE.npy
    target: np.ndarray | None = None  # the pattern (n × n), read from path

    @property
    def name(self) -> str:
        if self.kind == "window":
            return f"window:{self.width}"
        if self.kind == "pattern":
            return f"pattern:{Path(self.path).name}"
        return self.kind


def parse_scores(text: str) -> list[Score]:
    """``"previous-token,window:3,pattern:t.npy"`` → Scores; ModelError naming a bad one."""
    out: list[Score] = []
    for part in str(text).split(","):
        part = part.strip()
        kind, colon, arg = part.partition(":")
        if kind == "window":
            if not arg.strip().isdigit() or int(arg) < 1:
                raise ModelError(f"--scores {part!r}: give the window as window:W with W a whole number ≥ 1")
            out.append(Score("window", width=int(arg)))
        elif kind == "pattern":
            out.append(_pattern(arg.strip(), part))
        elif kind in BUILT_IN and not colon:
            out.append(Score(kind))
        else:
            raise ModelError(f"unknown score {part!r}: choose previous-token, first-token, self, window:W, "
                             "duplicate-token, induction or pattern:FILE.npy")
    names = [s.name for s in out]
    if len(set(names)) != len(names):
        raise ModelError(f"--scores names {next(n for n in names if names.count(n) > 1)} twice")
    return out


def _pattern(path: str, part: str) -> Score:
    if not path:
        raise ModelError(f"--scores {part!r}: give the target as pattern:FILE.npy (an n × n array)")
    try:
        target = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise ModelError(f"--scores {part}: no file {path}") from None
    except IsADirectoryError:
        raise ModelError(f"--scores {part}: {path} is a folder, not a .npy file") from None
    except (OSError, ValueError) as err:
        # numpy's refusal of a non-.npy file talks of pickles and allow_pickle: not the user's words
        why = "not a NumPy .npy file" if "pickle" in str(err) else str(err)
        raise ModelError(f"--scores {part}: cannot read {path} as a .npy array ({why})") from None
    if target.ndim != 2 or target.shape[0] != target.shape[1] or not np.issubdtype(target.dtype, np.number):
        raise ModelError(f"--scores {part}: the target must be a square (n × n) array of numbers, got {target.shape}")
    target = target.astype(np.float64)
    if not np.isfinite(target).all() or (target < 0).any():
        raise ModelError(f"--scores {part}: the target must hold finite weights ≥ 0")
    return Score("pattern", path=path, target=target)


@dataclass(frozen=True)
class Probe:
    """A ``repeated:N[:seed]`` probe: ``prefix`` (BOS…), N random ids, the same N again, ``suffix``."""

    ids: tuple[int, ...]
    repeat: int      # N
    start: int       # where the first copy starts (after the BOS, when the model uses one)
    name: str


PROBE_PREFIX = "repeated:"


def is_probe(text) -> bool:
    """Whether a text names a probe (``repeated:…``): the window's text box, ``--text``, ``--probe``
    and ``--patch-text`` all read it so, and refuse a malformed one with ``parse_probe``'s words."""
    return isinstance(text, str) and text.strip().startswith(PROBE_PREFIX)


def parse_probe(text: str) -> tuple[int, int]:
    """``"repeated:N[:SEED]"`` → (N, SEED); ModelError saying the form otherwise."""
    kind, _, rest = str(text).strip().partition(":")
    size, _, seed = rest.partition(":")
    if kind != "repeated" or not size.strip().isdigit() or int(size) < 1 or (seed and not seed.strip().isdigit()):
        raise ModelError(f"the probe {str(text).strip()!r}: give repeated:N or repeated:N:SEED (N ≥ 1 random tokens, "
                         "then the same N again)")
    return int(size), int(seed or 0)


def make_probe(loaded, text: str) -> Probe:
    """N random ids from the vocabulary (special tokens left out), then the same N again, wrapped
    as the tokenizer wraps a text (a BOS first when the model uses one; BERT's [CLS] … [SEP])."""
    size, seed = parse_probe(text)
    tokenizer = loaded.tokenizer
    vocab = int(loaded.config.vocab_size)
    special = tokenizer.special_ids()
    plain = tokenizer.encode_plain("a")
    wrapped, _ = tokenizer.encode("a")
    start = next((k for k in range(len(wrapped) - len(plain) + 1) if wrapped[k:k + len(plain)] == plain), 0)
    prefix, suffix = wrapped[:start], wrapped[start + len(plain):]
    candidates = np.array([i for i in range(vocab) if i not in special and tokenizer.piece(i)], dtype=np.int64)
    if len(candidates) == 0:
        raise ModelError("the vocabulary has no ordinary tokens to make a probe from")
    total = len(prefix) + 2 * size + len(suffix)
    limit = min(loaded.max_positions, 8192)
    if total > limit:
        raise ModelError(f"the probe {str(text).strip()} is {total} tokens; {loaded.source.label} reads at most {limit}")
    drawn = np.random.default_rng(seed).choice(candidates, size=size).tolist()
    return Probe(tuple(prefix + drawn + drawn + suffix), size, start, f"repeated:{size}:{seed}")


def document(loaded, text: str) -> tuple[list[int], list[str], str, Probe | None]:
    """(ids, pieces, the run's text, the probe or None) of a text or a ``repeated:N[:SEED]`` probe.
    A probe's run is named by its full form (``repeated:256:0``), so a session read from it
    names a text that makes the same ids again (``predict --session``)."""
    if is_probe(text):
        probe = make_probe(loaded, text)
        ids = list(probe.ids)
        return ids, [loaded.tokenizer.piece(i) for i in ids], probe.name, probe
    ids, pieces = loaded.tokenize(text)
    return ids, pieces, text, None


def run_document(loaded, text: str, progress=None, cancelled=None, observe=None):
    """``loaded.run`` on a text or a probe (``document``): the ``ModelRun``."""
    ids, pieces, label, _probe = document(loaded, text)
    return loaded.run_ids(ids, pieces, label, progress, cancelled, observe)


class HeadScores:
    """Accumulates every score, layer by layer, from blocks of query rows (``observe``)."""

    def __init__(self, scores: list[Score], ids, layers: int, heads: int, probe: Probe | None = None):
        import torch

        self.scores, self.probe = scores, probe
        self.ids = torch.as_tensor(list(ids), dtype=torch.long)
        n = len(self.ids)
        for s in scores:
            if s.kind == "pattern" and s.target.shape != (n, n):
                raise ModelError(f"--scores {s.name}: the target is {s.target.shape[0]} × {s.target.shape[1]}, "
                                 f"the text {n} × {n} tokens")
        self.sums = {s.name: np.zeros((layers, heads)) for s in scores}
        self.mass = np.zeros((layers, heads))   # Σ A: TransformerLens's denominator
        self._pairs = None                       # (queries, earlier copies): ``_copies``
        self.n = n

    def __call__(self, layer: int, first: int, weights) -> None:
        import torch

        w = weights.detach().float()
        heads, rows, keys = w.shape
        # Σ over keys in float32 (a row sums to about 1), then the rows in float64
        self.mass[layer] += w.sum(dim=2).sum(dim=1, dtype=torch.float64).numpy()
        for s in self.scores:
            if s.kind == "pattern":
                target = torch.from_numpy(s.target[first:first + rows])
                gap = (w.double() - target[:, :keys]).abs().sum(dim=(1, 2)) + target[:, keys:].sum()
                self.sums[s.name][layer] += 0.5 * gap.numpy()
                continue
            self.sums[s.name][layer] += self._weight_on(s, w, first).numpy()

    def _weight_on(self, s: Score, w, first: int):
        """Σ of one block's weights on the score's targets, per head (float64). Only the targets
        are read: a stripe j = i + k is a diagonal of the block (``_stripe``), the token-matching
        scores gather their few (row, key) pairs; no block-sized product is made."""
        import torch

        heads, rows, keys = w.shape
        if s.kind == "previous-token":
            return _stripe(w, first, -1)
        if s.kind == "self":
            return _stripe(w, first, 0)
        if s.kind == "first-token":
            return w[:, :, 0].sum(dim=1, dtype=torch.float64)
        if s.kind == "window":
            # stripes past the block's first key are empty: a window wider than the text (window:10**9)
            # reads every key, not a billion empty stripes
            return sum(_stripe(w, first, -k) for k in range(min(s.width, first + rows)))
        if s.kind == "induction" and self.probe is not None:
            # the repeat's rows, each on the token just after its earlier copy (j = i − N + 1)
            p, size = self.probe.start, self.probe.repeat
            low, high = max(p + size - first, 0), min(p + 2 * size - first, rows)
            if low >= high:
                return torch.zeros(heads, dtype=torch.float64)
            return _stripe(w[:, low:high], first + low, 1 - size)
        # duplicate-token: (i, m) with m < i and token m = token i; induction on a text: (i, m + 1),
        # the key just after that earlier copy (token j − 1 = token i, 1 ≤ j ≤ i)
        queries, copies = self._copies()
        low, high = (int(x) for x in torch.searchsorted(queries, torch.tensor([first, first + rows])))
        r = queries[low:high] - first
        k = copies[low:high] + (0 if s.kind == "duplicate-token" else 1)
        inside = k < keys
        return w[:, r[inside], k[inside]].sum(dim=1, dtype=torch.float64)

    def _copies(self):
        """Every (query i, earlier copy m) pair of the text, m < i and token m = token i, sorted by
        i: the same for every layer and block, so found once (by the tokens' groups, not n × n)."""
        import torch

        if self._pairs is None:
            ids = self.ids.numpy()
            order = np.argsort(ids, kind="stable")   # each token's positions, ascending
            edges = np.flatnonzero(np.diff(ids[order])) + 1
            queries, copies = [], []
            for group in np.split(order, edges):
                if len(group) > 1:
                    later, earlier = np.tril_indices(len(group), k=-1)
                    queries.append(group[later])
                    copies.append(group[earlier])
            if queries:
                q, c = np.concatenate(queries), np.concatenate(copies)
                by_query = np.argsort(q, kind="stable")
                self._pairs = (torch.from_numpy(q[by_query]), torch.from_numpy(c[by_query]))
            else:
                self._pairs = (torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long))
        return self._pairs

    def result(self) -> dict[str, np.ndarray]:
        """Each score's (layers × heads) array."""
        out = {}
        for s in self.scores:
            total = self.sums[s.name]
            if s.kind == "pattern":
                out[s.name] = 1.0 - total / self.n
            elif s.kind == "induction" and self.probe is not None:
                out[s.name] = total / self.probe.repeat
            else:
                out[s.name] = np.divide(total, self.mass, out=np.zeros_like(total), where=self.mass > 0)
        return out


def _stripe(w, first: int, k: int):
    """Σ over a block's rows (query i = first + r) of the weight on key j = i + k, per head: the
    block's diagonal at offset first + k (keys past the block's last column are not in it)."""
    import torch

    if first + k >= w.shape[2] or first + k <= -w.shape[1]:
        return torch.zeros(w.shape[0], dtype=torch.float64)
    return torch.diagonal(w, offset=first + k, dim1=1, dim2=2).sum(dim=1, dtype=torch.float64)


def definition(name: str) -> str:
    """One score's definition in a sentence (the window shows it beside the ranked list)."""
    kind, _, arg = name.partition(":")
    body = {
        "previous-token": "the weight on the previous token (j = i − 1)",
        "first-token": "the weight on the first token (j = 0, an attention sink)",
        "self": "the weight on the query's own token (j = i)",
        "window": f"the weight on the last {arg} tokens up to the query (i − {arg} < j ≤ i)",
        "duplicate-token": "the weight on earlier copies of the query's token (j < i, token j = token i)",
        "induction": "the weight on the token just after an earlier copy of the query's token "
                     "(on a repeated:N probe, TransformerLens's induction score over the repeat)",
        "pattern": "1 − the mean total-variation distance of the rows to the target",
    }.get(kind, name)
    if kind in ("pattern", "induction"):
        return f"{name}: {body}."
    return f"{name}: {body}, Σ_ij A_ij·D_ij / Σ_ij A_ij (TransformerLens's head detector)."
