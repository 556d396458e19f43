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
from typing import Any, ClassVar

from engine.hardware import RunOptions
from engine.typed import frozen_json, json_fields, parse_dataclass


class TaskSpec:
    """Base of every family's spec (subclasses are frozen dataclasses with ``task`` and ``seed`` fields).

    The canonical form (:meth:`canonical`) is what the run computes: it leaves out ``PLACEMENT`` fields (where and
    how it executes). Its SHA-256 over sorted, compact JSON is the run's identity.
    """

    task: str
    seed: int
    #: Fields that say where or how a run executes, not what it computes: left out of the hash.
    PLACEMENT: ClassVar[tuple[str, ...]] = ("device", "datasets_dir", "data_root")
    #: Options added after runs were recorded, each with the value every run before it had: the canonical form
    #: holds one only when it is set away from that value, so a new option leaves the ids of the runs recorded
    #: before it as they were (``{"precision": "auto"}`` in every built-in family).
    HASHED_WHEN_SET: ClassVar[Mapping[str, Any]] = {}
    #: Attributes a spec caches that do not depend on its ``seed``: :meth:`reseeded` keeps them.
    SEED_FREE: ClassVar[tuple[str, ...]] = ("_seedless",)

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
        """What the run computes: the dict form without the :data:`PLACEMENT` fields and without each
        :data:`HASHED_WHEN_SET` option left at its old value. A family extends it with what its runs resolve
        (a dataset's defaults filled in) and leave out (options its run does not read)."""
        unset = self.HASHED_WHEN_SET
        return {
            k: v for k, v in self.to_dict().items() if k not in self.PLACEMENT and not (k in unset and v == unset[k])
        }

    def run_id(self) -> str:
        """The run's identity: SHA-256 of :meth:`canonical` as sorted, compact JSON (64 hex digits; tables show
        its first 12). Where a run executes never changes it; neither does an option at its old value."""
        known = self.__dict__.get("_hash")
        if known is None:  # specs are frozen: computed once (a grid's planning asks each spec many times)
            known = _digest(self.canonical())
            object.__setattr__(self, "_hash", known)
        return known

    #: The name most of the manager calls :meth:`run_id` by.
    hash = run_id

    def seedless(self) -> str:
        """The spec without its seed, as sorted JSON: specs with equal keys differ only by seed (one cell of a
        grid, what a pack of ``pack_seeds`` may hold). Work that does not depend on the seed (a run's memory need,
        its table axes) is done once per key."""
        known = self.__dict__.get("_seedless")
        if known is None:
            known = json.dumps({k: v for k, v in self.to_dict().items() if k != "seed"}, sort_keys=True)
            object.__setattr__(self, "_seedless", known)
        return known

    def reseeded(self, seed: int) -> Any:
        """This spec with another ``seed``, neither parsed nor checked again: a grid's later seeds. For a spec whose
        ``__post_init__`` and ``validate`` do not read the seed and whose canonical form holds it as ``seed`` only
        (alignment's); the copy keeps the :data:`SEED_FREE` caches and its hash is this canonical form with the
        new seed."""
        state = self.__dict__
        blob = state.get("_seeded_blob")
        if blob is None:  # this canonical form's JSON around its seed, kept: every derived spec's hash is one join
            blob = _seeded_blob(self.canonical())
            object.__setattr__(self, "_seeded_blob", blob)
        if blob is None:
            return self.replace(seed=seed)
        self.seedless()  # worked out here, once for every spec derived from this one
        new = object.__new__(type(self))
        kept = (*self.__dataclass_fields__, *self.SEED_FREE)  # type: ignore[attr-defined]
        new.__dict__.update({k: state[k] for k in kept if k in state})  # fields, and the caches kept
        new.__dict__["seed"] = seed
        new.__dict__["_hash"] = hashlib.sha256(f"{blob[0]}{json.dumps(seed)}{blob[1]}".encode()).hexdigest()
        return new

    def replace(self, **changes: Any) -> Any:
        return dataclasses.replace(self, **changes)  # type: ignore[type-var]

    def run_options(self) -> RunOptions:
        """How the run uses the machine (:class:`engine.hardware.RunOptions`: ``precision``, ``device``,
        ``compile``) from this spec's fields of those names, the defaults for those it has not: what its
        ``validate`` checks them with and what the shared epoch loop receives. The fields stay the spec's own, so
        its hash is what it was."""
        names = [f.name for f in dataclasses.fields(RunOptions) if hasattr(self, f.name)]
        return RunOptions(**{name: getattr(self, name) for name in names})


def _digest(canonical: dict[str, Any]) -> str:
    """A run's identity: SHA-256 of its canonical form as sorted, compact JSON."""
    blob = json.dumps(canonical, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


def _seeded_blob(canonical: dict[str, Any]) -> tuple[str, str] | None:
    """What :func:`_digest` hashes for ``canonical`` with any ``seed``, as the text before and after the seed's
    value (None when it holds no ``seed``): sorted keys put the others on either side of it."""
    if "seed" not in canonical:
        return None
    before = json.dumps({k: v for k, v in canonical.items() if k < "seed"}, sort_keys=True, separators=(",", ":"))
    after = json.dumps({k: v for k, v in canonical.items() if k > "seed"}, sort_keys=True, separators=(",", ":"))
    head = before[:-1] + ("," if len(before) > 2 else "") + '"seed":'
    return head, ("," + after[1:] if len(after) > 2 else "}")


@dataclass(frozen=True)
class Placement:
    """Where a grid's runs find their data: copied into every spec's placement fields by :meth:`TaskFamily.grid`."""

    datasets_dir: str
    data_root: str
