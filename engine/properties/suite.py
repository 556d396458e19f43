"""The whole suite: every (property, size, family) dataset, built in parallel processes, resumable.

Each dataset is built and cached on its own (:func:`~engine.properties.datasets.build_property_dataset`), so an
interrupted build loses at most the datasets in progress and the next run skips what is cached.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, wait
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.errors import GaptuiError
from engine.files import OutputFolder
from engine.pools import process_pool
from engine.properties.datasets import (
    FAMILIES,
    GRAPHS_PER_DATASET,
    PropertyDatasetSpec,
    build_property_dataset,
    cached_property_dataset,
    check_builds_fit,
)
from engine.properties.definitions import PROPERTY_NAMES, get_property, suite_sizes
from engine.properties.published import published_test_path, published_train_path, write_csv


def suite_specs(
    properties: Iterable[str] = PROPERTY_NAMES,
    families: Iterable[str] = FAMILIES,
    graphs: int = GRAPHS_PER_DATASET,
    seed: int = 0,
    negatives: str | None = None,
    sizes: int | None = None,
) -> list[PropertyDatasetSpec]:
    """One spec per (property, size, family); ``sizes`` keeps the first ``sizes`` sizes of each property."""
    out = []
    for name in properties:
        prop = get_property(name)
        for n in suite_sizes(prop.name)[:sizes]:
            for family in families:
                out.append(PropertyDatasetSpec(prop.name, n, family, graphs, negatives, seed))
    for spec in out:
        spec.canonical()  # validate everything before any process starts
    return out


@dataclass(frozen=True)
class BuildReport:
    """What happened to one dataset of a suite build."""

    spec: PropertyDatasetSpec
    dataset_id: str
    built: bool
    seconds: float
    stats: dict


def _build_one(spec: PropertyDatasetSpec, datasets_dir: str) -> BuildReport:
    from threadpoolctl import threadpool_limits

    started = time.perf_counter()
    with threadpool_limits(1):  # one core per process: the pool is the parallelism
        dataset, built = build_property_dataset(spec, Path(datasets_dir))
    return BuildReport(spec, dataset.id, built, time.perf_counter() - started, dataset.stats)


def build_suite(
    specs: list[PropertyDatasetSpec],
    datasets_dir: Path,
    workers: int | None = None,
    on_done: Callable[[BuildReport], None] | None = None,
) -> list[BuildReport]:
    """Build every dataset of ``specs`` not yet cached, ``workers`` processes at once (default: all cores)."""
    reports: list[BuildReport] = []
    todo = []
    for spec in specs:
        cached = cached_property_dataset(spec, datasets_dir)
        if cached is None:
            todo.append(spec)
            continue
        report = BuildReport(spec, cached.id, False, 0.0, cached.stats)
        reports.append(report)
        if on_done:
            on_done(report)
    if not todo:
        return reports
    workers = max(1, min(workers or os.cpu_count() or 1, len(todo)))
    check_builds_fit([spec.canonical() for spec in todo], workers)
    if workers == 1:
        for spec in todo:
            report = _build_one(spec, str(datasets_dir))
            reports.append(report)
            if on_done:
                on_done(report)
        return reports
    with process_pool(workers) as pool:
        pending = {pool.submit(_build_one, spec, str(datasets_dir)) for spec in todo}
        try:
            while pending:
                finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                for future in finished:
                    report = future.result()
                    reports.append(report)
                    if on_done:
                        on_done(report)
        except BaseException:
            for future in pending:
                future.cancel()
            raise
    return reports


def export_targets(out: Path, specs: list[PropertyDatasetSpec]) -> dict[Path, PropertyDatasetSpec]:
    """The file each spec is written to: the smallest size of a (property, family) is its train file."""
    base = {}
    for spec in specs:
        key = (spec.property, spec.family)
        base[key] = min(base.get(key, spec.n), spec.n)
    targets = {}
    for spec in specs:
        if spec.n == base[(spec.property, spec.family)]:
            targets[published_train_path(out, spec.family, spec.property)] = spec
        else:
            targets[published_test_path(out, spec.family, spec.property, spec.n)] = spec
    return targets


#: What ``gaptui properties export`` wrote into its --out folder (see :class:`engine.files.OutputFolder`).
EXPORT_MANIFEST = ".gaptui-properties-export.json"


def export_folder(out: Path, force: bool = False) -> OutputFolder:
    """The --out folder of ``gaptui properties export``: a file that exists there is never replaced without
    ``force``, not even one an earlier export wrote (except those a killed export left half moved in), and no
    file is ever removed (exports of other properties share the layout)."""
    return OutputFolder(
        out, EXPORT_MANIFEST, "gaptui properties export", force, replaces=lambda name: False, replace_own=False
    )


def export_names(out: Path, targets: Iterable[Path]) -> list[str]:
    """The names of ``targets`` relative to the layout's folder ``out``."""
    return [Path(path).relative_to(out).as_posix() for path in targets]


def export_suite(
    targets: dict[Path, PropertyDatasetSpec], datasets_dir: Path, out: Path | None = None, force: bool = False
) -> None:
    """Write each (already built) dataset of ``targets`` to its CSV file under ``out`` (by default the folder of the
    layout the targets are in), all or none through :func:`export_folder`: a failure half-way (a full disk) leaves
    the folder as it was, and a kill leaves only files the rerun may replace."""
    root = Path(out) if out is not None else _layout_root(targets)
    folder = export_folder(root, force)
    names = dict(zip(targets, export_names(root, targets), strict=True))
    folder.refuse(names.values())
    with folder as dest:
        for path, spec in targets.items():
            dataset = cached_property_dataset(spec, datasets_dir)
            if dataset is None:  # moved aside or removed since it was built
                raise GaptuiError(f"property dataset {spec.property} n={spec.n} ({spec.family}) is gone; export again")
            write_csv(dest.stage(names[path]), dataset.adjacency(), np.asarray(dataset.labels()))


def _layout_root(targets: Iterable[Path]) -> Path:
    """The folder of a published layout (each (property, family) has a ``<Family>-Train/<property>.csv``)."""
    roots = {Path(p).parent.parent for p in targets if Path(p).parent.name.endswith("-Train")}
    if len(roots) != 1:
        raise ValueError("export_suite: the targets are not one published layout; give out=")
    return roots.pop()
