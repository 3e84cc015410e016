"""Plain text as LaTeX that plain pdflatex typesets: the ten special characters escaped, and
the Unicode a lesson writes (×, ·, √, ᵀ, subscripts, Greek letters, arrows, ▢ …) as LaTeX.

Qt-free (it lives beside the handout that uses it). Anything else outside ASCII becomes "?",
so a token in another script cannot stop the deck from compiling.
"""

from __future__ import annotations

_SPECIAL = {"\\": r"\textbackslash{}", "{": r"\{", "}": r"\}", "$": r"\$", "&": r"\&", "#": r"\#",
            "%": r"\%", "_": r"\_", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}
_UNICODE = {
    "×": r"\ensuremath{\times}", "·": r"\ensuremath{\cdot}", "÷": r"\ensuremath{\div}",
    "√": r"\ensuremath{\surd}", "−": "-", "–": "--", "—": "---", "ᵀ": r"\ensuremath{^{\top}}",
    "²": r"\ensuremath{^{2}}", "³": r"\ensuremath{^{3}}", "⁽": r"\ensuremath{^{(}}", "⁾": r"\ensuremath{^{)}}",
    "ⁱ": r"\ensuremath{^{i}}", "ʲ": r"\ensuremath{^{j}}", "ᵢ": r"\ensuremath{_{i}}", "ⱼ": r"\ensuremath{_{j}}",
    "₀": r"\ensuremath{_{0}}", "₁": r"\ensuremath{_{1}}", "₂": r"\ensuremath{_{2}}", "₃": r"\ensuremath{_{3}}",
    "₄": r"\ensuremath{_{4}}", "₅": r"\ensuremath{_{5}}", "₆": r"\ensuremath{_{6}}", "₇": r"\ensuremath{_{7}}",
    "₈": r"\ensuremath{_{8}}", "₉": r"\ensuremath{_{9}}", "τ": r"\ensuremath{\tau}",
    "ω": r"\ensuremath{\omega}", "α": r"\ensuremath{\alpha}", "θ": r"\ensuremath{\theta}",
    "σ": r"\ensuremath{\sigma}", "Σ": r"\ensuremath{\Sigma}", "∞": r"\ensuremath{\infty}",
    "→": r"\ensuremath{\rightarrow}", "≥": r"\ensuremath{\geq}", "≤": r"\ensuremath{\leq}",
    "≈": r"\ensuremath{\approx}", "½": r"\ensuremath{\frac{1}{2}}", "…": r"\ldots{}", "“": "``", "”": "''",
    "‘": "`", "’": "'", "▢": r"\fbox{?}", "✓": r"\ensuremath{\checkmark}", "✗": r"\ensuremath{\times}",
    "▶": r"\ensuremath{\triangleright}", "◀": r"\ensuremath{\triangleleft}", "é": r"\'e", "è": r"\`e",
    "ê": r"\^e", "à": r"\`a", "ç": r"\c{c}", "ô": r"\^o", "ü": r'\"u', "ö": r'\"o', "ä": r'\"a', "ñ": r"\~n",
}


def tex_text(text: str) -> str:
    """``text`` as LaTeX (pdflatex, no inputenc needed); line breaks become ``\\\\``."""
    out = []
    for line in str(text).split("\n"):
        parts = []
        for ch in line:
            if ch in _SPECIAL:
                parts.append(_SPECIAL[ch])
            elif ch in _UNICODE:
                parts.append(_UNICODE[ch])
            elif ord(ch) < 128:
                parts.append(ch)
            else:
                parts.append("?")
        out.append("".join(parts))
    return r"\\ ".join(out)
