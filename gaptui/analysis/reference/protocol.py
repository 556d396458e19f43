"""A reference's protocol beside ours: what its runs were run with, and whether a comparison is like-for-like.

A reference file states its protocol in ``# protocol:`` lines (:mod:`gaptui.analysis.reference`): the family's settings
(:class:`engine.tasks.Setting`, by key: alignment's ``epochs``, ``pairs``, ``batch``, ``budget``, ``noise_model``)
and ``seeds``, the values per cell; ``# protocol[GROUP]:`` gives one group's own values (alignment: AQSOL's pairs
and noise model). A comparison reads ours from the table (:class:`gaptui.analysis.cells.TableProtocol`) and names
every setting the reference states whose value ours does not share: such a comparison is **not like-for-like**.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.errors import GaptuiError, did_you_mean
from engine.tasks import TaskFamily

if TYPE_CHECKING:
    from gaptui import analysis
    from gaptui.analysis.reference.files import Reference

#: The protocol key of the values per cell.
SEEDS = "seeds"


def parse_protocol_lines(
    fam: TaskFamily, lines: Sequence[tuple[int, str, str]], path: Path
) -> dict[str, dict[str, str]]:
    """``(line number, group or "", "key=value, key=value")`` lines as ``{group: {key: value}}``; a key that is no
    setting of ``fam`` (nor ``seeds``), or an item without ``=``, is one :class:`GaptuiError` naming the line."""
    known = [s.key for s in fam.settings()] + [SEEDS]
    out: dict[str, dict[str, str]] = {}
    for number, group, text in lines:
        where = f"{path}:{number}"
        found = out.setdefault(group, {})
        for item in (part.strip() for part in text.split(",")):
            if not item:
                continue
            key, eq, value = (s.strip() for s in item.partition("="))
            if not eq or not value:
                raise GaptuiError(f"{where}: protocol item '{item}' is not KEY=VALUE (e.g. epochs=300)")
            if key not in known:
                raise GaptuiError(
                    f"{where}: protocol key '{key}' is not a setting of {fam.name}{did_you_mean(key, known)}; "
                    f"known: {', '.join(known)}"
                )
            if key == SEEDS and not value.isdigit():
                raise GaptuiError(f"{where}: protocol seeds '{value}' is not a whole number")
            found[key] = value
    return out


def reference_protocol(reference: Reference, group: str) -> dict[str, str]:
    """The reference's protocol for one group (its own values over those of every group)."""
    return {**reference.protocol.get("", {}), **reference.protocol.get(group, {})}


@dataclass(frozen=True)
class ProtocolComparison:
    """Each stated setting's values on our side and the reference's, by name, and those that differ."""

    #: (name, ours, the reference's) per setting the reference states, then the seeds per cell.
    settings: tuple[tuple[str, str, str], ...]
    differs: tuple[str, ...]

    @property
    def like_for_like(self) -> bool:
        return not self.differs

    def lines(self) -> list[str]:
        """``protocol, ours: ...``, ``protocol, reference: ...`` and, when they differ, which settings do."""
        ours = " · ".join(f"{name} {mine}" for name, mine, _ in self.settings)
        theirs = " · ".join(f"{name} {value}" for name, _, value in self.settings)
        out = [f"protocol, ours: {ours}", f"protocol, reference: {theirs}"]
        if self.differs:
            out.append(f"not like-for-like: {', '.join(self.differs)} differ{'s' if len(self.differs) == 1 else ''}")
        else:
            out.append("like-for-like: the protocols agree on every setting the reference states")
        return out

    def as_dict(self) -> dict[str, Any]:
        return {
            "ours": {name: mine for name, mine, _ in self.settings},
            "reference": {name: theirs for name, _, theirs in self.settings},
            "differs": list(self.differs),
            "like_for_like": self.like_for_like,
        }


def compare_protocol(table: analysis.RankingTable, reference: Reference) -> ProtocolComparison | None:
    """Our table's protocol beside the reference's, on the settings the reference states; None when it states
    none (nothing to say) or the table has no protocol."""
    theirs = reference_protocol(reference, "" if table.derived else table.group)
    if not theirs or table.protocol is None:
        return None
    ours = table.protocol.values()
    settings: list[tuple[str, str, str]] = []
    differs: list[str] = []
    for setting in table.family.settings():
        if setting.key not in theirs:
            continue
        mine = ours.get(setting.name, ())
        settings.append((setting.name, " | ".join(mine) or "?", theirs[setting.key]))
        if tuple(mine) != (theirs[setting.key],):
            differs.append(setting.name)
    if SEEDS in theirs:
        seeds = table.protocol.seeds
        mine = "?" if seeds is None else str(seeds[0]) if seeds[0] == seeds[1] else f"{seeds[0]}-{seeds[1]}"
        settings.append((SEEDS, mine, theirs[SEEDS]))
        if mine != theirs[SEEDS]:
            differs.append(SEEDS)
    return ProtocolComparison(tuple(settings), tuple(differs))


def protocol_notes(comparisons: Sequence[Any]) -> list[str]:
    """Per comparison whose protocol is known: its label and lines, for outputs without a place of their own."""
    out = []
    for cmp in comparisons:
        if cmp.protocol is not None:
            label = cmp.table.group or cmp.table.task
            out += [f"{label}: {line}" for line in cmp.protocol.lines()]
    return out
