"""One cell, one protocol: the rule that keeps runs of different protocols apart in every table.

A table cell is (group, row, column) of the family's layout (alignment: dataset, model, noise) and holds one value
per seed. Runs of one cell whose protocols (:mod:`gaptui.protocol`: every hashed option but the seed) differ are
never averaged, nor does one stand in for another: the table's rows are **split** by the protocol keys in which the
runs of some cell differ, and each row label says its values, ``gin (epochs 20)`` beside ``gin (epochs 300)``. The
split is worked out per table, over its finished runs, and applies to every row of that table, so rows compared side
by side say the same things about themselves. ``--by KEY`` (``gaptui table``, the app's Ranking) splits rows by
keys of the user's choosing as well.

Keys are named for the reader: the fields of a :class:`~engine.tasks.Setting` by its name (``pairs 1000/200`` for
``dataset.n_train`` and ``dataset.n_val``), the fields an axis covers by that axis (``recipe ngab`` for the recipe
fields), any other by its dotted key (``model_kwargs.dropout 0.1``). Numbers are rounded (``lr 1.02e-3``) unless
two protocols would then read alike. :func:`split_rows` is the only place the rule is applied: ranking tables
(:func:`gaptui.analysis.tables.build_tables`) call it, and every renderer, statistic, figure, gap, export, report
and the app read its rows from the tables.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from engine.errors import GaptuiError, did_you_mean
from engine.labels import natural_key
from engine.tasks import TaskFamily
from gaptui.protocol import differing_keys, outer_axes, run_protocol, value_text
from gaptui.record import SEED, Record, record_task


@dataclass(frozen=True)
class Part:
    """A named piece of a protocol that splits rows: a setting, an axis covering spec fields, or one field."""

    key: str
    name: str
    fields: tuple[str, ...]
    #: The axis whose record value names the part (its ``fields`` are the ones the axis covers), or "".
    axis: str = ""

    def text(self, protocol: Mapping[str, Hashable], exact: bool = False) -> str:
        if self.axis:
            return value_text(protocol.get(self.axis), exact)
        return "/".join(value_text(protocol.get(f), exact) for f in self.fields)

    def words(self, protocol: Mapping[str, Hashable], exact: bool = False) -> str:
        return f"{self.name} {self.text(protocol, exact)}"


def parts_of(fam: TaskFamily, keys: Iterable[str], axes: bool = True) -> list[Part]:
    """``keys`` (differing protocol keys) as the parts that name them: settings first (in the family's order), then
    (with ``axes``) the axes that cover fields, then the remaining keys in sorted order."""
    left = set(keys)
    out: list[Part] = []
    for setting in fam.settings():
        if left & set(setting.fields):
            out.append(Part(setting.key, setting.name, setting.fields))
            left -= set(setting.fields)
    for axis in fam.axes if axes else ():
        if axis.key in outer_axes(fam) and (left & {axis.key, *axis.covers}):
            out.append(Part(axis.key, axis.name, (axis.key, *axis.covers), axis=axis.key))
            left -= {axis.key, *axis.covers}
    if not axes:  # the fields an axis covers stand for themselves; the axis value itself then says nothing more
        left -= set(outer_axes(fam))
    out += [Part(k, k, (k,)) for k in sorted(left)]
    return out


def by_keys(fam: TaskFamily) -> dict[str, Part]:
    """The parts ``--by`` may name without looking at runs: the family's settings and its outer axes."""
    out = {s.key: Part(s.key, s.name, s.fields) for s in fam.settings()}
    for axis in fam.axes:
        if axis.key in outer_axes(fam):
            out[axis.key] = Part(axis.key, axis.name, (axis.key, *axis.covers), axis=axis.key)
    return out


def check_by(fam: TaskFamily, by: Sequence[str], records: Iterable[Record] = (), option: str = "--by") -> list[Part]:
    """The parts ``by`` names (a setting, an outer axis, or a dotted key of the protocol of some run of ``fam``
    among ``records``); anything else is one :class:`GaptuiError` line with a did-you-mean and the known keys."""
    if not by:
        return []
    named = by_keys(fam)
    fields: set[str] = set()
    for record in records:
        if record_task(record) == fam.name:
            fields |= set(run_protocol(record, fam))
    out = []
    for key in by:
        if key in named:
            out.append(named[key])
        elif key in fields:
            out.append(Part(key, key, (key,)))
        else:
            known = [*named, *sorted(fields - {f for p in named.values() for f in p.fields})]
            why = "the seed is what a cell holds one value of" if key == SEED.key else "not a key of"
            where = f"{fam.name} runs" if why.startswith("not") else ""
            raise GaptuiError(
                f"{option} '{key}': {why} {where}".rstrip()
                + f"{did_you_mean(key, known)}; keys: {', '.join(known) or 'none (no runs yet)'}"
            )
    return out


def row_label(base: str, words: Sequence[str]) -> str:
    """``gin`` with ``["epochs 20"]`` as ``gin (epochs 20)``; a row that already says something in parentheses
    (``gin (tuned)``) says both in one: ``gin (tuned, epochs 20)``."""
    if not words:
        return base
    inner = ", ".join(words)
    if base.endswith(")") and " (" in base:
        return f"{base[:-1]}, {inner})"
    return f"{base} ({inner})"


def base_row(label: str) -> str:
    """The row a label names without what it says in parentheses: ``gin`` for ``gin (epochs 20)``."""
    return label.partition(" (")[0]


#: A table's entry: (record, group label, row, column key), as :func:`gaptui.analysis.tables.build_tables` keys it.
Entry = tuple[Record, str, str, Any]


def _differing(entries: Sequence[Entry], protocols: Sequence[Mapping[str, Hashable]]) -> dict[str, set[str]]:
    """Per group (table): the protocol keys in which the finished runs of one of its cells differ."""
    cells: dict[tuple[str, str, Any], list[Mapping[str, Hashable]]] = defaultdict(list)
    differ: dict[str, set[str]] = {}
    for (record, group, row, column), protocol in zip(entries, protocols, strict=True):
        differ.setdefault(group, set())
        if record.get("status") == "done":
            cells[(group, row, column)].append(protocol)
    for (group, _, _), protocols in cells.items():
        differ[group] |= differing_keys(protocols)
    return differ


def split_rows(
    fam: TaskFamily, entries: Sequence[Entry], by: Sequence[Part] = ()
) -> tuple[list[str], dict[str, list[Part]]]:
    """The row each entry is shown in (its row, or its row with the values of its table's split parts: those that
    name the keys some cell's finished runs differ in, then the ``by`` parts), and the parts per group. Where
    rounding (or an axis that names its fields in one word) would make two protocols of one row read alike, that
    table names every field and gives its exact value."""

    def with_by(parts: list[Part]) -> list[Part]:
        have = {p.key for p in parts}
        return [*parts, *(p for p in by if p.key not in have)]

    protocols = [run_protocol(record, fam) for record, _, _, _ in entries]
    differ = _differing(entries, protocols)
    parts = {group: with_by(parts_of(fam, keys)) for group, keys in differ.items()}
    if not any(parts.values()):
        return [row for _, _, row, _ in entries], parts
    exact: set[str] = set()
    seen: dict[tuple[str, str, str], tuple[Hashable, ...]] = {}
    for (_, group, row, _), protocol in zip(entries, protocols, strict=True):
        if parts[group]:
            label = row_label(row, [p.words(protocol) for p in parts[group]])
            values = tuple(protocol.get(f) for p in parts[group] for f in p.fields)
            if seen.setdefault((group, row, label), values) != values:
                exact.add(group)
    for group in exact:
        parts[group] = with_by(parts_of(fam, differ[group], axes=False))
    rows = []
    for (_, group, row, _), protocol in zip(entries, protocols, strict=True):
        rows.append(row_label(row, [p.words(protocol, group in exact) for p in parts[group]]))
    return rows, parts


# ------------------------------------------------------------------------------------------------ protocol line


@dataclass(frozen=True)
class TableProtocol:
    """What a table's runs were run with: each setting's values (one when they agree), the seeds per cell, and the
    parts its rows are split by."""

    #: (setting name, its values among the table's runs, sorted), settings in the family's order.
    settings: tuple[tuple[str, tuple[str, ...]], ...]
    #: Fewest and most finished seeds of a cell of a trained row.
    seeds: tuple[int, int] | None
    #: The names of the parts in the row labels.
    split: tuple[str, ...] = ()

    def line(self) -> str:
        """``protocol: epochs 20 · pairs 1000/200 · batch 100 · seeds 3 per cell``; a setting whose values differ
        says so (``epochs 5 | 20 (in the row labels)`` when the rows are split by it, else ``(rows differ)``)."""
        words = []
        for name, values in self.settings:
            if not values:
                continue
            if len(values) == 1:
                words.append(f"{name} {values[0]}")
            else:
                where = "in the row labels" if name in self.split else "rows differ"
                words.append(f"{name} {' | '.join(values)} ({where})")
        if self.seeds is not None:
            low, high = self.seeds
            words.append(f"seeds {low if low == high else f'{low}-{high}'} per cell")
        others = [n for n in self.split if n not in {name for name, _ in self.settings}]
        if others:
            words.append(f"rows split by {', '.join(others)}")
        return "protocol: " + " · ".join(words) if words else ""

    def values(self) -> dict[str, tuple[str, ...]]:
        return dict(self.settings)


def table_protocol(
    fam: TaskFamily, records: Iterable[Record], seeds: Iterable[int], split: Sequence[Part] = ()
) -> TableProtocol:
    """The :class:`TableProtocol` of a table made of ``records`` (the runs whose values its cells hold; ``seeds``
    the number of values of each cell of a trained row)."""
    found: dict[str, set[str]] = defaultdict(set)
    axes = [a for a in fam.axes if a.key in outer_axes(fam) and a.covers]
    seen: set[int] = set()
    for record in records:
        protocol = run_protocol(record, fam)
        if id(protocol) in seen:  # records of one protocol share its mapping: its settings are known
            continue
        seen.add(id(protocol))
        for setting in fam.settings():
            if any(f in protocol for f in setting.fields):
                found[setting.name].add("/".join(value_text(protocol.get(f)) for f in setting.fields))
        for axis in axes:
            if (value := protocol.get(axis.key)) is not None:
                found[axis.name].add(str(value))
    names = [s.name for s in fam.settings()] + [a.name for a in axes]
    counts = list(seeds)
    return TableProtocol(
        tuple((n, tuple(sorted(found[n], key=natural_key))) for n in names if found.get(n)),
        (min(counts), max(counts)) if counts else None,
        tuple(p.name for p in split),
    )
