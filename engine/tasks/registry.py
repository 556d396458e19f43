"""The registry of task families: built-ins and plug-ins imported on first use, and look-ups by name.

Where families come from: the built-in families (:data:`BUILTIN`), then the modules named in the
``GAPTUI_FAMILIES`` environment variable (comma-separated; each registers its families when imported; the worker
subprocess inherits the variable), then the ``gaptui.families`` entry-point group of installed packages.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from engine.errors import GaptuiError, unknown
from engine.tasks.family import TaskFamily
from engine.tasks.run import RESULT
from engine.tasks.spec import TaskSpec
from engine.user_files import read_user_text

#: Modules that register the families shipped with gaptui (imported on first use of :data:`FAMILIES`).
BUILTIN = ("engine.alignment.family", "engine.gape.family", "engine.properties.family", "engine.brec.family")
#: Environment variable naming extra modules that register families (comma-separated).
ENV_FAMILIES = "GAPTUI_FAMILIES"
ENTRY_POINT_GROUP = "gaptui.families"
#: The family of the specs, records and presets written before families existed (they have no ``task`` key).
LEGACY_TASK = "alignment"


def missing_members(family: TaskFamily) -> list[str]:
    """The required members ``family`` lacks (see :mod:`engine.tasks.family`), in the order they are listed."""
    cls = type(family)
    missing = [] if family.spec_type is not TaskSpec else ["spec_type"]
    missing += [key for key in ("metrics", "axes") if not getattr(family, key)]
    missing += [] if hasattr(family, "table") else ["table"]
    missing += [m for m in ("record_axes",) if getattr(cls, m) is getattr(TaskFamily, m)]
    if cls.run is TaskFamily.run and cls.steps is TaskFamily.steps:
        missing.append("run (or steps)")
    missing += [m for m in ("parse_preset", "grid") if getattr(cls, m) is getattr(TaskFamily, m)]
    return missing


class FamilyRegistry:
    """Task families by name; built-ins and plug-ins are imported on first use."""

    def __init__(self) -> None:
        self._items: dict[str, TaskFamily] = {}
        self._loaded = False
        self._loading = False
        #: ``GAPTUI_FAMILIES`` modules that failed to import, with why (each was warned about once).
        self.failed: dict[str, str] = {}

    def register(self, family: TaskFamily) -> TaskFamily:
        """Add ``family`` (an instance); a second family of the same name is an error."""
        if not family.name or not isinstance(family.name, str):
            raise ValueError(f"{type(family).__name__}: a task family needs a name")
        if family.name in self._items and type(self._items[family.name]) is not type(family):
            raise ValueError(f"task family '{family.name}' registered twice")
        declared = {m.key for m in family.metrics}
        for key in (family.default_metric, family.result_metric):
            if key and key not in declared:
                raise ValueError(f"task family '{family.name}': metric '{key}' is not declared in metrics")
        missing = missing_members(family)
        if missing:
            raise ValueError(f"task family '{family.name}' does not declare {', '.join(missing)}")
        axes = {a.key for a in family.axes}
        for key in (family.table.group, family.table.rows, family.table.columns):
            if key is not None and key not in axes:
                raise ValueError(f"task family '{family.name}': table axis '{key}' is not declared in axes")
        self._items[family.name] = family
        return family

    def unregister(self, name: str) -> None:
        """Drop the family called ``name`` (a plug-in's tests register theirs for one test and drop it after)."""
        self._items.pop(name, None)

    def _load(self) -> None:
        if self._loaded or self._loading:
            return
        self._loading = True
        try:
            for module in BUILTIN:
                importlib.import_module(module)
            for module in filter(None, (m.strip() for m in os.environ.get(ENV_FAMILIES, "").split(","))):
                try:
                    importlib.import_module(module)
                except (Exception, SystemExit) as exc:  # a plug-in's bug must not take the built-in families down
                    self.failed[module] = f"{type(exc).__name__}: {' '.join(str(exc).split())}"
                    print(
                        f"warning: {ENV_FAMILIES}: could not import '{module}' ({self.failed[module]}); "
                        "the other families still work",
                        file=sys.stderr,
                    )
            from importlib.metadata import entry_points

            for entry in entry_points(group=ENTRY_POINT_GROUP):
                entry.load()
            # The built-ins first, in BUILTIN's order, whichever module was imported first (a stable sort keeps
            # plug-ins in the order they registered).
            rank = {module: i for i, module in enumerate(BUILTIN)}
            ordered = sorted(self._items.items(), key=lambda item: rank.get(type(item[1]).__module__, len(rank)))
            self._items = dict(ordered)
            self._loaded = True
        finally:
            self._loading = False

    def get(self, name: str) -> TaskFamily:
        self._load()
        if name not in self._items:
            error = unknown("task", name, self._items)
            if self.failed:
                error = GaptuiError(f"{error}; ${ENV_FAMILIES} modules that did not import: {', '.join(self.failed)}")
            raise error
        return self._items[name]

    def names(self) -> list[str]:
        self._load()
        return list(self._items)

    def __contains__(self, name: object) -> bool:
        self._load()
        return name in self._items

    def __iter__(self) -> Iterator[TaskFamily]:
        self._load()
        return iter(list(self._items.values()))


FAMILIES = FamilyRegistry()


def family(name: str) -> TaskFamily:
    """The family called ``name``."""
    return FAMILIES.get(name)


def task_of(raw: Mapping[str, Any]) -> str:
    """The ``task`` of a spec, record or preset dict (absent: :data:`LEGACY_TASK`, as written before families)."""
    task = raw.get("task") or LEGACY_TASK
    if not isinstance(task, str):
        raise GaptuiError(f"task = {task!r}: expected a family name such as {LEGACY_TASK}")
    return task


def load_spec(raw: Mapping[str, Any], where: str = "run spec") -> Any:
    """The spec of any family, from its dict form (dispatch on ``task``)."""
    task = task_of(raw)
    try:
        fam = FAMILIES.get(task)
    except GaptuiError as exc:
        raise GaptuiError(f"{where}: {exc}") from None
    return fam.parse_spec({**raw, "task": task}, where)


def load_spec_file(path: Path) -> Any:
    if not Path(path).exists():
        raise GaptuiError(f"run spec {path}: file not found")
    try:
        raw = json.loads(read_user_text(path, "a run spec is a JSON text file"))
    except json.JSONDecodeError as exc:
        raise GaptuiError(f"run spec {path}: not valid JSON ({exc})") from None
    if not isinstance(raw, dict):
        raise GaptuiError(f"run spec {path}: expected a JSON object")
    return load_spec(raw, where=f"run spec {path}")


def artefact_problem(spec: TaskSpec, run_dir: Path, dependants: bool = False) -> str:
    """Why the finished run ``spec`` in ``run_dir`` no longer counts as done (``""`` when it does).

    Checks its family's :meth:`~TaskFamily.artefacts` (and, with ``dependants``, its
    :meth:`~TaskFamily.dependant_artefacts`): each file present; ``result.json`` valid JSON saying ``done`` for this
    run's hash; any other file matching its fingerprint (``<stem>.json``: size and SHA-256) when one was written.
    The answer reads ``its result.json is missing`` and the like.
    """
    from engine.files import mismatch, read_json

    fam = family(spec.task)
    names = tuple(fam.artefacts(spec)) + (tuple(fam.dependant_artefacts(spec)) if dependants else ())
    for name in dict.fromkeys(names):
        path = Path(run_dir) / name
        if not path.is_file():
            return f"its {name} is missing"
        if name == RESULT:
            result = read_json(path)
            if not isinstance(result, dict):
                return f"its {name} is corrupt (not a JSON object)"
            if result.get("run") != spec.run_id():
                return f"its {name} belongs to another run ({str(result.get('run'))[:12]})"
            if result.get("status") != "done":
                return f"its {name} says {result.get('status')!r}, not done"
            continue
        sums = path.with_suffix(".json")
        expected = read_json(sums) if sums != path else None
        if isinstance(expected, dict) and "sha256" in expected:
            problem = mismatch(path, expected)
            if problem:
                return f"its {name} fails its checksum ({problem})"
    return ""
