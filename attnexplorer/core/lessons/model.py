"""A lesson: a session and the steps a teacher walks a class through, Qt-free.

Each ``Step`` shows the panels of one stage of the computation (``STAGES`` gives its
formula), a short text whose numbers are quotes bound to the session (``quotes``), optional
teacher's notes, the query and key to select, values to hide, and a question (``Ask``):
click the key you expect to get the most weight, or type a number. ``lesson_from_dict``
checks a lesson file's steps against its session and names the exact place of any fault,
as session files do (``steps[3].ask.of: {weights[shee]}: there is no token 'shee' …``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..errors import AttnExplorerError
from . import quotes
from .quotes import HIDEABLE, QuoteError, Ref, parse_ref


class LessonError(AttnExplorerError):
    """A lesson (a file, a built-in name, a step) is malformed; ``where`` is the place."""

    def __init__(self, message: str, where: str | None = None):
        self.where = where
        super().__init__(f"{where} {message}" if where else message)


@dataclass(frozen=True)
class Stage:
    """One stage of the computation: its formula (as text and as LaTeX) and the panels that
    show it by default."""

    name: str
    formula: str
    latex: str
    panels: tuple[str, ...]


STAGES = {s.name: s for s in (
    Stage("tokens", "x = embedding(token)", r"x_i = \mathrm{embedding}(t_i)", ("embedding_scatter", "qkv")),
    Stage("positions", "X = norm(E + P)", r"X = \mathrm{norm}(E + P)", ("attention_input", "rope", "alibi")),
    Stage("projections", "Q = X·W_q,  K = X·W_k,  V = X·W_v",
          r"Q = X W_q,\quad K = X W_k,\quad V = X W_v", ("qkv", "embedding_scatter")),
    Stage("scores", "scores = Q·Kᵀ", r"\mathrm{scores} = Q K^\top", ("scores", "explain")),
    Stage("scale", "scaled = scores / √d_k", r"\mathrm{scaled} = \mathrm{scores} / \sqrt{d_k}",
          ("scaled_scores", "explain")),
    Stage("mask", "masked = scaled, −∞ where blocked", r"\mathrm{masked}_{ij} = -\infty \text{ where blocked}",
          ("scaled_scores", "weights")),
    Stage("softmax", "weights = softmax(scaled)", r"\mathrm{weights} = \mathrm{softmax}(\mathrm{scaled})",
          ("weights", "query")),
    Stage("output", "output = weights·V", r"\mathrm{output} = \mathrm{weights}\, V", ("output", "query", "explain")),
    Stage("summary", "Attention(Q, K, V) = softmax(Q·Kᵀ / √d_k)·V",
          r"\mathrm{Attention}(Q, K, V) = \mathrm{softmax}\!\left(\frac{Q K^\top}{\sqrt{d_k}}\right) V",
          ("weights", "output")),
)}

# The panel kinds a step may show (ui/panels' kinds), and the window's input docks.
PANEL_KINDS = ("qkv", "attention_input", "rope", "scores", "alibi", "scaled_scores", "weights", "output",
               "query", "explain", "signal", "embedding_scatter")
INPUT_KINDS = ("inputs", "controls")
ASK_KINDS = ("key", "number")


@dataclass(frozen=True)
class Ask:
    """A question on a step: ``kind`` "key" (which key gets the most of row ``of``) or
    "number" (the value of cell ``of``, right within ``tolerance``). ``of`` is hidden on
    the step until revealed, and shown as the answer on the next handout page."""

    kind: str
    of: Ref
    prompt: str
    tolerance: float = 0.0


@dataclass(frozen=True)
class Step:
    stage: str
    title: str
    formula: str
    text: str = ""
    notes: str = ""
    panels: tuple[str, ...] = ()
    select: tuple[str | None, str | None] = (None, None)   # query and key, as tokens or #positions
    hide: tuple[Ref, ...] = ()
    ask: Ask | None = None
    slider: str | None = None   # a preset parameter shown as a slider on this step
    latex: str = ""

    @property
    def hidden(self) -> tuple[Ref, ...]:
        """Everything hidden on this step until revealed: ``hide`` and the question's value."""
        return self.hide + ((self.ask.of,) if self.ask is not None else ())


@dataclass(frozen=True)
class Lesson:
    """``session`` is the starting session (a preset's or a file's); ``name`` a built-in's
    name or the file's stem."""

    title: str
    session: Any
    steps: tuple[Step, ...]
    name: str = ""
    extra: dict = field(default_factory=dict)


_STEP_KEYS = ("stage", "title", "formula", "latex", "text", "notes", "panels", "select", "hide", "ask", "slider")


def _text(value: Any, where: str, what: str, *, empty: bool = True, limit: int = 4000) -> str:
    if not isinstance(value, str):
        raise LessonError(f"is {_describe(value)}, expected {what}", where)
    if not empty and not value.strip():
        raise LessonError(f"is empty, expected {what}", where)
    if len(value) > limit:
        raise LessonError(f"has {len(value):,} characters, more than the limit of {limit:,}", where)
    return value


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return repr(value[:40])
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return repr(value)


def _ref(text: Any, where: str, session) -> Ref:
    text = _text(text, where, "a quote such as \"weights[she]\"", empty=False, limit=200)
    try:
        ref = parse_ref(text.strip().removeprefix("{").removesuffix("}"))
        quotes.check(ref, session)
    except QuoteError as err:
        raise LessonError(str(err), where) from None
    return ref


def _checked_text(value: Any, where: str, session, what: str, limit: int = 4000) -> str:
    text = _text(value, where, what, limit=limit)
    try:
        for ref in quotes.refs_in(text):
            quotes.check(ref, session)
    except QuoteError as err:
        raise LessonError(str(err), where) from None
    return text


def _hidden_ref(text: Any, where: str, session, *, cell: bool | None) -> Ref:
    ref = _ref(text, where, session)
    if ref.name not in HIDEABLE or ref.row is None or ref.top:
        raise LessonError(f"{{{ref.text}}}: only a row or a cell of {', '.join(HIDEABLE)} can be hidden", where)
    if cell is True and ref.col is None:
        raise LessonError(f"{{{ref.text}}}: a number question needs one cell, e.g. weights[she, dog]", where)
    if cell is False and ref.col is not None:
        raise LessonError(f"{{{ref.text}}}: a key question needs a whole row, e.g. weights[she]", where)
    return ref


def _ask(value: Any, where: str, session) -> Ask | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise LessonError(f"is {_describe(value)}, expected {{\"kind\": \"key\" or \"number\", \"of\": ...}}", where)
    unknown = sorted(set(value) - {"kind", "of", "prompt", "tolerance"})
    if unknown:
        raise LessonError(f"has an unknown key {unknown[0]!r} (expected kind, of, prompt, tolerance)", where)
    kind = value.get("kind")
    if kind not in ASK_KINDS:
        raise LessonError(f"is {_describe(kind)}, expected \"key\" or \"number\"", f"{where}.kind")
    if "of" not in value:
        raise LessonError("has no \"of\" (the row or cell the class guesses)", where)
    of = _hidden_ref(value["of"], f"{where}.of", session, cell=kind == "number")
    prompt = _checked_text(value.get("prompt", ""), f"{where}.prompt", session, "text", limit=400)
    tolerance = value.get("tolerance", 0.0)
    if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or not 0 <= tolerance < 1e9:
        raise LessonError(f"is {_describe(tolerance)}, expected a number ≥ 0", f"{where}.tolerance")
    if kind == "key" and "tolerance" in value:
        raise LessonError("is for number questions; a key question is right or wrong", f"{where}.tolerance")
    if not prompt:
        prompt = (f"Which key gets the most of {ref_label(of)}?" if kind == "key"
                  else f"What is {ref_label(of)}?")
    return Ask(kind, of, prompt, float(tolerance))


def ref_label(ref: Ref) -> str:
    """A quote in the words of the class: ``weights[she]`` → "she's weights"."""
    if ref.row is None:
        return ref.name
    if ref.col is None:
        return f"{ref.row}'s {ref.name.replace('_', ' ')}"
    return f"{ref.name.replace('_', ' ')}({ref.row}, {ref.col})"


def _select(value: Any, where: str, session) -> tuple[str | None, str | None]:
    if value is None:
        return (None, None)
    if not isinstance(value, dict) or set(value) - {"query", "key"}:
        raise LessonError(f"is {_describe(value)}, expected {{\"query\": token, \"key\": token}}", where)
    keys = session.tokens if session.source is None else session.source.tokens
    out = []
    for part, tokens in (("query", session.tokens), ("key", keys)):
        token = value.get(part)
        if token is not None:
            token = _text(token, f"{where}.{part}", "a token", empty=False, limit=200)
            try:
                quotes.token_index(token, tokens, "token" if part == "query" else "key", f"select.{part}")
            except QuoteError as err:
                raise LessonError(str(err).split(": ", 1)[-1], f"{where}.{part}") from None
        out.append(token)
    return (out[0], out[1])


def step_from_dict(obj: Any, where: str, session) -> Step:
    """One checked step; LessonError naming ``where`` (e.g. ``steps[3]``) and the fault."""
    if not isinstance(obj, dict):
        raise LessonError(f"is {_describe(obj)}, expected an object (a step)", where)
    unknown = sorted(set(obj) - set(_STEP_KEYS))
    if unknown:
        raise LessonError(f"has an unknown key {unknown[0]!r} (a step has {', '.join(_STEP_KEYS)})", where)
    stage_name = obj.get("stage")
    if stage_name not in STAGES:
        raise LessonError(f"is {_describe(stage_name)}, expected one of {', '.join(STAGES)}", f"{where}.stage")
    stage = STAGES[stage_name]
    formula = _text(obj.get("formula", stage.formula), f"{where}.formula", "text", limit=200)
    latex = _text(obj.get("latex", stage.latex if "formula" not in obj else ""), f"{where}.latex", "LaTeX", limit=400)
    title = _checked_text(obj.get("title", formula), f"{where}.title", session, "text", limit=200)
    panels = obj.get("panels", list(stage.panels))
    if not isinstance(panels, list) or not panels:
        raise LessonError(f"is {_describe(panels)}, expected a list of panels ({', '.join(PANEL_KINDS)})",
                          f"{where}.panels")
    for i, kind in enumerate(panels):
        if kind not in PANEL_KINDS + INPUT_KINDS:
            raise LessonError(f"is {_describe(kind)}, expected one of {', '.join(PANEL_KINDS + INPUT_KINDS)}",
                              f"{where}.panels[{i}]")
    hide = obj.get("hide", [])
    if not isinstance(hide, list):
        raise LessonError(f"is {_describe(hide)}, expected a list such as [\"weights[she]\"]", f"{where}.hide")
    hidden = tuple(_hidden_ref(h, f"{where}.hide[{i}]", session, cell=None) for i, h in enumerate(hide))
    slider = obj.get("slider")
    if slider is not None:
        params = session.preset.params if session.preset is not None else {}
        if not isinstance(slider, str) or slider not in params:
            have = ", ".join(params) or "none: the session has no preset"
            raise LessonError(f"is {_describe(slider)}, expected a parameter of the session's preset ({have})",
                              f"{where}.slider")
    return Step(stage=stage_name, title=title, formula=formula, latex=latex,
                text=_checked_text(obj.get("text", ""), f"{where}.text", session, "text"),
                notes=_checked_text(obj.get("notes", ""), f"{where}.notes", session, "text"),
                panels=tuple(dict.fromkeys(panels)), select=_select(obj.get("select"), f"{where}.select", session),
                hide=hidden, ask=_ask(obj.get("ask"), f"{where}.ask", session), slider=slider)


MAX_STEPS = 200


def steps_from_list(value: Any, session, where: str = "steps") -> tuple[Step, ...]:
    if not isinstance(value, list) or not value:
        raise LessonError(f"is {_describe(value)}, expected a list of at least one step", where)
    if len(value) > MAX_STEPS:
        raise LessonError(f"has {len(value)} steps, more than the limit of {MAX_STEPS}", where)
    return tuple(step_from_dict(s, f"{where}[{i}]", session) for i, s in enumerate(value))


def step_to_dict(step: Step) -> dict:
    """The step as a lesson file writes it (defaults left out)."""
    stage = STAGES[step.stage]
    out: dict[str, Any] = {"stage": step.stage}
    if step.title != step.formula:
        out["title"] = step.title
    if step.formula != stage.formula:
        out["formula"] = step.formula
        if step.latex:
            out["latex"] = step.latex
    out["panels"] = list(step.panels)
    if any(step.select):
        out["select"] = {k: v for k, v in zip(("query", "key"), step.select) if v is not None}
    for key in ("text", "notes"):
        if getattr(step, key):
            out[key] = getattr(step, key)
    if step.hide:
        out["hide"] = [r.text for r in step.hide]
    if step.ask is not None:
        ask = {"kind": step.ask.kind, "of": step.ask.of.text, "prompt": step.ask.prompt}
        if step.ask.kind == "number":
            ask["tolerance"] = step.ask.tolerance
        out["ask"] = ask
    if step.slider:
        out["slider"] = step.slider
    return out


def default_steps(session) -> tuple[Step, ...]:
    """A plain lesson for any session: one step per stage it uses, no questions (File ▸
    Save as lesson outside a lesson starts from these)."""
    names = ["tokens"]
    if session.positions is not None or session.norm is not None:
        names.append("positions")
    names += ["projections", "scores", "scale"]
    if session.mask.kind != "none":
        names.append("mask")
    names += ["softmax", "output"]
    steps = []
    for name in names:
        stage = STAGES[name]
        formula = stage.formula
        latex = stage.latex
        if name == "scale" and session.scale.kind == "temperature":
            formula, latex = "scaled = scores / τ", r"\mathrm{scaled} = \mathrm{scores} / \tau"
        elif name == "scale" and session.scale.kind == "none":
            formula, latex = "scaled = scores", r"\mathrm{scaled} = \mathrm{scores}"
        panels = tuple(k for k in stage.panels if k != "embedding_scatter" or session.d == 2) or ("qkv",)
        steps.append(Step(stage=name, title=formula, formula=formula, latex=latex, panels=panels))
    return tuple(steps)
