"""The spec base every family's spec derives from, and where a grid places its runs.

A spec is a frozen dataclass; its canonical dict (placement fields left out) hashed with SHA-256 is the run's
identity, so where a run executes never changes which run it is.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from engine.typed import frozen_json, json_fields, parse_dataclass

if TYPE_CHECKING:
    from engine.hardware import RunOptions


class TaskSpec:
    """Base of every family's spec (subclasses are frozen dataclasses with ``task`` and ``seed`` fields).

    The canonical form (:meth:`canonical`) is what the run computes: it leaves out ``PLACEMENT`` fields (where and
    how it executes). Its SHA-256 over sorted, compact JSON is the run's identity.
    """

    task: str
    seed: int
    #: Fields that say where or how a run executes, not what it computes: left out of the hash.
    PLACEMENT: ClassVar[tuple[str, ...]] = ("device", "datasets_dir", "data_root")

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any], where: str = "run spec") -> Any:
        spec = parse_dataclass(cls, dict(raw), where)  # type: ignore[type-var]
        spec.validate(where)
        return spec

    def validate(self, where: str = "run spec") -> None:
        """Raise GaptuiError naming ``where``, the field and the expected value when the spec cannot run."""

    @frozen_json
    def to_dict(self) -> dict[str, Any]:
        return json_fields(self)  # type: ignore[no-any-return]

    @frozen_json
    def canonical(self) -> dict[str, Any]:
        return {k: v for k, v in self.to_dict().items() if k not in self.PLACEMENT}

    def hash(self) -> str:
        known = self.__dict__.get("_hash")
        if known is None:  # specs are frozen: computed once (a grid's planning asks each spec many times)
            blob = json.dumps(self.canonical(), sort_keys=True, separators=(",", ":"))
            known = hashlib.sha256(blob.encode()).hexdigest()
            object.__setattr__(self, "_hash", known)
        return known

    def replace(self, **changes: Any) -> Any:
        return dataclasses.replace(self, **changes)  # type: ignore[type-var]

    def run_options(self) -> RunOptions:
        """How the run uses the machine (:class:`engine.hardware.RunOptions`: ``precision``, ``device``,
        ``compile``) from this spec's fields of those names, the defaults for those it has not: what its
        ``validate`` checks them with and what the shared epoch loop receives. The fields stay the spec's own, so
        its hash is what it was."""
        from engine.hardware import RunOptions

        names = [f.name for f in dataclasses.fields(RunOptions) if hasattr(self, f.name)]
        return RunOptions(**{name: getattr(self, name) for name in names})


@dataclass(frozen=True)
class Placement:
    """Where a grid's runs find their data: copied into every spec's placement fields by :meth:`TaskFamily.grid`."""

    datasets_dir: str
    data_root: str
