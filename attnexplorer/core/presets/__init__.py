"""Presets: named, documented starting points built by small functions from data.

Each preset module defines one ``Preset``: its parameters (which the window shows as
labelled sliders or spin boxes, and ``--set KEY=VALUE`` sets on the command line) and a
``build(params) -> BuiltPreset`` function. ``build_preset(name, params)`` parses and checks
the parameters (``PresetError`` on an unknown name, an unknown parameter or a bad value) and
returns the session, with ``session.preset`` recording the name and the full parameters,
plus any reference signals the views can draw (the sine preset's clean signal).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np

from ..errors import PresetError
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
        elif isinstance(value, (int, float, np.integer, np.floating)):
            number = value
        else:
            raise PresetError(f"{where}: expected a number, got {type(value).__name__}")
        if self.kind == "int":
            if float(number) != int(number):
                raise PresetError(f"{where}: expected a whole number, got {value!r}")
            number = int(number)
        else:
            number = float(number)
            if not math.isfinite(number):
                raise PresetError(f"{where}: expected a finite number, got {value!r}")
        if not self.minimum <= number <= self.maximum:
            raise PresetError(f"{where}: {number!r} is outside {self.show(self.minimum)}..{self.show(self.maximum)}")
        return number


@dataclass(frozen=True)
class BuiltPreset:
    """A preset's session plus named reference signals for the views (may be empty)."""

    session: Session
    signals: Mapping[str, np.ndarray] = field(default_factory=dict)


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

    def param(self, name: str) -> Param:
        for p in self.params:
            if p.name == name:
                return p
        known = ", ".join(p.name for p in self.params) or "none"
        raise PresetError(f"preset {self.name!r} has no parameter {name!r} (parameters: {known})")

    def defaults(self) -> dict:
        return {p.name: p.default for p in self.params}


def _registry() -> dict[str, Preset]:
    # Imported here, not at module level, so that each preset module can import this one.
    from . import dessert, pronoun, random_start, sine

    return {p.name: p for p in (pronoun.PRESET, dessert.PRESET, sine.PRESET, random_start.PRESET)}


def list_presets() -> list[Preset]:
    """All presets, in the order the menu shows them."""
    return list(_registry().values())


def get_preset(name: str) -> Preset:
    presets = _registry()
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
    session = built.session.replace(preset=PresetRef(name, dict(values)))
    return BuiltPreset(session=session, signals=dict(built.signals))


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
