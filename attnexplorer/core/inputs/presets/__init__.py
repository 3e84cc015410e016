"""Presets: named, documented starting points built by small functions from data.

Each preset module defines one ``Preset``: its parameters (which the window shows as
labelled sliders or spin boxes, and ``--set KEY=VALUE`` sets on the command line) and a
``build(params) -> BuiltPreset`` function. ``build_preset(name, params)`` parses and checks
the parameters (``PresetError`` on an unknown name, an unknown parameter or a bad value) and
returns the session, with ``session.preset`` recording the name and the full parameters.

A preset may also define reference curves (the sine preset's clean signal): data that is not
part of the attention but that views and exports draw beside it. ``reference_curves(session)``
derives them from the session alone (its preset record and tokens), cached, so a session
that comes back by undo, from a file, from a crash recovery or on the command line gets the
right curves with nothing kept in sync by hand.
"""

from __future__ import annotations

import functools
import math
import types
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np

from ...errors import AttnExplorerError, PresetError
from ..session import PresetRef, Session


@dataclass(frozen=True)
class Param:
    """One preset parameter. ``kind`` is "int" or "float"; bounds are inclusive."""

    name: str
    kind: str
    default: float
    minimum: float
    maximum: float
    label: str = ""
    help: str = ""
    step: float = 1.0
    log: bool = False  # a slider on a log scale (temperature, noise) reads better

    def show(self, value: float) -> str:
        """``value`` as the user reads it: whole numbers in full (a seed's 2147483647, not 2.15e+09)."""
        return str(int(value)) if self.kind == "int" else f"{value:g}"

    def parse(self, value: Any) -> float | int:
        """Turn a CLI string or a number into a checked value, or raise PresetError."""
        where = f"parameter {self.name}"
        if isinstance(value, bool):
            raise PresetError(f"{where}: expected a number, got {value!r}")
        if isinstance(value, str):
            text = value.strip()
            try:
                number = int(text) if self.kind == "int" else float(text)
            except ValueError:
                kind = "a whole number" if self.kind == "int" else "a number"
                raise PresetError(f"{where}: expected {kind}, got {value!r}") from None
        elif isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, np.bool_):
            number = value
        else:
            raise PresetError(f"{where}: expected a number, got {type(value).__name__}")
        if isinstance(number, (float, np.floating)) and not math.isfinite(number):
            raise PresetError(f"{where}: expected a finite number, got {value!r}")
        if self.kind == "int":
            if isinstance(number, (float, np.floating)) and not float(number).is_integer():
                raise PresetError(f"{where}: expected a whole number, got {value!r}")
            number = int(number)
        else:
            try:
                number = float(number)
            except OverflowError:  # an int beyond float64
                raise PresetError(f"{where}: expected a finite number, got a number too large") from None
        if not self.minimum <= number <= self.maximum:
            raise PresetError(f"{where}: {number!r} is outside {self.show(self.minimum)}..{self.show(self.maximum)}")
        return number


@dataclass(frozen=True)
class BuiltPreset:
    """A preset's session (``session.preset`` records the name and every parameter)."""

    session: Session


@dataclass(frozen=True)
class Preset:
    name: str
    title: str
    description: str
    params: tuple[Param, ...]
    build: Callable[[dict], BuiltPreset]
    # The preset's embedding generator: embeddings (n, d) for a token list under the given
    # parameters. The window's "preset generator" embedding source uses it for new tokens.
    embed: Callable[[tuple[str, ...], int, dict], np.ndarray] | None = None
    # The preset's reference curves for a token list under the given parameters:
    # {name: array with one value per token}, or {} where they do not apply (see
    # ``reference_curves``).
    curves: Callable[[tuple[str, ...], dict], Mapping[str, np.ndarray]] | None = None

    def param(self, name: str) -> Param:
        for p in self.params:
            if p.name == name:
                return p
        known = ", ".join(p.name for p in self.params) or "none"
        raise PresetError(f"preset {self.name!r} has no parameter {name!r} (parameters: {known})")

    def defaults(self) -> dict:
        return {p.name: p.default for p in self.params}


def registry() -> dict[str, Preset]:
    """Every preset by name: the one list ``list_presets`` and ``build_preset`` read (the
    self-test's tests put a tiny one in its place)."""
    # Imported here, not at module level, so that each preset module can import this one.
    from . import dessert, pronoun, random_start, rope, sine, translate

    return {p.name: p for p in (pronoun.PRESET, dessert.PRESET, sine.PRESET, random_start.PRESET, rope.PRESET,
                                translate.PRESET)}


def list_presets() -> list[Preset]:
    """All presets, in the order the menu shows them."""
    return list(registry().values())


def get_preset(name: str) -> Preset:
    presets = registry()
    if name not in presets:
        raise PresetError(f"unknown preset {name!r}; choose one of {', '.join(presets)}")
    return presets[name]


def build_preset(name: str, params: Mapping[str, Any] | None = None) -> BuiltPreset:
    """Build preset ``name`` with ``params`` (strings or numbers) over its defaults."""
    preset = get_preset(name)
    values = preset.defaults()
    for key, value in (params or {}).items():
        values[key] = preset.param(key).parse(value)
    built = preset.build(dict(values))
    session = built.session.replace(preset=preset_ref(name, values))
    return BuiltPreset(session=session)


_NO_CURVES: Mapping[str, np.ndarray] = types.MappingProxyType({})


def reference_curves(session: Session) -> Mapping[str, np.ndarray]:
    """The reference curves of ``session``'s preset, one value per token, read-only; empty
    when the session has no preset, its preset has none, or they do not fit its tokens.

    For the sine preset: ``position`` (each sample's p in [0, 1]) and ``clean`` (sin 2πp).
    A pure function of the session's preset record and tokens, cached on them.
    """
    ref = session.preset
    if ref is None:
        return _NO_CURVES
    try:
        params = tuple(sorted(ref.params.items()))
        return _curves(ref.name, params, session.tokens)
    except TypeError:  # a parameter value that cannot be a cache key is no preset's
        return _NO_CURVES


@functools.lru_cache(maxsize=16)
def _curves(name: str, params: tuple, tokens: tuple[str, ...]) -> Mapping[str, np.ndarray]:
    try:
        preset = get_preset(name)
        if preset.curves is None:
            return _NO_CURVES
        values = preset.defaults()
        for key, value in params:
            values[key] = preset.param(key).parse(value)
        curves = preset.curves(tokens, values)
    except AttnExplorerError:  # a file may record parameters the preset no longer accepts
        return _NO_CURVES
    out = {}
    for key, value in curves.items():
        array = np.array(value, dtype=np.float64)
        array.flags.writeable = False
        out[key] = array
    return types.MappingProxyType(out)


def preset_ref(name: str, params: Mapping[str, Any]) -> PresetRef:
    """The record of preset ``name`` built with ``params``, its parameters checked
    (``check_params``): how a record that comes from outside (a file, the API) is made.
    Raises ``SessionError``."""
    ref = PresetRef(name, params)  # the shape first: a name, a mapping with string keys
    return PresetRef(ref.name, check_params(ref.name, ref.params))


def check_params(name: str, params: Mapping[str, Any]) -> dict:
    """The parameters a session records for preset ``name``, checked as its sliders need them.

    For a known preset every key must be one of its parameters and every value a number
    within its bounds (``Param.parse``; text such as ``"64"`` is refused here, since files
    and the API hold numbers); returns them as checked ints and floats. An unknown name is
    a label only and its parameters are returned as given. Raises ``SessionError`` whose
    ``where`` is ``preset.params.KEY``.
    """
    from ...errors import SessionError

    presets = registry()
    if name not in presets:
        return dict(params)
    preset = presets[name]
    known = {p.name: p for p in preset.params}
    out = {}
    for key, value in params.items():
        where = f"preset.params.{key}"
        param = known.get(key)
        if param is None:
            raise SessionError(f"is not a parameter of the {name} preset (parameters: {', '.join(known) or 'none'})", where)
        if isinstance(value, str):
            raise SessionError(f"is the text {value[:40]!r}, expected a number", where)
        try:
            out[key] = param.parse(value)
        except PresetError as err:
            raise SessionError(str(err).removeprefix(f"parameter {key}: "), where) from None
    return out


def parse_assignments(items: list[str]) -> dict[str, str]:
    """``["tau=0.1", "N=50"]`` from ``--set`` into a dict, or PresetError."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise PresetError(f"--set expects KEY=VALUE, got {item!r}")
        out[key.strip()] = value.strip()
    return out


def describe_presets() -> str:
    """The text `attnexplorer presets` prints."""
    lines = []
    for p in list_presets():
        lines.append(f"{p.name}: {p.title}")
        lines.append(f"    {p.description}")
        for q in p.params:
            lines.append(f"    --set {q.name}=<{q.kind}>  {q.label or q.name}; default {q.show(q.default)}, "
                         f"range {q.show(q.minimum)}..{q.show(q.maximum)}. {q.help}".rstrip())
    return "\n".join(lines)
