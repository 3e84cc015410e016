"""Readable token pieces, and a light import of the models package."""

import subprocess
import sys

from attnexplorer.models.tokens import readable_pieces


def test_bytelevel_pieces_show_their_text_with_a_visible_space():
    pieces = ["The", "Ġdog", "Ġfet", "ched", "Ċ", "ĉx", "<|endoftext|>"]
    assert readable_pieces(pieces, wordpiece=False) == ["The", "␣dog", "␣fet", "ched", "↵", "⇥x", "<|endoftext|>"]


def test_a_split_multibyte_character_shows_its_bytes():
    # "é" is C3 A9; GPT-2's byte alphabet writes C3 as "Ã" and A9 as "©"
    assert readable_pieces(["Ã©", "Ã"], wordpiece=False) == ["é", "<0xC3>"]


def test_invisible_characters_show_their_code_point():
    # SmolLM2's logit lens tops at layer 0 with "Âł": a lone no-break space, drawn as a blank
    # " a" + zero-width joiner + "b", byte by byte
    assert readable_pieces(["Âł", "ĠaâĢįb"], wordpiece=False) == ["<U+00A0>", "␣a<U+200D>b"]
    assert readable_pieces(["▁x　y", " "], wordpiece=False) == ["␣x<U+3000>y", "<U+2028>"]


def test_sentencepiece_and_wordpiece():
    assert readable_pieces(["▁dog", "s"], wordpiece=False) == ["␣dog", "s"]
    assert readable_pieces(["[CLS]", "fetch", "##ed", "[SEP]"], wordpiece=True) == ["[CLS]", "fetch", "##ed", "[SEP]"]


def test_importing_the_package_loads_neither_qt_nor_torch_nor_transformers():
    code = ("import sys, attnexplorer.models as m; m.packaged_models(); "
            "print(sorted(k for k in ('torch', 'transformers', 'PySide6', 'numpy') if k in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
