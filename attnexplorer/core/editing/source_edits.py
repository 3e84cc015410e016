"""Edits of cross-attention's source sequence, Qt-free: each returns a new, validated session.

Turning a source on and off (W_k and W_v follow its width; masks and positions that need one
sequence are refused), its width d_s, and its tokens (rename, insert, delete, move,
re-tokenize: ``core/editing/token_sequence.py``, with the padding and custom-mask columns following).
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from . import edits, token_sequence
from ..errors import SessionError
from ..inputs.session import MAX_DIM, MAX_TOKENS, Mask, Session
from ..inputs.stages import Source


def set_source(session: Session, source: Source | None = None) -> Session:
    """The session with a source sequence (cross-attention). None starts from a copy of the
    session's own tokens and embeddings: W_k and W_v keep fitting, and the keys are what they
    were, now read from the source. A causal or window mask, RoPE and ALiBi are refused
    (they need one sequence), with the reason."""
    if source is None:
        source = Source(session.tokens, session.embeddings)
    if not isinstance(source, Source):
        raise SessionError("must be a Source or None", "source")
    changes = {}
    width = np.shape(source.embeddings)[1] if np.ndim(source.embeddings) == 2 else None  # else the session says why
    if width is not None and width != _d_in(session):
        # W_k and W_v read the source's rows: their rows follow its width (kept where they fit).
        changes = _kv_rows(session, width)
    return session.replace(source=source, **changes)


def clear_source(session: Session) -> Session:
    """Back to self-attention: the keys come from the tokens again. W_k and W_v get the
    tokens' width; a padding mask keeps the positions that are tokens, a custom mask its
    first n columns (new ones open)."""
    if session.source is None:
        raise SessionError("there is no source sequence", "source")
    mask = session.mask
    if mask.kind == "padding":
        mask = Mask("padding", padding=tuple(j for j in mask.padding if j < session.n))
    elif mask.kind == "custom":
        mask = Mask("custom", blocked=edits._fit(mask.blocked, (session.n, session.n)).astype(bool))
    changes = _kv_rows(session, session.d) if session.source.d != session.d else {}
    return session.replace(source=None, mask=mask, **changes)


def _d_in(session: Session) -> int:
    return session.d if session.source is None else session.source.d


def _kv_rows(session: Session, rows: int) -> dict:
    g = session.kv_heads
    return {"w_key": edits._fit(session.w_key, (g, rows, session.d_k)),
            "w_value": edits._fit(session.w_value, (g, rows, session.d_v))}


def need_source(session: Session) -> Source:
    """The source sequence, or SessionError saying there is none."""
    if session.source is None:
        raise SessionError("there is no source sequence; turn cross-attention on first", "source")
    return session.source


def resize_source_d(session: Session, d: int) -> Session:
    """The source's width d_s: its embeddings and the rows of W_k and W_v follow."""
    src = need_source(session)
    d = edits._check_size(d, "d_s", MAX_DIM)
    return session.replace(source=Source(src.tokens, edits._fit(src.embeddings, (src.n, d))), **_kv_rows(session, d))


def _remap_key_mask(mask: Mask, mapping: Sequence[int | None]) -> Mask:
    """The mask after the source's tokens moved: ``mapping[new] = old position`` or None for
    a new token. The keys are the source's tokens, so padding positions and a custom mask's
    columns follow them; a new source token is not blocked."""
    if mask.kind == "padding":
        pad = set(mask.padding)
        return Mask("padding", padding=tuple(k for k, old in enumerate(mapping) if old is not None and old in pad))
    if mask.kind == "custom":
        blocked = np.zeros((mask.blocked.shape[0], len(mapping)), dtype=bool)
        for k, old in enumerate(mapping):
            if old is not None:
                blocked[:, k] = mask.blocked[:, old]
        return Mask("custom", blocked=blocked)
    return mask


def _source_sequence(session: Session) -> token_sequence.TokenSequence:
    """The source's tokens as a ``TokenSequence``: padding positions and a custom mask's
    columns follow them (the keys are the source's tokens)."""
    src = need_source(session)

    def rebuild(tokens, mapping, x) -> Session:
        if len(tokens) > MAX_TOKENS:
            raise SessionError(f"{len(tokens)} tokens is more than the limit of {MAX_TOKENS}", "source.tokens")
        return session.replace(source=Source(tokens, x), mask=_remap_key_mask(session.mask, mapping))

    return token_sequence.TokenSequence(
        src.tokens, src.embeddings, "source.tokens", "source.embeddings", "d_s",
        "cannot delete the only source token; turn cross-attention off instead",
        "a source needs at least one token", rebuild)


def set_source_token(session: Session, i: int, text: str) -> Session:
    """The session with source token ``i`` renamed (its embedding stays)."""
    return token_sequence.rename(_source_sequence(session), i, text)


def insert_source_token(session: Session, i: int, text: str, embedding=None) -> Session:
    """The session with ``text`` inserted into the source before position ``i`` (``i == n_s``
    appends), with ``embedding`` as its row (zeros when omitted)."""
    return token_sequence.insert(_source_sequence(session), i, text, embedding)


def delete_source_token(session: Session, i: int) -> Session:
    """The session without source token ``i`` and its row (the last one cannot go: turn
    cross-attention off instead)."""
    return token_sequence.delete(_source_sequence(session), i)


def move_source_token(session: Session, i: int, j: int) -> Session:
    """The session with source token ``i`` (and its row) moved to position ``j``."""
    return token_sequence.move(_source_sequence(session), i, j)


def retokenize_source(session: Session, tokens: Sequence[str],
                      embed: Callable[[tuple[str, ...]], np.ndarray] | None = None) -> Session:
    """The source for a new token list (its sentence box): tokens that stay keep their rows
    (aligned as ``edits.retokenize`` aligns), new ones get rows from ``embed`` or zeros."""
    return token_sequence.retokenize(_source_sequence(session), tokens, embed)
