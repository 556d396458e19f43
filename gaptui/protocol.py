"""The protocol of a run: every option its hashed spec holds but the seed, read from its history record.

A run's identity is the SHA-256 of its spec's canonical form (:meth:`engine.tasks.TaskSpec.canonical`: what the
run computes, resolved, placement left out). Its **protocol** is that canonical form without the seed, flattened to
dotted keys (``epochs``, ``dataset.n_train``, ``model_kwargs.layers``), plus the values of its family's axes that
are outside the table layout (alignment: the recipe): two runs with equal protocols differ only by seed, so the
seeds of one protocol are what a table cell may average (:mod:`gaptui.analysis.cells`).

A family's :class:`~engine.tasks.Setting` names the few keys a reader needs to see (alignment: epochs, pairs, batch,
budget, noise model); :func:`setting_text` gives a run's value of one (``1000/200``). Records written by any
earlier gaptui read the same way: the stored spec is parsed by its family (which fills in what older specs left
out, as it does to hash them) and only a spec that no longer parses is read as stored.
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Iterable, Mapping
from typing import Any

from engine.errors import GaptuiError
from engine.labels import short_number
from engine.tasks import Setting, TaskFamily
from gaptui.record import Record, record_axes, record_family

#: Protocols already worked out, by (task, the stored spec without its seed): a history holds few protocols.
_CACHE: dict[tuple[str, str], dict[str, Hashable]] = {}
#: And by record hash, with the very spec object they were read from (the app keeps its records between views).
_BY_RECORD: dict[str, tuple[Any, dict[str, Hashable]]] = {}
#: A spec's protocol with a record's outer axes, by (the spec protocol's id, the axes), with that protocol kept.
_WITH_AXES: dict[tuple[int, tuple[tuple[str, Hashable], ...]], tuple[Any, dict[str, Hashable]]] = {}
#: Each protocol's setting texts, by the protocol mapping's id (with the mapping kept).
_TEXTS: dict[int, tuple[Any, dict[str, str]]] = {}
_CACHE_SIZE = 50_000


def flatten(value: Mapping[str, Any], prefix: str = "") -> dict[str, Hashable]:
    """A nested mapping as ``{dotted key: value}``; lists become tuples, so every value can key a dict. An empty
    mapping holds no key (``model_kwargs = {}`` and no ``model_kwargs`` read alike)."""
    out: dict[str, Hashable] = {}
    for key, item in value.items():
        name = f"{prefix}{key}"
        if isinstance(item, Mapping):
            out.update(flatten(item, f"{name}."))
        else:
            out[name] = _hashable(item)
    return out


def _hashable(value: Any) -> Hashable:
    if isinstance(value, (list, tuple)):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, Mapping):
        return json.dumps(value, sort_keys=True, default=str)
    return value if isinstance(value, Hashable) else str(value)


def spec_protocol(fam: TaskFamily, spec: Mapping[str, Any]) -> Mapping[str, Hashable]:
    """The flattened canonical form of a stored spec without its seed (cached; see the module docstring)."""
    seedless = {k: v for k, v in spec.items() if k != "seed"}
    try:
        key = (fam.name, json.dumps(seedless, sort_keys=True, default=str))
    except (TypeError, ValueError):
        key = None
    found = _CACHE.get(key) if key is not None else None
    if found is not None:
        return found
    try:
        canonical = fam.parse_spec(dict(spec)).canonical()
    except (GaptuiError, TypeError, ValueError, KeyError, AttributeError):  # a spec no gaptui here can parse
        canonical = {k: v for k, v in spec.items() if k not in getattr(fam.spec_type, "PLACEMENT", ())}
    found = flatten({k: v for k, v in canonical.items() if k != "seed"})
    if key is not None:
        if len(_CACHE) >= _CACHE_SIZE:
            _CACHE.clear()
        _CACHE[key] = found
    return found


def outer_axes(fam: TaskFamily) -> tuple[str, ...]:
    """The keys of the family's axes that are not its table layout's (alignment: the recipe)."""
    found = _OUTER.get(fam.name)
    if found is None:
        layout = fam.table
        found = _OUTER[fam.name] = tuple(
            a.key for a in fam.axes if a.key not in (layout.group, layout.rows, layout.columns)
        )
    return found


_OUTER: dict[str, tuple[str, ...]] = {}


def run_protocol(record: Record, fam: TaskFamily | None = None) -> Mapping[str, Hashable]:
    """A record's protocol: its spec's (:func:`spec_protocol`) plus the values of its family's axes outside the
    table layout; empty for a record of a family not installed. Records of one protocol get the same mapping object
    (read it, never change it), so a view can work out what it shows once per protocol."""
    fam = fam or record_family(record)
    if fam is None:
        return {}
    spec = record.get("spec")
    run_hash = str(record.get("hash", ""))
    known = _BY_RECORD.get(run_hash)
    if known is not None and known[0] is spec:
        base = known[1]
    else:
        base = spec_protocol(fam, spec) if isinstance(spec, Mapping) else {}
        if len(_BY_RECORD) >= _CACHE_SIZE:
            _BY_RECORD.clear()
        _BY_RECORD[run_hash] = (spec, base)
    keys = outer_axes(fam)
    if not keys:
        return base
    axes = record_axes(record)
    outer = tuple((k, _hashable(axes[k])) for k in keys if axes.get(k) is not None)
    if not outer:
        return base
    key = (id(base), outer)
    merged = _WITH_AXES.get(key)
    if merged is None or merged[0] is not base:
        if len(_WITH_AXES) >= _CACHE_SIZE:
            _WITH_AXES.clear()
        merged = _WITH_AXES[key] = (base, {**base, **dict(outer)})
    return merged[1]


def value_text(value: Any, exact: bool = False) -> str:
    """One protocol value as text: numbers short (:func:`short_number`, or ``repr`` when ``exact``), ``-`` for
    none, sequences comma-separated."""
    if value is None:
        return "-"
    if isinstance(value, tuple):
        return ",".join(value_text(v, exact) for v in value)
    if isinstance(value, float):
        return repr(value) if exact else short_number(value)
    return str(value)


def setting_text(setting: Setting, protocol: Mapping[str, Hashable], exact: bool = False) -> str:
    """A run's value of one setting (``1000/200`` for pairs); ``""`` when its protocol holds none of the fields."""
    if not any(f in protocol for f in setting.fields):
        return ""
    return "/".join(value_text(protocol.get(f), exact) for f in setting.fields)


def settings_texts(record: Record) -> dict[str, str]:
    """The record's value of each setting of its family, by setting key (``{"epochs": "20", "pairs": ...}``)."""
    fam = record_family(record)
    if fam is None:
        return {}
    protocol = run_protocol(record, fam)
    known = _TEXTS.get(id(protocol))
    if known is None or known[0] is not protocol:  # once per protocol: the history's columns ask per record
        if len(_TEXTS) >= _CACHE_SIZE:
            _TEXTS.clear()
        known = _TEXTS[id(protocol)] = (protocol, {s.key: setting_text(s, protocol) for s in fam.settings()})
    return known[1]


def protocol_words(record: Record) -> str:
    """The record's settings in one line: ``epochs 20 · pairs 1000/200 · batch 100``."""
    fam = record_family(record)
    if fam is None:
        return ""
    texts = settings_texts(record)
    return " · ".join(f"{s.name} {texts[s.key]}" for s in fam.settings() if texts.get(s.key))


def differing_keys(protocols: Iterable[Mapping[str, Hashable]]) -> set[str]:
    """The keys in which some of ``protocols`` differ (a key one holds and another lacks differs)."""
    protocols = list({id(p): p for p in protocols}.values())  # records of one protocol share its mapping
    if len(protocols) < 2:
        return set()
    keys = set().union(*protocols)
    first = protocols[0]
    return {k for k in keys if any(p.get(k, _MISSING) != first.get(k, _MISSING) for p in protocols[1:])}


_MISSING = object()
