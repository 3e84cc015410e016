"""Numbers typed into a cell: plain numbers and simple arithmetic, parsed safely.

``parse_number(text) -> float`` accepts what a person types into a spreadsheet cell::

    0.5   -1/3   1e-3   2*pi   sqrt(2)   (1 + 2) * 3   2**-1   2^3   exp(-1)

Grammar: numbers (``1``, ``.5``, ``1e-3``), the constants ``pi``, ``e`` and ``tau``, the
operators ``+ - * / **`` (``^`` is read as power, as in a spreadsheet; ``×``, ``÷`` and the
Unicode minus ``−`` are accepted), parentheses, and the one-argument functions ``sqrt``,
``exp``, ``log`` (natural), ``log10``, ``sin``, ``cos``, ``tan``, ``tanh`` and ``abs``.

The text is parsed with :mod:`ast` and only the whitelisted node types are evaluated; nothing
is ever passed to ``eval``. Anything else — words, ``nan``, ``inf``, an empty cell, a result
that overflows or is not finite, division by zero — raises ``AttnExplorerError`` whose
message names the text and the reason, so a caller can refuse the edit and say why.
"""

from __future__ import annotations

import ast
import math
import operator

from ..errors import AttnExplorerError

# Long enough for any honest formula, short enough that parsing cannot be made expensive.
MAX_CHARS = 200
# ``2 ** 2000`` as floats overflows anyway; this keeps integer powers from being huge first.
_MAX_EXPONENT = 1024.0

CONSTANTS = {"pi": math.pi, "e": math.e, "tau": math.tau}
FUNCTIONS = {
    "sqrt": math.sqrt,
    "exp": math.exp,
    "log": math.log,
    "ln": math.log,
    "log10": math.log10,
    "sin": math.sin,
    "cos": math.cos,
    "tan": math.tan,
    "tanh": math.tanh,
    "abs": abs,
}
_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.Pow: operator.pow,
}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_NOT_NUMBERS = {"nan", "inf", "infinity"}


def _fail(text: str, why: str) -> AttnExplorerError:
    shown = text if len(text) <= 40 else text[:37] + "..."
    return AttnExplorerError(f"{shown!r} is not a number: {why}")


def _normalise(text: str) -> str:
    return (text.strip().replace("−", "-").replace("×", "*").replace("÷", "/")
            .replace("^", "**").replace("π", "pi"))


def parse_number(text: str) -> float:
    """The finite float that ``text`` denotes, or ``AttnExplorerError`` saying why not."""
    if not isinstance(text, str):
        if isinstance(text, (int, float)) and not isinstance(text, bool):
            text = repr(text)
        else:
            raise AttnExplorerError(f"expected text or a number, got {type(text).__name__}")
    source = _normalise(text)
    if not source:
        raise AttnExplorerError("an empty cell is not a number; type 0 for zero")
    if len(source) > MAX_CHARS:
        raise _fail(text, f"longer than {MAX_CHARS} characters")
    try:
        tree = ast.parse(source, mode="eval")
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        raise _fail(text, "use numbers, + - * / **, parentheses, pi, e, sqrt(), exp(), log()") from None
    try:
        value = _eval(tree.body, text)
    except (OverflowError, MemoryError, RecursionError):
        raise _fail(text, "the result is too large") from None
    except ZeroDivisionError:
        raise _fail(text, "division by zero") from None
    except ValueError as err:  # math domain errors: sqrt(-1), log(0)
        raise _fail(text, f"math error ({err})") from None
    if isinstance(value, complex):
        raise _fail(text, "the result is not a real number")
    value = float(value)
    if not math.isfinite(value):
        raise _fail(text, "the result is not a finite number")
    return value


def _eval(node: ast.AST, text: str):
    if isinstance(node, ast.Constant):
        value = node.value
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _fail(text, f"{value!r} is not a number")
        value = float(value)  # an int literal too large for a float raises OverflowError here
        if not math.isfinite(value):
            raise _fail(text, "it is not a finite number")
        return value
    if isinstance(node, ast.Name):
        if node.id in CONSTANTS:
            return CONSTANTS[node.id]
        if node.id.lower() in _NOT_NUMBERS:
            raise _fail(text, f"{node.id} is not a finite number")
        raise _fail(text, f"unknown name {node.id!r} (known: {', '.join(CONSTANTS)})")
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_eval(node.operand, text))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left = _eval(node.left, text)
        right = _eval(node.right, text)
        if isinstance(node.op, ast.Pow) and abs(right) > _MAX_EXPONENT and abs(left) > 1:
            raise OverflowError
        result = _BINARY[type(node.op)](left, right)
        if isinstance(result, float) and not math.isfinite(result):
            raise OverflowError
        return result
    if isinstance(node, ast.Call):
        name = node.func.id if isinstance(node.func, ast.Name) else None
        if name not in FUNCTIONS:
            raise _fail(text, f"unknown function {name or '?'}() (known: {', '.join(FUNCTIONS)})")
        if len(node.args) != 1 or node.keywords:
            raise _fail(text, f"{name}() takes exactly one argument")
        return FUNCTIONS[name](_eval(node.args[0], text))
    raise _fail(text, "use numbers, + - * / **, parentheses, pi, e, sqrt(), exp(), log()")


def format_full(value: float) -> str:
    """The shortest text that reads back as exactly ``value`` (for editors and tooltips)."""
    value = float(value)
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return repr(value)


def format_compact(value: float, digits: int = 4) -> str:
    """``value`` in ``digits`` significant digits, for cells (``-0`` shows as ``0``)."""
    text = f"{float(value):.{digits}g}"
    return "0" if text == "-0" else text
