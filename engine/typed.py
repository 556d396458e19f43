"""Typed values from untyped input (command-line strings, TOML, JSON), with errors that name the culprit."""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import re
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from engine.errors import GaptuiError, did_you_mean

#: Digits as a user types them: ASCII only. ``str.isdigit`` and ``int()`` also take ``"²"``, ``"١"`` or ``"５"``,
#: which no one writes for a count, a GPU index or a pair number.
_ASCII_COUNT = re.compile(r"[0-9]+")


def short_value(value: Any) -> str:
    """A value as a label or a legend shows it: ints, strings and floats of at most 4 significant digits as written
    (``0.002``, ``5e-05``), a float with more (one a search sampled) rounded to 3 significant digits: ``0.153``,
    ``1.02e-3`` (not ``0.0010197722346506274``)."""
    if isinstance(value, bool) or not isinstance(value, float) or not math.isfinite(value):
        return str(value)
    if float(f"{value:.4g}") == value:
        return str(value)
    if 1e-2 <= abs(value) < 1e4:
        return f"{value:.3g}"
    mantissa, exponent = f"{value:.2e}".split("e")
    return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"


def ascii_count(text: Any) -> int | None:
    """``text`` as a count when it is ASCII digits only (``"12"``), else None (``"1.5"``, ``"-1"``, ``"²"``)."""
    if isinstance(text, str) and _ASCII_COUNT.fullmatch(text):
        return int(text)
    return None


def coerce(value: Any, typ: Any, where: str, strict: bool = False) -> Any:
    """Convert a command-line string (or a TOML/JSON value) to the annotated type of a parameter.

    ``strict`` is for typed sources (TOML presets, JSON specs): there a value must already have its type, so a
    quoted number (``epochs = "3"``) is never read as a number, a float (``pack_seeds = 1e3``, ``1.0``) never as a
    count, and a number never as text; command-line strings (``strict=False``) are converted."""
    origin = typing.get_origin(typ)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(typ) if a is not type(None)]
        if value is None or (not strict and isinstance(value, str) and value.lower() in ("none", "null")):
            return None
        return coerce(value, args[0], where, strict)
    if strict and isinstance(value, str) and typ in (bool, int, float):
        what = {bool: "true or false", int: "an integer", float: "a number"}[typ]
        raise GaptuiError(f"{where}: expected {what}, got the string '{value}' (write it without quotes)")
    if typ is bool:
        if isinstance(value, bool):
            return value
        text = str(value).lower()
        if not strict and text in ("1", "true", "yes", "on"):
            return True
        if not strict and text in ("0", "false", "no", "off"):
            return False
        raise GaptuiError(f"{where}: expected true or false, got '{value}'")
    if typ is int:
        if isinstance(value, bool):
            raise GaptuiError(f"{where}: expected an integer, got '{value}'")
        if isinstance(value, int):
            return value
        if isinstance(value, float) and strict:
            hint = f"write {int(value)}" if value.is_integer() and abs(value) < 1e18 else "a count is a whole number"
            raise GaptuiError(f"{where}: expected an integer, got the float {value!r} ({hint})")
        if isinstance(value, float) and value.is_integer():
            return int(value)
        text = str(value).strip()
        count = ascii_count(text.removeprefix("-"))
        if count is None:
            raise GaptuiError(f"{where}: expected an integer, got '{value}'")
        return -count if text.startswith("-") else count
    if typ is float:
        if isinstance(value, bool):
            raise GaptuiError(f"{where}: expected a number, got '{value}'")
        try:
            if isinstance(value, str) and not value.isascii():
                raise ValueError(value)  # float() also reads other scripts' digits ("١٫٥")
            out = float(value)
        except (TypeError, ValueError):
            raise GaptuiError(f"{where}: expected a number, got '{value}'") from None
        if not np.isfinite(out):
            raise GaptuiError(f"{where}: expected a finite number, got '{value}'")
        return out
    if strict and typ is str and not isinstance(value, str):
        raise GaptuiError(f"{where}: expected text (a quoted string), got {type(value).__name__} {value!r}")
    return str(value)


@functools.cache
def type_hints(cls: type) -> dict[str, Any]:
    """``typing.get_type_hints`` of a class, once per class (a grid of 2,000 specs asks for it 2,000 times)."""
    return typing.get_type_hints(cls)


def parse_dataclass(cls: type, raw: Mapping[str, Any], where: str, strict: bool = True) -> Any:
    """Build dataclass ``cls`` from ``raw`` (typed: TOML, JSON; see :func:`coerce`'s ``strict``): unknown keys get a
    did-you-mean, values are checked against the field types."""
    if not isinstance(raw, Mapping):
        raise GaptuiError(f"{where}: expected a table of keys, got {type(raw).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    hints = type_hints(cls)
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in fields:
            raise GaptuiError(f"{where}: unknown key '{key}'{did_you_mean(key, fields)}; known: {', '.join(fields)}")
        values[key] = coerce_field(value, hints[key], f"{where}: key '{key}' = {value!r}", strict)
    missing = [
        name
        for name, f in fields.items()
        if name not in values and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise GaptuiError(f"{where}: missing required key(s) {', '.join(missing)}")
    return cls(**values)


def coerce_field(value: Any, typ: Any, where: str, strict: bool = False) -> Any:
    """:func:`coerce` plus the container types used by specs: dict, list and tuple of scalars."""
    origin = typing.get_origin(typ)
    if origin in (dict, Mapping) or typ is dict:
        if not isinstance(value, Mapping):
            raise GaptuiError(f"{where}: expected a table, got {type(value).__name__}")
        return dict(value)
    if origin in (list, tuple) or typ in (list, tuple):
        if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
            raise GaptuiError(f"{where}: expected a list, got {type(value).__name__}")
        args = typing.get_args(typ)
        inner = args[0] if args else Any
        items = [value_item if inner is Any else coerce(value_item, inner, where, strict) for value_item in value]
        return tuple(items) if origin is tuple or typ is tuple else items
    if typ is Any:
        return value
    return coerce(value, typ, where, strict)


_JSON_LEAVES = frozenset({str, int, float, bool, type(None)})


def json_fields(value: Any) -> Any:
    """A dataclass (and what it holds) as JSON-shaped values: nested dataclasses as dicts, tuples and lists as
    lists, mappings as dicts. What ``json.dumps(dataclasses.asdict(x))`` writes, without asdict's deep copy of
    every leaf (planning a 20,000-run grid turns each spec into its dict form; a dry run took 9.8 s, now 8.7 s)."""
    if type(value) in _JSON_LEAVES:
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: json_fields(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (list, tuple)):
        return [json_fields(v) for v in value]
    if isinstance(value, dict):
        return {k: json_fields(v) for k, v in value.items()}
    return value


def frozen_json(method: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """Work out a frozen spec's JSON-shaped ``method()`` once per instance (kept as its JSON text, so every call
    returns a fresh copy that the caller may change): planning a 20,000-run grid asks each spec many times."""
    slot = f"_json_{method.__name__}"

    @functools.wraps(method)
    def cached(self: Any) -> Any:
        blob = self.__dict__.get(slot)
        if blob is None:
            blob = json.dumps(method(self))
            object.__setattr__(self, slot, blob)
        return json.loads(blob)

    return cached
