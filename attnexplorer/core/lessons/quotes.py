"""Numbers a lesson's text quotes, bound to the session: ``{weights[she, dog]:.3f}``.

A step's text is plain text with quotes in braces; each quote names a value of the result and
is written with the number the engine computed for the session as it is *now*, so a number
in the text follows every edit the class makes (``{{`` and ``}}`` are literal braces)::

    {scores[she, dog]:.2f}      one cell of a token × key matrix (head 0)  → 13.83
    {Q[she]:.2f}                a token's row: query, key, value, E, X, output → [2.64, 1.46, 0.94]
    {Q[she, 0]}                 one feature of that row
    {weights@1[she]}            head 1's row (K and V follow the head's K/V head)
    {output:.4f}                a whole matrix, one row per line
    {top weights[she]}          the key with the largest value of that row → dog
    {d_k}  {sqrt_dk:.3g}  {scale}  {n}  {d}  {d_v}  {heads}  {param.tau}

Rows and key columns are tokens, named as written (the first one of that name) or by
position from 0 (``#4``); the second index of Q, K, V, E, X, head_outputs and output is a
feature number. The format after ``:`` is ``.Nf``, ``.Ng`` or ``.Ne`` (default: three or four
significant digits, as Explain writes them).

Everything here is Qt-free and reads an ``AttentionResult``; nothing is computed again.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from ..errors import AttnExplorerError

# name → (rows are "query" or "key" tokens, columns are "key" tokens or "feature"s, has heads)
MATRICES = {
    "E": ("query", "feature", False),
    "X": ("query", "feature", False),
    "Q": ("query", "feature", True),
    "K": ("key", "feature", True),
    "V": ("key", "feature", True),
    "scores": ("query", "key", True),
    "scaled_scores": ("query", "key", True),
    "weights": ("query", "key", True),
    "head_outputs": ("query", "feature", True),
    "output": ("query", "feature", False),
}
SCALARS = ("n", "d", "d_k", "d_v", "heads", "scale", "sqrt_dk")
# The matrices a step may hide (a row or a cell of a heatmap panel) and ask about.
HIDEABLE = ("scores", "scaled_scores", "weights")

_REF = re.compile(r"^\s*(?P<top>top\s+)?(?P<name>[A-Za-z_][\w.]*)(?:@(?P<head>\d+))?"
                  r"(?:\[(?P<index>[^\[\]]*)\])?\s*(?::(?P<fmt>[^{}]*))?\s*$")
_FORMAT = re.compile(r"^\.(\d{1,2})([fge])$")


class QuoteError(AttnExplorerError):
    """A quote that names nothing in this session (an unknown matrix, token or feature)."""


@dataclass(frozen=True)
class Ref:
    """A parsed quote: ``name``, ``head``, ``row``/``col`` as written (None: all), ``fmt``,
    ``top`` (the key of the row's largest value instead of the values)."""

    text: str
    name: str
    head: int = 0
    row: str | None = None
    col: str | None = None
    fmt: str | None = None
    top: bool = False

    @property
    def is_matrix(self) -> bool:
        return self.name in MATRICES


@dataclass(frozen=True)
class Cells:
    """Where a ref points in a matrix: head, row (None: all rows), column (None: whole row)."""

    name: str
    head: int
    row: int | None
    col: int | None


def parse_ref(text: str) -> Ref:
    """``"weights@1[she, dog]:.3f"`` → a Ref; QuoteError when it is not one."""
    m = _REF.match(text)
    if m is None:
        raise QuoteError(f"{{{text}}} is not a quote: write {{name[row, column]:format}}, e.g. {{weights[she, dog]:.3f}}")
    name, fmt = m["name"], m["fmt"]
    if name not in MATRICES and name not in SCALARS and not name.startswith("param."):
        known = ", ".join(list(MATRICES) + list(SCALARS) + ["param.NAME"])
        raise QuoteError(f"{{{text}}}: {name!r} is not a value a lesson can quote ({known})")
    if fmt is not None:
        fmt = fmt.strip()
        if not _FORMAT.match(fmt):
            raise QuoteError(f"{{{text}}}: format {fmt!r} is not .Nf, .Ng or .Ne (e.g. .3f)")
    row = col = None
    if m["index"] is not None:
        if name not in MATRICES:
            raise QuoteError(f"{{{text}}}: {name} is one number; it takes no [index]")
        parts = [p.strip() for p in m["index"].split(",")]
        if len(parts) > 2 or not all(parts):
            raise QuoteError(f"{{{text}}}: expected [row] or [row, column]")
        row = parts[0]
        col = parts[1] if len(parts) == 2 else None
    if m["head"] is not None and not (name in MATRICES and MATRICES[name][2]):
        raise QuoteError(f"{{{text}}}: {name} has no heads")
    top = bool(m["top"])
    if top and (name not in MATRICES or MATRICES[name][1] != "key" or row is None or col is not None):
        raise QuoteError(f"{{{text}}}: top needs one row of scores, scaled_scores or weights, e.g. {{top weights[she]}}")
    return Ref(text.strip(), name, int(m["head"] or 0), row, col, fmt, top)


def token_index(name: str, tokens, what: str, text: str) -> int:
    """The position of token ``name`` (the first of that name, or ``#i``) in ``tokens``."""
    if name.startswith("#"):
        try:
            i = int(name[1:])
        except ValueError:
            raise QuoteError(f"{{{text}}}: {name!r} is not a position (#0, #1, …)") from None
        if not 0 <= i < len(tokens):
            raise QuoteError(f"{{{text}}}: there is no {what} at position {i} (positions 0..{len(tokens) - 1})")
        return i
    if name in tokens:
        return list(tokens).index(name)
    shown = ", ".join(tokens[:12]) + (", …" if len(tokens) > 12 else "")
    raise QuoteError(f"{{{text}}}: there is no {what} {name!r} ({what}s: {shown})")


def locate(ref: Ref, session) -> Cells:
    """Where ``ref`` points in ``session``'s result; QuoteError when the session has no such
    token, feature or head (checked from the session alone, nothing computed)."""
    rows_are, cols_are, headed = MATRICES[ref.name]
    if headed and ref.head >= session.heads:
        raise QuoteError(f"{{{ref.text}}}: there is no head {ref.head} (heads 0..{session.heads - 1})")
    keys = session.tokens if session.source is None else session.source.tokens
    row = col = None
    if ref.row is not None:
        row = token_index(ref.row, session.tokens if rows_are == "query" else keys,
                     "token" if rows_are == "query" or session.source is None else "source token", ref.text)
    if ref.col is not None:
        if cols_are == "key":
            col = token_index(ref.col, keys, "key" if session.source is None else "source token", ref.text)
        else:
            width = _width(ref.name, session)
            try:
                col = int(ref.col)
            except ValueError:
                raise QuoteError(f"{{{ref.text}}}: the column of {ref.name} is a feature number (0..{width - 1})") from None
            if not 0 <= col < width:
                raise QuoteError(f"{{{ref.text}}}: {ref.name} has features 0..{width - 1}, not {col}")
    return Cells(ref.name, ref.head, row, col)


def _width(name: str, session) -> int:
    if name in ("E", "X"):
        return session.d
    if name in ("Q", "K"):
        return session.d_k
    if name in ("V", "head_outputs"):
        return session.d_v
    return session.d_out


def check(ref: Ref, session) -> None:
    """QuoteError when ``ref`` names nothing in ``session``."""
    if ref.is_matrix:
        locate(ref, session)
    elif ref.name.startswith("param."):
        key = ref.name[len("param."):]
        preset = session.preset
        if preset is None or key not in preset.params:
            have = ", ".join(preset.params) if preset is not None and preset.params else "none"
            raise QuoteError(f"{{{ref.text}}}: the session's preset has no parameter {key!r} (parameters: {have})")


def matrix_of(result, name: str, head: int) -> np.ndarray:
    """The 2-D array ``name`` of ``result`` for query head ``head``."""
    array = getattr(result, name)
    if array is None:
        raise QuoteError(f"this result was computed without {name}")
    if not MATRICES[name][2]:
        return array
    if name in ("K", "V"):
        kv = result.kv_head_of
        return array[int(kv[head]) if kv is not None else head]
    return array[head]


def value(ref: Ref, result):
    """The quoted value: a float, a 1-D or 2-D float64 array, or (``top``) a key token."""
    session = result.session
    if not ref.is_matrix:
        if ref.name.startswith("param."):
            check(ref, session)
            return float(session.preset.params[ref.name[len("param."):]])
        return {"n": session.n, "d": session.d, "d_k": session.d_k, "d_v": session.d_v, "heads": session.heads,
                "scale": result.scale_factor, "sqrt_dk": math.sqrt(session.d_k)}[ref.name]
    cells = locate(ref, session)
    matrix = np.asarray(matrix_of(result, ref.name, cells.head), dtype=np.float64)
    if cells.row is None:
        return matrix
    row = matrix[cells.row]
    if ref.top:
        keys = result.key_tokens
        return keys[int(np.argmax(row))]
    return row if cells.col is None else float(row[cells.col])


def format_value(v, fmt: str | None) -> str:
    """``v`` as the text shows it: one number, ``[a, b, c]``, or one such row per line."""
    from ..numbers.number_text import fmt as short

    if isinstance(v, str):
        return v
    if isinstance(v, (int, np.integer)) and fmt is None:
        return str(int(v))

    def one(x: float) -> str:
        text = format(float(x), fmt) if fmt else short(float(x))
        # A tiny negative written as "-0.000" reads as a sign error: drop the sign.
        return text[1:] if text.startswith("-") and set(text[1:]) <= set("0.") else text

    array = np.asarray(v)
    if array.ndim == 0:
        return one(array)
    if array.ndim == 1:
        return "[" + ", ".join(one(x) for x in array) + "]"
    return "\n".join("[" + ", ".join(one(x) for x in r) + "]" for r in array)


def render(ref: Ref, result) -> str:
    """``ref``'s value in ``result`` as text; QuoteError when the session lost what it names."""
    return format_value(value(ref, result), ref.fmt)


_BRACES = re.compile(r"\{\{|\}\}|\{([^{}]*)\}")


def refs_in(text: str) -> list[Ref]:
    """Every quote in ``text``, parsed (QuoteError on the first bad one; a lone brace too)."""
    out = []
    for m in _BRACES.finditer(text):
        if m.group(1) is not None:
            out.append(parse_ref(m.group(1)))
    rest = _BRACES.sub("", text)
    if "{" in rest or "}" in rest:
        raise QuoteError("has an unmatched brace; write {{ or }} for a literal one")
    return out


@dataclass(frozen=True)
class Filled:
    """A text with its quotes filled in: ``text``, and per quote its ref, its text (``?``
    where it names what the session no longer has) and the reason it could not be filled."""

    text: str
    quotes: tuple[tuple[Ref, str, str | None], ...]


HIDDEN_MARK = "▢"


def covers(hidden: Ref, ref: Ref, session) -> bool:
    """Whether showing ``ref`` would give away the hidden row or cell ``hidden``."""
    if ref.name != hidden.name or ref.head != hidden.head:
        return False
    try:
        a, b = locate(hidden, session), locate(ref, session)
    except QuoteError:
        return False
    if b.row is None:
        return True   # the whole matrix holds the hidden row
    return a.row == b.row and (a.col is None or b.col is None or a.col == b.col)


def fill(text: str, result, hidden: tuple[Ref, ...] = ()) -> Filled:
    """``text`` with every quote written from ``result`` (bad quotes as ``?``); a quote of
    something in ``hidden`` is written as ``HIDDEN_MARK`` until it is revealed."""
    quotes = []

    def sub(m):
        if m.group(0) == "{{":
            return "{"
        if m.group(0) == "}}":
            return "}"
        try:
            ref = parse_ref(m.group(1))
        except QuoteError as err:
            quotes.append((None, "?", str(err)))
            return "?"
        if any(covers(h, ref, result.session) for h in hidden):
            quotes.append((ref, HIDDEN_MARK, None))
            return HIDDEN_MARK
        try:
            shown = render(ref, result)
        except QuoteError as err:
            quotes.append((ref, "?", str(err)))
            return "?"
        quotes.append((ref, shown, None))
        return shown

    filled = _BRACES.sub(sub, text)
    return Filled(filled, tuple(quotes))
