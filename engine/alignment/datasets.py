"""Alignment datasets: built once per specification, cached on disk under a content hash, loaded in milliseconds.

Layout of one cached dataset (``<datasets dir>/<id>/``)::

    meta.json            spec, stats per split, normalisation report, build time, size + SHA-256 of each array
    train/<array>.npy    the arrays of :class:`engine.pairs.PairSplit` (six files)
    val/<array>.npy

The dataset is an entry of the fingerprinted store (:mod:`engine.cache`): written into a temporary sibling folder
and renamed into place, so the cache never holds a half-written dataset, and checked against its sizes and
checksums when opened; a dataset that fails (a truncated, altered or missing file, a garbled ``meta.json``) is
moved aside as ``<id>.corrupt-<time>`` with a one-line warning and built again.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from engine.alignment.noise import check_noise, check_noise_model, correlate, relabel
from engine.cache import Entry, content_digest, open_entry, read_meta, say_stderr, seeded_rng, write_entry
from engine.errors import GaptuiError
from engine.files import staged_files
from engine.graphs import Graph
from engine.pairs import ARRAYS, PairSplit
from engine.sources import SOURCES, BaseSplits, data_root, params_dict, parse_params
from engine.sources.base import has_alignment_signal

#: Bump when the generation procedure changes: old cache entries are then never confused with new ones.
FORMAT_VERSION = 2
SPLITS = ("train", "val")
#: The files every dataset entry holds besides ``meta.json``.
FILES = tuple(f"{split}/{a}.npy" for split in SPLITS for a in ARRAYS)
REQUIRED = ("id", "spec", "stats")


#: Canonical forms by the JSON of a dataset spec's fields (:meth:`DatasetSpec.canonical`).
_CANONICAL: dict[str, str] = {}


@dataclass(frozen=True)
class DatasetSpec:
    """Everything that determines an alignment dataset. ``params`` may hold strings (from ``--param``)."""

    base: str
    noise: float
    noise_model: str | None = None
    n_train: int | None = None
    n_val: int | None = None
    seed: int = 0
    params: dict[str, Any] = field(default_factory=dict)

    def canonical(self) -> dict[str, Any]:
        """Resolved, typed and defaulted form: equal datasets have equal canonical dicts (worked out once per
        distinct dataset: a 20,000-run grid holds a few hundred; each call returns a fresh copy)."""
        blob = self.__dict__.get("_canonical_json")
        if blob is None:
            fields = [FORMAT_VERSION, self.base, self.noise, self.noise_model, self.n_train, self.n_val, self.seed]
            fields.append(self.params)
            key = json.dumps(fields)
            blob = _CANONICAL.get(key)
            if blob is None:
                if len(_CANONICAL) > 65536:
                    _CANONICAL.clear()
                blob = _CANONICAL[key] = json.dumps(self._canonical())
            object.__setattr__(self, "_canonical_json", blob)
        return json.loads(blob)

    def _canonical(self) -> dict[str, Any]:
        source = SOURCES.get(self.base)
        params = parse_params(source, self.params)
        noise = check_noise(self.noise)
        model = check_noise_model(self.noise_model or source.noise_model)
        n_train = source.sizes[0] if self.n_train is None else int(self.n_train)
        n_val = source.sizes[1] if self.n_val is None else int(self.n_val)
        for flag, value in (("--train", n_train), ("--val", n_val)):
            if value is not None and value < 0:
                raise GaptuiError(f"{flag} {value}: expected a count >= 0")
        if int(self.seed) < 0:
            raise GaptuiError(f"dataset seed {self.seed}: expected a seed >= 0")
        if n_train == 0:
            raise GaptuiError("--train 0: a dataset needs at least one training pair")
        if n_val == 0:
            raise GaptuiError(
                "--val 0: a dataset needs at least one validation pair (its runs are scored and ranked on them)"
            )
        return {
            "format": FORMAT_VERSION,
            "base": source.name,
            "params": params_dict(params),
            "noise": noise,
            "noise_model": model,
            "n_train": n_train,
            "n_val": n_val,
            "seed": int(self.seed),
        }

    @classmethod
    def from_canonical(cls, data: dict[str, Any]) -> DatasetSpec:
        return cls(
            base=data["base"],
            noise=data["noise"],
            noise_model=data["noise_model"],
            n_train=data["n_train"],
            n_val=data["n_val"],
            seed=data["seed"],
            params=dict(data["params"]),
        )


def dataset_id(canonical: dict[str, Any]) -> str:
    """Readable, content-addressed id: ``<base>-<noise %>-<12 hex digits of the spec hash>``."""
    return f"{canonical['base']}-n{canonical['noise'] * 100:g}-{content_digest(canonical)[:12]}"


@dataclass(frozen=True)
class Dataset(Entry):
    """A cached alignment dataset on disk."""

    def split(self, name: str) -> PairSplit:
        if name not in SPLITS:
            raise GaptuiError(f"unknown split '{name}': expected one of {', '.join(SPLITS)}")
        try:
            return PairSplit.load(self.path / name)
        except (ValueError, OSError, EOFError) as exc:
            raise GaptuiError(
                f"dataset {self.path}: cannot read {name}/ ({exc}); rebuild it with `gaptui datasets build --force`"
            ) from None


def build_dataset(
    spec: DatasetSpec, datasets_dir: Path, raw_root: Path | None = None, *, force: bool = False
) -> tuple[Dataset, bool]:
    """Build (or find in the cache) the dataset of ``spec``. Returns ``(dataset, built_now)``.

    Base graphs depend on (seed, base, params, sizes) only, so every noise level of one seed noises the same
    base graphs; the noise and the permutations are drawn from a stream keyed by the whole spec.
    """
    canonical = spec.canonical()
    ident = dataset_id(canonical)
    datasets_dir = Path(datasets_dir)
    final = datasets_dir / ident
    with _building(final):  # the inputs of one plan are built by threads: one dataset once
        return _build(spec, canonical, ident, final, raw_root, force)


_LOCKS: dict[str, threading.Lock] = {}
_LOCKS_GUARD = threading.Lock()


def _building(final: Path) -> threading.Lock:
    with _LOCKS_GUARD:
        return _LOCKS.setdefault(str(final), threading.Lock())


def _build(
    spec: DatasetSpec, canonical: dict[str, Any], ident: str, final: Path, raw_root: Path | None, force: bool
) -> tuple[Dataset, bool]:
    source_cls = SOURCES.get(canonical["base"])
    source = source_cls(parse_params(source_cls, canonical["params"]))
    files = source.source_files(data_root(raw_root))
    if not force:
        cached = open_verified(final)
        if cached is not None and not (changed := _changed_files(cached, files)):
            _check_trainable(cached.stats, ident)
            return cached, False
        if cached is not None:
            force = True  # the cached pairs are those of the files as they were: never served for the new ones
            say_stderr(
                f"warning: dataset {ident} was built from {', '.join(changed[:3])}"
                f"{f' and {len(changed) - 3} more' if len(changed) > 3 else ''}, which changed since (SHA-256): "
                "building it again from the files as they are now"
            )

    from engine.alignment.memory import check_fits

    check_fits(canonical, what=f"dataset {ident}")
    started = time.perf_counter()
    base_key = {k: canonical[k] for k in ("format", "base", "params", "n_train", "n_val")}
    splits = source.load(
        canonical["n_train"], canonical["n_val"], seeded_rng(canonical["seed"], base_key), data_root(raw_root)
    )
    noise_rng = seeded_rng(canonical["seed"], canonical)
    kept, partners, left_out = _with_signal(splits)
    _check_trainable({name: {"pairs": len(kept[name]), "left_out": left_out[name]} for name in SPLITS}, ident)

    def write(tmp: Path) -> dict[str, Any]:
        stats: dict[str, Any] = {}
        for name in SPLITS:
            if partners is None:
                pairs, noise_stats = correlate(kept[name], canonical["noise_model"], canonical["noise"], noise_rng)
            else:  # prepared pairs: labelled with their noise, relabelled only
                pairs, noise_stats = relabel(kept[name], partners[name], noise_rng)
            pairs.save(tmp / name)
            stats[name] = {**noise_stats.to_dict(pairs), "left_out": left_out[name]}
            if splits.files:
                stats[name]["source_files"] = {k: v for k, v in splits.files.items() if k.startswith(f"{name}-")}
        return {
            "id": ident,
            "spec": canonical,
            "source_files": files,
            "stats": stats,
            "normalisation": splits.report.to_dict(),
            "normalisation_note": splits.report.summary(),
            "build_seconds": round(time.perf_counter() - started, 3),
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }

    built = write_entry(final, write, force=force)
    dataset = open_dataset(final)
    from engine.alignment.symmetry import dataset_symmetry

    dataset_symmetry(dataset)  # the ceilings, computed once and cached with the dataset
    return dataset, built


def _changed_files(dataset: Dataset, files: dict[str, str]) -> list[str]:
    """The source files whose SHA-256 differs from what ``dataset`` was built from (files that are gone are not
    changes: the cached dataset still holds their graphs)."""
    recorded = dict(dataset.meta.get("source_files") or {})
    for split in SPLITS:  # datasets built before the top-level record kept theirs per split
        stats = dataset.stats.get(split) if isinstance(dataset.stats, dict) else None
        recorded.update((stats or {}).get("source_files") or {})
    return sorted(name for name, sha in recorded.items() if name in files and files[name] != sha)


def open_verified(path: Path) -> Dataset | None:
    """The cached dataset at ``path`` after its check; None when there is none or (after moving it aside with a
    one-line warning) when it failed the check."""
    meta = open_entry(path, "cached dataset", required=REQUIRED, files=FILES, legacy=_pairs_load)
    return None if meta is None else Dataset(meta["id"], Path(path), meta)


def _with_signal(
    splits: BaseSplits,
) -> tuple[dict[str, list[Graph]], dict[str, list[Graph]] | None, dict[str, int]]:
    """The graphs of each split that carry alignment signal, their prepared partners (None: the source prepares
    none), and per split how many were left out (here and by the source before it drew its sample). Leaving none
    out keeps the graph lists, hence the datasets, as they were.
    """
    kept: dict[str, list[Graph]] = {}
    partners: dict[str, list[Graph]] | None = None if splits.partners is None else {}
    left_out: dict[str, int] = {}
    for name in SPLITS:
        graphs = getattr(splits, name)
        keep = [i for i, g in enumerate(graphs) if has_alignment_signal(g)]
        kept[name] = [graphs[i] for i in keep]
        if partners is not None:
            partners[name] = [splits.partners[name][i] for i in keep]
        left_out[name] = splits.left_out.get(name, 0) + len(graphs) - len(kept[name])
    return kept, partners, left_out


def _check_trainable(stats: dict[str, Any], ident: str) -> None:
    """Refuse a dataset that would train on nothing: no training pair, or no validation pair left after leaving
    out graphs without alignment signal (its runs would finish without a metric)."""
    for name, what in (("train", "training"), ("val", "validation")):
        pairs, left = int(stats[name].get("pairs", 0)), int(stats[name].get("left_out", 0))
        if pairs == 0 and left:
            raise GaptuiError(
                f"dataset {ident} has no {what} pair: all {left} {what} graphs have fewer than 2 nodes or no "
                "edges, which carry no alignment signal; use graphs with edges (molecules with bonds)"
            )
        if pairs == 0:
            raise GaptuiError(
                f"dataset {ident} has no {what} pair (its runs would finish without a metric); choose a base "
                "dataset or sizes that give some"
            )


def _pairs_load(path: Path, meta: dict[str, Any]) -> str:
    """A dataset cached before fingerprints were recorded: every split loads and holds its recorded pair count."""
    for split in SPLITS:
        try:
            pairs = len(PairSplit.load(path / split))
        except (ValueError, OSError, EOFError) as exc:
            return f"{split}/: unreadable ({exc})"
        expected = meta["stats"].get(split, {}).get("pairs") if isinstance(meta["stats"], dict) else None
        if pairs != expected:
            return f"{split}/: {pairs} pairs, expected {expected}"
    return ""


def intact(dataset: Dataset, raw_root: Path | None = None) -> Dataset:
    """``dataset`` once it passed its check; built again from its spec when it failed (and was moved aside)."""
    return (
        open_verified(dataset.path)
        or build_dataset(DatasetSpec.from_canonical(dataset.spec), dataset.path.parent, raw_root)[0]
    )


def open_dataset(path: Path) -> Dataset:
    """The dataset at ``path`` from its ``meta.json`` alone (listings and statistics; see :func:`open_verified`)."""
    meta = read_meta(path, REQUIRED)
    return Dataset(meta["id"], Path(path), meta)


def list_datasets(datasets_dir: Path) -> list[Dataset]:
    """Every complete dataset in the cache, oldest first (temporary build folders are ignored)."""
    out = []
    if Path(datasets_dir).is_dir():
        for child in sorted(Path(datasets_dir).iterdir()):
            if child.name.startswith(".") or not (child / "meta.json").exists():
                continue
            try:
                out.append(open_dataset(child))
            except GaptuiError:
                continue
    return sorted(out, key=lambda d: d.meta.get("created", ""))


def find_dataset(datasets_dir: Path, ident: str) -> Dataset:
    """A dataset by id or unique id prefix."""
    exact = Path(datasets_dir) / ident
    if (exact / "meta.json").exists():
        return open_dataset(exact)
    matches = [d for d in list_datasets(datasets_dir) if d.id.startswith(ident)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        from engine.errors import did_you_mean

        known = [d.id for d in list_datasets(datasets_dir)]
        raise GaptuiError(f"no dataset '{ident}' in {datasets_dir}{did_you_mean(ident, known)}")
    raise GaptuiError(f"dataset id '{ident}' is ambiguous: {', '.join(d.id for d in matches)}")


#: The formats ``gaptui datasets export`` writes.
EXPORT_FORMATS = ("npz", "safetensors")


def export_dataset(dataset: Dataset, out: Path, fmt: str = "npz", force: bool = False) -> Path:
    """Write ``dataset`` to ``out`` in ``fmt``: one ``.npz`` file, or a folder in the authors' safetensors layout
    (:func:`engine.sources.pairs.write_layout`, with ``gaptui-dataset.json`` beside it naming where it came from)."""
    if fmt == "npz":
        return export_npz(dataset, out, force)
    if fmt != "safetensors":
        from engine.errors import unknown

        raise unknown("export format (--format)", fmt, EXPORT_FORMATS)
    from engine.sources.pairs import write_layout

    if Path(out).suffix == ".npz":
        raise GaptuiError(f"--out {out}: --format safetensors writes a folder of six files; give a folder name")
    provenance = {"id": dataset.id, "spec": dataset.spec, "stats": dataset.stats, "truth": "identity"}
    extra = {"gaptui-dataset.json": json.dumps(provenance, indent=2, sort_keys=True) + "\n"}
    return write_layout(Path(out), {split: dataset.split(split) for split in SPLITS}, force=force, extra=extra)


def export_npz(dataset: Dataset, out: Path, force: bool = False) -> Path:
    """Write ``<split>_<array>`` for every split into one ``.npz`` (format documented in the README).

    An existing file is replaced only with ``force``; the file is written whole or not at all.
    """
    out = Path(out)
    if out.suffix != ".npz":
        raise GaptuiError(f"--out {out}: expected a file name ending in .npz")
    if out.is_dir():
        raise GaptuiError(f"--out {out}: is a directory; expected a .npz file name")
    if out.exists() and not force:
        raise GaptuiError(f"--out {out} exists; choose another file or pass --force to replace it")
    arrays: dict[str, np.ndarray] = {}
    for split in SPLITS:
        for name, arr in dataset.split(split).arrays().items():
            arrays[f"{split}_{name}"] = np.asarray(arr)
    out.parent.mkdir(parents=True, exist_ok=True)
    with staged_files() as stage, open(stage(out), "wb") as fh:
        np.savez_compressed(fh, **arrays)
    return out
