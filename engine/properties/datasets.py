"""GraphRandom and GraphPerturb datasets: labelled relations per (property, size), cached like alignment datasets.

A dataset holds ``graphs`` relations on ``n`` nodes, half satisfying the property (positives, from
:class:`~engine.properties.sat.RelationSampler`) and half violating it (negatives); no relation appears twice and
every graph is re-checked by the plain checker of :mod:`engine.properties.definitions`.

- ``random`` (GraphRandom): negatives are drawn independently of the positives, either from the solver on the
  negated property (``negatives="solver"``: random phases around the density of a randomly chosen positive of the
  same dataset, so both classes share one density law wherever the property allows it) or uniformly at random
  (``negatives="random"``: a density ``p ~ U(0, 1)`` per graph, every cell true with probability ``p``, rejected
  while it satisfies the property).
- ``perturb`` (GraphPerturb): each negative is one positive with 1 or 2 cells flipped (half of them aim at 1 flip,
  half at 2). The search checks every single flip at once and picks a violating one at random; pairs are tried
  among the cells of nodes with unusual in- or out-degree first, then further down the ranking. A positive with no
  violating flip within 2 cells (common for ``surjective`` when every column has in-degree 3 or more) is replaced
  by a fresh positive; ``stats.resampled`` counts them.

Layout (``<datasets dir>/properties/<id>/``): ``meta.json`` (spec, stats, build time), ``bits.npy`` (``[G, ceil(n*n
/ 8)]`` uint8, the row-major adjacency packed with :func:`numpy.packbits`), ``label.npy`` (``[G]`` uint8, 1 =
satisfies), ``source.npy`` (``[G]`` int32: for a GraphPerturb negative the index of its positive, else -1) and
``flips.npy`` (``[G]`` uint8: cells flipped, 0 for positives and GraphRandom). Graphs are stored in a seeded random
order. Each dataset is an entry of the fingerprinted store (:mod:`engine.cache`): staged in a hidden folder and
renamed into place, checked against the sizes and checksums in ``meta.json`` when opened, and moved aside and built
again when it fails.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from engine.cache import Entry, content_digest, open_entry, read_meta, seeded_rng, write_entry
from engine.errors import GaptuiError, unknown
from engine.properties.definitions import BASE_SIZES, MAX_NODES, Property, get_property
from engine.properties.sat import RelationSampler

FORMAT_VERSION = 1
FAMILIES = ("random", "perturb")
NEGATIVES = ("solver", "random")
#: Chosen by measurement (README, "Property suite"): solver negatives let edge density predict the label less.
DEFAULT_NEGATIVES = "solver"
GRAPHS_PER_DATASET = 10_000
#: Give up when this many draws per wanted graph (plus a constant) still leave the dataset short.
MAX_DRAWS_PER_GRAPH = 25
ARRAYS = ("bits", "label", "source", "flips")
FILES = tuple(f"{a}.npy" for a in ARRAYS)
REQUIRED = ("id", "spec", "stats")

Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class PropertyDatasetSpec:
    """Everything that determines one property dataset."""

    property: str
    n: int
    family: str = "random"
    graphs: int = GRAPHS_PER_DATASET
    negatives: str | None = None
    seed: int = 0

    def canonical(self) -> dict[str, Any]:
        """Resolved and validated form; equal datasets have equal canonical dicts."""
        prop = get_property(self.property)
        if self.family not in FAMILIES:
            raise unknown("dataset family", self.family, FAMILIES)
        if not 1 <= int(self.n) <= MAX_NODES:
            raise GaptuiError(f"n = {self.n}: expected a size between 1 and {MAX_NODES} nodes")
        if int(self.graphs) < 2 or int(self.graphs) % 2:
            raise GaptuiError(f"graphs = {self.graphs}: expected an even count >= 2 (half positive, half negative)")
        if int(self.seed) < 0:
            raise GaptuiError(f"dataset seed {self.seed}: expected a seed >= 0")
        negatives = self.negatives or DEFAULT_NEGATIVES
        if negatives not in NEGATIVES:
            raise unknown("negatives kind", negatives, NEGATIVES)
        return {
            "format": FORMAT_VERSION,
            "kind": "properties",
            "property": prop.name,
            "n": int(self.n),
            "family": self.family,
            "graphs": int(self.graphs),
            # GraphPerturb negatives come from the positives, so the kind does not apply there.
            "negatives": negatives if self.family == "random" else None,
            "seed": int(self.seed),
        }


#: Bytes per graph besides its cells while building: two numpy array headers and its key in the set of seen
#: relations.
_GRAPH_OVERHEAD = 400
#: Seconds per adjacency cell to draw, check and keep one graph; the fastest measured (one core, n = 5..16, the
#: solver's positives take 0.3-0.9 us per cell), so time estimates are floors.
SECONDS_PER_CELL = 0.3e-6


def build_bytes(canonical: dict[str, Any]) -> int:
    """Peak bytes of :func:`generate` for ``canonical``: every graph as an ``[n, n]`` bool array in a list, stacked,
    reordered and packed, plus the packed keys of the seen relations."""
    cells = canonical["n"] * canonical["n"]
    return int(canonical["graphs"]) * (3 * cells + 2 * -(-cells // 8) + _GRAPH_OVERHEAD)


def build_seconds(canonical: dict[str, Any]) -> float:
    """At least how long :func:`generate` takes for ``canonical`` on one core (see :data:`SECONDS_PER_CELL`)."""
    return int(canonical["graphs"]) * canonical["n"] * canonical["n"] * SECONDS_PER_CELL


def property_dataset_id(canonical: dict[str, Any]) -> str:
    """``<property>-<family>-n<n>-<12 hex digits of the spec hash>``."""
    c = canonical
    return f"{c['property']}-{c['family']}-n{c['n']}-{content_digest(c)[:12]}"


def pack(adjacency: np.ndarray) -> np.ndarray:
    """``[G, n, n]`` bool -> ``[G, ceil(n*n / 8)]`` uint8 (row-major bits)."""
    a = np.asarray(adjacency, dtype=bool)
    return np.packbits(a.reshape(a.shape[0], -1), axis=1)


def unpack(bits: np.ndarray, n: int) -> np.ndarray:
    """Inverse of :func:`pack`: ``[G, n, n]`` bool."""
    flat = np.unpackbits(np.asarray(bits, dtype=np.uint8), axis=1, count=n * n)
    return flat.astype(bool).reshape(-1, n, n)


@dataclass(frozen=True)
class PropertyDataset(Entry):
    """A cached property dataset on disk."""

    def array(self, name: str) -> np.ndarray:
        try:
            return np.load(self.path / f"{name}.npy", allow_pickle=False)
        except (ValueError, OSError, EOFError) as exc:
            raise GaptuiError(
                f"property dataset {self.path}: cannot read {name}.npy ({exc}); build it again with "
                "`gaptui properties build`"
            ) from None

    def adjacency(self) -> np.ndarray:
        """``[G, n, n]`` bool."""
        return unpack(self.array("bits"), self.spec["n"])

    def labels(self) -> np.ndarray:
        """``[G]`` uint8, 1 = satisfies the property."""
        return self.array("label")


def properties_dir(datasets_dir: Path) -> Path:
    """Where property datasets live inside a datasets cache."""
    return Path(datasets_dir) / "properties"


def open_property_dataset(path: Path) -> PropertyDataset | None:
    """The cached dataset at ``path`` after its check; None when there is none or (after moving it aside with a
    one-line warning) when it failed the check."""
    meta = open_entry(path, "cached property dataset", required=REQUIRED, files=FILES, legacy=_labels_hold)
    return None if meta is None else PropertyDataset(meta["id"], Path(path), meta)


def _labels_hold(path: Path, meta: dict[str, Any]) -> str:
    """A dataset cached before fingerprints were recorded: its arrays load, agree in length, and every label is
    what the property's checker says of its graph."""
    arrays = {}
    for name in ARRAYS:
        try:
            arrays[name] = np.load(path / f"{name}.npy", allow_pickle=False)
        except (ValueError, OSError, EOFError) as exc:
            return f"{name}.npy: unreadable ({exc})"
    spec = meta["spec"]
    graphs, n = spec.get("graphs"), spec.get("n")
    if not isinstance(n, int) or arrays["bits"].shape != (graphs, -(-n * n // 8)):
        return f"bits.npy: shape {arrays['bits'].shape} does not hold {graphs} graphs on {n} nodes"
    short = [f"{name}.npy" for name in ARRAYS if arrays[name].shape != (graphs,) and name != "bits"]
    if short:
        return f"{', '.join(short)}: not {graphs} values"
    wrong = int((get_property(spec["property"])(unpack(arrays["bits"], n)) != arrays["label"].astype(bool)).sum())
    return f"label.npy: {wrong} labels contradict their graphs" if wrong else ""


def cached_property_dataset(spec: PropertyDatasetSpec, datasets_dir: Path) -> PropertyDataset | None:
    """The cached dataset of ``spec`` when it is built and intact, else None."""
    return open_property_dataset(properties_dir(datasets_dir) / property_dataset_id(spec.canonical()))


def build_property_dataset(
    spec: PropertyDatasetSpec, datasets_dir: Path, *, force: bool = False, progress: Progress | None = None
) -> tuple[PropertyDataset, bool]:
    """Build (or find in the cache) the dataset of ``spec``. Returns ``(dataset, built_now)``."""
    canonical = spec.canonical()
    ident = property_dataset_id(canonical)
    final = properties_dir(datasets_dir) / ident
    if not force:
        cached = open_property_dataset(final)
        if cached is not None:
            return cached, False
    check_builds_fit([canonical], workers=1)
    started = time.perf_counter()
    arrays, stats = generate(canonical, seeded_rng(canonical["seed"], canonical), progress)

    def write(tmp: Path) -> dict[str, Any]:
        for name, arr in arrays.items():
            np.save(tmp / f"{name}.npy", arr, allow_pickle=False)
        return {
            "id": ident,
            "spec": canonical,
            "stats": stats,
            "build_seconds": round(time.perf_counter() - started, 3),
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }

    built = write_entry(final, write, force=force)
    return PropertyDataset(ident, final, read_meta(final, REQUIRED)), built


def check_builds_fit(canonicals: list[dict[str, Any]], workers: int) -> None:
    """Refuse, before any is built, datasets whose builds (``workers`` at once) cannot fit in this machine's memory
    or would take longer than :data:`engine.memory.MAX_SECONDS`."""
    from engine.memory import human, refuse_over_memory, refuse_over_time

    if not canonicals:
        return
    workers = max(1, min(workers, len(canonicals)))
    sizes = sorted((build_bytes(c) for c in canonicals), reverse=True)
    largest = max(canonicals, key=build_bytes)
    graphs = sum(int(c["graphs"]) for c in canonicals)
    what = f"building {len(canonicals)} property dataset{'s' if len(canonicals) > 1 else ''}"
    refuse_over_memory(
        what,
        sum(sizes[:workers]),
        f"{workers} at once; the largest, {largest['property']} on n = {largest['n']} with {largest['graphs']:,} "
        f"graphs, about {human(sizes[0])}",
        "lower the graphs per dataset (--graphs, or graphs in a preset)" + (" or --workers" if workers > 1 else ""),
    )
    seconds = sum(build_seconds(c) for c in canonicals) / workers
    refuse_over_time(
        what, seconds, f"at least; {graphs:,} graphs on {workers} processes", "lower the graphs per dataset"
    )


# ---------------------------------------------------------------------------------------------------- generation


class _Distinct:
    """Collects distinct relations, counting draws; raises once the draw budget is spent."""

    def __init__(self, what: str, canonical: dict[str, Any], wanted: int) -> None:
        self.what = what
        self.canonical = canonical
        self.budget = MAX_DRAWS_PER_GRAPH * wanted + 1_000
        self.draws = 0
        self.seen: set[bytes] = set()
        self.kept: dict[str, int] = {}

    def spend(self, draws: int = 1) -> None:
        """Count ``draws`` draws; raise once the budget is spent."""
        self.draws += draws
        if self.draws > self.budget:
            c = self.canonical
            base = BASE_SIZES[c["property"]]
            raise GaptuiError(
                f"property '{c['property']}' on n = {c['n']} nodes: only {self.kept.get(self.what, 0)} distinct "
                f"{self.what} after {self.draws} draws; use more nodes (the suite's base size is {base}) "
                "or fewer graphs"
            )

    def add(self, a: np.ndarray) -> bool:
        """Count one draw; True when ``a`` is new (and now remembered)."""
        self.spend()
        key = np.packbits(a).tobytes()
        if key in self.seen:
            return False
        self.seen.add(key)
        self.kept[self.what] = self.kept.get(self.what, 0) + 1
        return True


def _recheck(prop: Property, a: np.ndarray, positive: bool) -> None:
    if bool(prop(a)) != positive:
        # The solver and the checker disagree: a bug in one of the two encodings, never bad input.
        raise RuntimeError(f"{prop.name}: generated graph fails the plain checker (positive={positive}):\n{a:d}")


def draw_positives(
    prop: Property, n: int, count: int, rng: np.random.Generator, distinct: _Distinct, progress: Progress | None
) -> list[np.ndarray]:
    out: list[np.ndarray] = []
    with RelationSampler(prop.name, n) as sampler:
        while len(out) < count:
            a = sampler.sample(rng)
            if distinct.add(a):
                _recheck(prop, a, True)
                out.append(a)
                if progress and len(out) % 500 == 0:
                    progress(len(out), 2 * count)
    return out


def random_negatives(
    prop: Property, n: int, count: int, rng: np.random.Generator, distinct: _Distinct
) -> list[np.ndarray]:
    """Random relations that violate the property: per graph a density ``p ~ U(0, 1)``, every cell true with
    probability ``p`` (a fair coin for every cell would make e.g. surjective relations almost never violate)."""
    out: list[np.ndarray] = []
    while len(out) < count:
        batch = rng.random((256, n, n)) < rng.random((256, 1, 1))
        satisfied = prop(batch)
        distinct.spend(int(satisfied.sum()))
        for a in batch[~satisfied]:
            if len(out) < count and distinct.add(a):
                out.append(a)
    return out


def solver_negatives(
    prop: Property,
    n: int,
    count: int,
    positive_density: np.ndarray,
    rng: np.random.Generator,
    distinct: _Distinct,
) -> list[np.ndarray]:
    """Relations solved from the negated property, phases around the density of a random positive."""
    out: list[np.ndarray] = []
    with RelationSampler(prop.name, n, negate=True) as sampler:
        while len(out) < count:
            a = sampler.sample(rng, density=float(rng.choice(positive_density)))
            if distinct.add(a):
                _recheck(prop, a, False)
                out.append(a)
    return out


def flip_priority(a: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Flat cell indices of ``a`` (``[n, n]``), cells of nodes with unusual in- or out-degree first.

    A node's unusualness is how far its out-degree and in-degree lie from the means; a cell ``(i, j)`` scores the
    sum over its two nodes, ties broken at random.
    """
    out_deg, in_deg = a.sum(axis=1), a.sum(axis=0)
    unusual = np.abs(out_deg - out_deg.mean()) + np.abs(in_deg - in_deg.mean())
    score = unusual[:, None] + unusual[None, :] + rng.random(a.shape) * 1e-3
    return np.argsort(-score.reshape(-1), kind="stable")


#: Pairs are searched among the top ``m`` cells of :func:`flip_priority`, for each ``m`` in turn.
PAIR_WINDOWS = (32, 64, 128)


def perturb_once(
    prop: Property, a: np.ndarray, flips: int, rng: np.random.Generator, distinct: _Distinct
) -> tuple[np.ndarray, int] | None:
    """A new relation at Hamming distance 1 or 2 from positive ``a`` that violates ``prop``, or None.

    ``flips`` is the preferred distance; the other one is used when the preferred one has no (new) violation.
    """
    n = a.shape[0]
    cells = n * n
    flat = a.reshape(-1)

    def first_new(candidates: np.ndarray) -> np.ndarray | None:
        for k in rng.permutation(len(candidates)):
            if distinct.add(candidates[k]):
                return candidates[k]
        return None

    def singles() -> np.ndarray | None:
        batch = np.repeat(flat[None], cells, axis=0)
        batch[np.arange(cells), np.arange(cells)] ^= True
        batch = batch.reshape(cells, n, n)
        return first_new(batch[~prop(batch)])

    def pairs() -> np.ndarray | None:
        order = flip_priority(a, rng)
        done = 0
        for window in PAIR_WINDOWS:
            top = order[: min(window, cells)]
            ii, jj = np.triu_indices(len(top), k=1)
            fresh = jj >= done  # pairs not tried in a smaller window
            ii, jj = top[ii[fresh]], top[jj[fresh]]
            if len(ii):
                batch = np.repeat(flat[None], len(ii), axis=0)
                rows = np.arange(len(ii))
                batch[rows, ii] ^= True
                batch[rows, jj] ^= True
                batch = batch.reshape(-1, n, n)
                found = first_new(batch[~prop(batch)])
                if found is not None:
                    return found
            done = len(top)
            if done == cells:
                break
        return None

    tries = (singles, pairs) if flips == 1 else (pairs, singles)
    for attempt, distance in zip(tries, (flips, 3 - flips), strict=True):
        found = attempt()
        if found is not None:
            return found, distance
    return None


def generate(
    canonical: dict[str, Any], rng: np.random.Generator, progress: Progress | None = None
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The arrays (see the module docstring) and statistics of the dataset of ``canonical``."""
    prop = get_property(canonical["property"])
    n, half = canonical["n"], canonical["graphs"] // 2
    distinct = _Distinct("positives", canonical, canonical["graphs"])
    positives = draw_positives(prop, n, half, rng, distinct, progress)
    source = np.full(2 * half, -1, dtype=np.int64)
    flips = np.zeros(2 * half, dtype=np.uint8)
    resampled = 0
    distinct.what = "negatives"
    if canonical["family"] == "random":
        if canonical["negatives"] == "random":
            negatives = random_negatives(prop, n, half, rng, distinct)
        else:
            density = np.array([p.mean() for p in positives])
            negatives = solver_negatives(prop, n, half, density, rng, distinct)
    else:
        negatives = []
        with RelationSampler(prop.name, n) as sampler:
            k = 0
            while k < half:
                found = perturb_once(prop, positives[k], 1 + int(rng.random() < 0.5), rng, distinct)
                if found is None:
                    # No violating flip within 2 cells: replace the positive instead of keeping it unpaired.
                    resampled += 1
                    distinct.what = "positives"
                    while True:
                        fresh = sampler.sample(rng)
                        if distinct.add(fresh):
                            break
                    _recheck(prop, fresh, True)
                    positives[k] = fresh
                    distinct.what = "negatives"
                    continue
                neg, distance = found
                _recheck(prop, neg, False)
                negatives.append(neg)
                source[half + k] = k
                flips[half + k] = distance
                k += 1
                if progress and k % 500 == 0:
                    progress(half + k, 2 * half)
    adjacency = np.stack(positives + negatives)
    label = np.concatenate([np.ones(half, np.uint8), np.zeros(half, np.uint8)])
    order = rng.permutation(2 * half)
    where = np.empty_like(order)
    where[order] = np.arange(2 * half)  # where[old index] = new index
    source = np.where(source >= 0, where[np.maximum(source, 0)], -1)[order].astype(np.int32)
    density = adjacency.reshape(2 * half, -1).mean(axis=1)
    stats = {
        "graphs": 2 * half,
        "positives": half,
        "negatives": half,
        "draws": distinct.draws,
        "resampled": resampled,
        "one_flip": int((flips == 1).sum()),
        "two_flips": int((flips == 2).sum()),
        "density_positive": round(float(density[:half].mean()), 4),
        "density_negative": round(float(density[half:].mean()), 4),
        "density_accuracy": round(density_accuracy(density, label), 4),
    }
    if progress:
        progress(2 * half, 2 * half)
    arrays = {"bits": pack(adjacency[order]), "label": label[order], "source": source, "flips": flips[order]}
    return arrays, stats


def density_accuracy(density: np.ndarray, label: np.ndarray) -> float:
    """Best accuracy of a one-threshold classifier on edge density (either direction): 0.5 = density says nothing.

    ``density`` and ``label`` are ``[G]``; the threshold is chosen on the same graphs (in-sample, an upper bound).
    """
    order = np.argsort(density, kind="stable")
    d, y = density[order], label[order].astype(np.int64)
    g = len(y)
    # Predict positive above the cut: correct = negatives below + positives above, at every cut between values.
    neg_below = np.concatenate([[0], np.cumsum(1 - y)])
    pos_above = y.sum() - np.concatenate([[0], np.cumsum(y)])
    valid = np.concatenate([[True], d[1:] != d[:-1], [True]])
    correct = (neg_below + pos_above)[valid]
    best = max(correct.max(), (g - correct).max())
    return float(best) / g
