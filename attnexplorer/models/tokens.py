"""Tokenizer pieces shown readably: byte-level BPE (GPT-2, Llama 3, SmolLM2) and SentencePiece
pieces are turned back into their text, with the leading space shown as a visible ``␣``.

``Ġdog`` is how GPT-2's tokenizer spells " dog": it maps every byte to a printable character
(``bytes_to_unicode``) so that a piece is a plain string. A reader wants the text back, but a
bare leading space would be invisible in a table header, so spaces become ``␣``, newlines ``↵``
and tabs ``⇥``; other control characters (ESC, DEL, NUL) as their control pictures (``␛``, ``␡``,
``␀``); other invisible characters (a no-break space, a zero-width joiner, a line separator)
as their code point, ``<U+00A0>``: SmolLM2's logit lens at layer 0 tops with a lone no-break
space, which drew as a blank. A piece that is only part of a multi-byte character (an emoji split in two)
shows its bytes as ``<0xF0><0x9F>``. WordPiece (BERT) pieces are already readable and stay as
they are, ``##ing`` and ``[CLS]`` included. Pure functions, no torch, no transformers.
"""

from __future__ import annotations

import unicodedata
from functools import lru_cache

_VISIBLE = {" ": "␣", "\n": "↵", "\t": "⇥", "\r": "⏎"}
# Unicode's spaces, line and paragraph separators and format characters draw as nothing or as a
# plain space: shown by their code point instead.
_INVISIBLE = frozenset({"Zs", "Zl", "Zp", "Cf"})


@lru_cache(maxsize=1)
def _byte_decoder() -> dict[str, int]:
    """GPT-2's printable stand-in for each byte, inverted (the published ``bytes_to_unicode``)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    codes = printable[:]
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            codes.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, codes)}


def _visible_char(ch: str) -> str:
    """A control character as a visible symbol: a session refuses control characters in tokens
    (they are lost in .npz files and make invalid SVG and LaTeX), and a byte-level tokenizer
    makes a piece of any byte of the text (ESC, DEL, NUL...)."""
    if ch in _VISIBLE:
        return _VISIBLE[ch]
    code = ord(ch)
    if code < 0x20:
        return chr(0x2400 + code)   # ␀ … ␟, Unicode's control pictures
    if code == 0x7F:
        return "␡"
    if 0x80 <= code <= 0x9F or unicodedata.category(ch) in _INVISIBLE:
        return f"<U+{code:04X}>"
    return ch


def _visible(text: str) -> str:
    return "".join(_visible_char(ch) for ch in text)


def _decode_bytes(data: bytes) -> str:
    """UTF-8 text, with any bytes that do not form a whole character written as <0xNN>."""
    out: list[str] = []
    i = 0
    while i < len(data):
        for width in (1, 2, 3, 4):
            try:
                out.append(data[i:i + width].decode("utf-8"))
            except UnicodeDecodeError:
                continue
            i += width
            break
        else:
            out.append(f"<0x{data[i]:02X}>")
            i += 1
    return "".join(out)


def readable_piece(piece: str, style: str) -> str:
    """One tokenizer piece as a person reads it; ``style`` is ``bytelevel``, ``sentencepiece`` or ``wordpiece``."""
    if style == "bytelevel":
        decoder = _byte_decoder()
        if piece and all(ch in decoder for ch in piece):
            return _visible(_decode_bytes(bytes(decoder[ch] for ch in piece)))
        return _visible(piece)  # a special token such as <|endoftext|> is not byte-mapped
    if style == "sentencepiece":
        return _visible(piece.replace("▁", " "))
    return _visible(piece)


def piece_style(pieces: list[str], wordpiece: bool) -> str:
    """Which spelling a tokenizer's pieces use, judged from the pieces of this text."""
    if wordpiece:
        return "wordpiece"
    if any("▁" in p for p in pieces):
        return "sentencepiece"
    return "bytelevel"


def readable_pieces(pieces: list[str], wordpiece: bool) -> list[str]:
    style = piece_style(pieces, wordpiece)
    return [readable_piece(p, style) or "∅" for p in pieces]
