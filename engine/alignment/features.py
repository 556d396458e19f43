"""Node inputs of the alignment task: the run option ``features``, parsed, computed and cached.

``features`` is one part or several joined by ``+``:

==============  ======  =================================================================================
part            width   input of each node
==============  ======  =================================================================================
``degree``      2       ``(1, log(1 + degree))``
``ones``        1       ``1``
``rwpe:K``      K       random-walk return probabilities ``[(D^-1 A)^k]_ii``, ``k = 1 .. K`` (PyG's
                        ``AddRandomWalkPE``; an isolated node has 0)
``lap:K``       K       the ``K`` eigenvectors of ``I - D^-1/2 A D^-1/2`` of smallest eigenvalue after the
                        first (PyG's ``AddLaplacianEigenvectorPE``), zero columns when the graph has ``<= K``
                        nodes; signs fixed by a permutation-equivariant rule, flipped at random in training
==============  ======  =================================================================================

At most one of ``degree`` and ``ones`` (the *base* part, computed from the batch's edges as before), each
positional kind at most once, ``1 <= K <=`` :data:`MAX_K`. The model's input is the base part followed by the
positional parts in the order written; the canonical form (:attr:`Features.text`) writes the base part first, so
``rwpe:16+degree`` and ``degree+rwpe:16`` are one run.

**Per graph.** The positional parts of a node are a function of its own graph alone: for a pair ``(G, H)``
they are computed from ``G``'s edges and, separately, from ``H``'s (computing them from the pair would leak the
planted correspondence). Graphs are the simple undirected graphs of their edges (self loops dropped).

**How.** One dense eigendecomposition per graph, batched over graphs of equal size through
:func:`torch.linalg.eigh` in float64: ``S = D^-1/2 A D^-1/2 = V diag(mu) V^T`` gives both parts, since
``D^-1 A`` is similar to ``S`` by a diagonal matrix (equal diagonals of every power) so
``[(D^-1 A)^k]_ii = sum_j V_ij^2 mu_j^k``, and ``L = I - S`` has the eigenvalues ``1 - mu`` and the same
eigenvectors. The values are stored as float32.

**Signs.** Each eigenvector's sign is fixed as the Laplacian baseline fixes it (:mod:`engine.laplacian`): its
first clearly non-zero odd power sum ``sum_i v_i^p``, ``p = 3, 5, 7, 9``, is positive, else its first entry of
largest magnitude. During training every ``lap`` eigenvector of every graph (``G`` and ``H`` apart) is flipped
with probability 1/2 at each step, drawn from a generator seeded by (run seed, epoch, step), so a resumed run
replays them (:func:`sign_flips`); evaluation and GAPE embeddings use the stored signs.

**Cache.** The positional arrays of a split of a cached dataset live next to its files, in
``<dataset>/positional/<split>-<kind><K>-<hash>/`` (``g.npy`` and ``h.npy``, float32 ``[nodes, K]``, and
``meta.json``), entries of the fingerprinted store (:mod:`engine.cache`) keyed by :data:`POSITIONAL_VERSION`,
the dataset's id, the split's recorded fingerprints and the part; written atomically, checked when read,
computed again when missing or not matching.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from engine.errors import GaptuiError, did_you_mean
from engine.typed import ascii_count

if TYPE_CHECKING:  # torch is imported where it computes: parsing a spec (the CLI, the TUI) needs none
    import torch

#: Base parts (no ``:K``) and their widths.
FEATURES = {"degree": 2, "ones": 1}
#: Positional parts (``kind:K``).
POSITIONAL = ("rwpe", "lap")
KINDS = (*FEATURES, *POSITIONAL)
#: The largest ``K`` of a positional part.
MAX_K = 64
#: Bump when a positional computation changes: cached arrays of an older version are then never read.
POSITIONAL_VERSION = 1
EXPECTED = f"expected degree, ones, rwpe:K or lap:K (K in 1..{MAX_K}) joined by +, e.g. degree+rwpe:16"

#: Odd power sums tried, in order, to fix the sign of an eigenvector (as engine.laplacian).
_SIGN_MOMENTS = (3, 5, 7, 9)
_SIGN_TOL = 1e-6
#: Bytes of one dense float64 stack of graphs decomposed at once (a few such stacks are alive at a time).
_CHUNK_BYTES = 32 << 20


@dataclass(frozen=True)
class Part:
    """One part of ``features``: a base kind (``k = 0``) or a positional kind with its ``K``."""

    kind: str
    k: int = 0

    @property
    def text(self) -> str:
        return f"{self.kind}:{self.k}" if self.kind in POSITIONAL else self.kind

    @property
    def dim(self) -> int:
        return self.k if self.kind in POSITIONAL else FEATURES[self.kind]


@dataclass(frozen=True)
class Features:
    """A parsed ``features`` value: the base part (``degree``, ``ones`` or None) and the positional parts."""

    base: str | None
    positional: tuple[Part, ...] = ()

    @property
    def parts(self) -> tuple[Part, ...]:
        return ((Part(self.base),) if self.base else ()) + self.positional

    @property
    def text(self) -> str:
        """The canonical form: the base part first, then the positional parts as written."""
        return "+".join(p.text for p in self.parts)

    @property
    def base_dim(self) -> int:
        return FEATURES[self.base] if self.base else 0

    @property
    def positional_dim(self) -> int:
        return sum(p.k for p in self.positional)

    @property
    def dim(self) -> int:
        """The model's ``in_dim``."""
        return self.base_dim + self.positional_dim

    @property
    def flipped(self) -> np.ndarray:
        """Bool ``[positional_dim]``: the columns of the positional block that are eigenvectors (``lap``)."""
        return np.concatenate([np.full(p.k, p.kind == "lap") for p in self.positional] or [np.zeros(0, bool)])

    def __str__(self) -> str:
        return self.text


def parse_features(text: Any, where: str = "features") -> Features:
    """``degree``, ``ones``, ``rwpe:K``, ``lap:K`` or several joined by ``+``; anything else raises one
    :class:`GaptuiError` line naming ``where``, the value and what was expected."""
    if isinstance(text, Features):
        return text
    if not isinstance(text, str):
        raise GaptuiError(f"{where}: features {text!r} is not text; {EXPECTED}")
    return _parse(text, where)


@functools.lru_cache(maxsize=256)
def _parse(text: str, where: str) -> Features:
    def bad(why: str) -> GaptuiError:
        return GaptuiError(f"{where}: features '{text}': {why}; {EXPECTED}")

    base: str | None = None
    positional: list[Part] = []
    seen: set[str] = set()
    raw_parts = text.replace(" ", "").lower().split("+")
    for raw in raw_parts:
        if not raw:
            raise bad("an empty part" if len(raw_parts) > 1 else "empty")
        kind, colon, arg = raw.partition(":")
        if kind not in KINDS:
            raise bad(f"unknown kind '{kind}'{did_you_mean(kind, KINDS)}")
        if kind in seen:
            raise bad(f"'{kind}' appears twice")
        seen.add(kind)
        if kind in FEATURES:
            if colon:
                raise bad(f"'{kind}' takes no :K")
            if base is not None:
                raise bad(f"'{base}' and '{kind}' together (degree already holds the ones column)")
            base = kind
            continue
        if not colon or not arg:
            raise bad(f"'{kind}' needs its K ('{kind}:16')")
        k = ascii_count(arg)
        if k is None:
            raise bad(f"K '{arg}' of '{kind}' is not a whole number")
        if not 1 <= k <= MAX_K:
            raise bad(f"K = {k} of '{kind}' is not in 1..{MAX_K}")
        positional.append(Part(kind, k))
    return Features(base, tuple(positional))


def feature_dim(text: Any, where: str = "features") -> int:
    """The model's ``in_dim`` for ``features``."""
    return parse_features(text, where).dim


def canonical_features(text: Any) -> Any:
    """The canonical form of ``text`` when it parses, else ``text`` unchanged (validation refuses it later)."""
    try:
        return parse_features(text).text
    except GaptuiError:
        return text


# --------------------------------------------------------------------------------------------- computation


def base_features(features: Features | str, edge_index: torch.Tensor, num_nodes: int) -> torch.Tensor:
    """The base part ``[N, 1]`` (ones) or ``[N, 2]`` (``(1, log(1 + degree))``), ``[N, 0]`` without one.

    Why degree is the default: with identical inputs, every aggregator that averages (attention softmax, mean)
    returns identical outputs, so GAT, GATv2 and SAGE could never tell two nodes apart; the degree is the first
    colour of 1-WL and costs nothing. ``ones`` keeps the paper's literal setting for ablations.
    """
    import torch

    base = parse_features(features).base
    ones = torch.ones(num_nodes, 1 if base else 0, device=edge_index.device)
    if base != "degree":
        return ones
    degree = torch.bincount(edge_index[0], minlength=num_nodes).to(ones.dtype)
    return torch.cat([ones, torch.log1p(degree)[:, None]], dim=1)


def _canonical_signs(v: torch.Tensor) -> torch.Tensor:
    """Flip the eigenvectors ``v [c, n, m]`` (columns) by the sign rule of the module docstring."""
    import torch

    sign = torch.zeros(v.shape[0], v.shape[2], dtype=v.dtype)
    for p in _SIGN_MOMENTS:
        moment = (v**p).sum(1)
        scale = (v.abs() ** p).sum(1)
        decided = (sign == 0) & (moment.abs() > _SIGN_TOL * scale)
        sign = torch.where(decided, torch.sign(moment), sign)
    mag = v.abs()
    # The first entry of largest magnitude (up to rounding, so that the entries +-a of a symmetric vector tie).
    top = (mag >= mag.amax(1, keepdim=True) * (1.0 - 1e-9)).to(torch.int8).argmax(1)
    fallback = torch.sign(torch.gather(v, 1, top[:, None, :]))[:, 0, :]
    sign = torch.where(sign == 0, fallback, sign)
    sign = torch.where(sign == 0, torch.ones_like(sign), sign)  # an all-zero (padding) column stays as it is
    return v * sign[:, None, :]


def _dense_adjacency(n: int, ids: np.ndarray, edge_index: np.ndarray, edge_ptr: np.ndarray) -> torch.Tensor:
    """``[len(ids), n, n]`` float64 symmetric 0/1 adjacency of the graphs ``ids`` (all of ``n`` nodes)."""
    import torch

    starts, stops = edge_ptr[ids], edge_ptr[ids + 1]
    lengths = stops - starts
    cols = np.repeat(starts - np.cumsum(lengths) + lengths, lengths) + np.arange(int(lengths.sum()))
    graph = np.repeat(np.arange(ids.size), lengths)
    src, dst = edge_index[0, cols], edge_index[1, cols]
    keep = src != dst
    adj = torch.zeros(ids.size, n, n, dtype=torch.float64)
    g, s, d = (torch.as_tensor(a[keep], dtype=torch.long) for a in (graph, src, dst))
    adj[g, s, d] = 1.0
    adj[g, d, s] = 1.0
    return adj


def _graph_parts(adj: torch.Tensor, parts: Sequence[Part]) -> list[torch.Tensor]:
    """The positional ``parts`` of a stack of graphs ``adj [c, n, n]``: one float64 ``[c, n, K]`` each."""
    import torch

    c, n, _ = adj.shape
    deg = adj.sum(-1)
    inv_sqrt = torch.where(deg > 0, deg.clamp(min=1.0).rsqrt(), torch.zeros_like(deg))
    sym = inv_sqrt[:, :, None] * adj * inv_sqrt[:, None, :]
    mu, vec = torch.linalg.eigh(sym)  # ascending mu: descending Laplacian eigenvalues 1 - mu
    out = []
    for part in parts:
        if part.kind == "rwpe":
            powers = mu[:, :, None] ** torch.arange(1, part.k + 1, dtype=mu.dtype)
            out.append(torch.bmm(vec * vec, powers).clamp(min=0.0))
        else:
            keep = min(part.k, n - 1)
            pe = torch.zeros(c, n, part.k, dtype=torch.float64)
            if keep > 0:
                # Laplacian order: the last columns of vec, reversed; the first (eigenvalue 0) is dropped.
                lap = vec[:, :, n - 2 - torch.arange(keep)]
                pe[:, :, :keep] = _canonical_signs(lap)
            out.append(pe)
    return out


def positional_parts(
    parts: Sequence[Part], num_nodes: np.ndarray, edge_index: np.ndarray, edge_ptr: np.ndarray
) -> list[np.ndarray]:
    """The positional ``parts`` of a list of graphs, each float32 ``[sum(num_nodes), K]`` (rows in graph order).

    ``num_nodes [G]``; ``edge_index [2, E]`` local node ids per graph, both directions of each edge (one suffices);
    graph ``g``'s edges are columns ``edge_ptr[g]:edge_ptr[g + 1]``. Each graph's rows depend on its own edges only.
    """
    num_nodes = np.asarray(num_nodes, dtype=np.int64)
    edge_index = np.asarray(edge_index, dtype=np.int64).reshape(2, -1)
    edge_ptr = np.asarray(edge_ptr, dtype=np.int64)
    node_ptr = np.concatenate([[0], np.cumsum(num_nodes)]).astype(np.int64)
    out = [np.zeros((int(node_ptr[-1]), p.k), dtype=np.float32) for p in parts]
    if not parts or not num_nodes.size:
        return out
    for n in np.unique(num_nodes).tolist():
        if n == 0:
            continue
        same = np.flatnonzero(num_nodes == n)
        per_chunk = max(1, _CHUNK_BYTES // (8 * n * n))
        for lo in range(0, same.size, per_chunk):
            ids = same[lo : lo + per_chunk]
            values = _graph_parts(_dense_adjacency(n, ids, edge_index, edge_ptr), parts)
            rows = (node_ptr[ids][:, None] + np.arange(n)).reshape(-1)
            for dest, value in zip(out, values, strict=True):
                dest[rows] = value.reshape(ids.size * n, -1).numpy()
    return out


def positional_encoding(
    features: Features | str, num_nodes: np.ndarray, edge_index: np.ndarray, edge_ptr: np.ndarray
) -> np.ndarray:
    """The positional block of ``features`` for a list of graphs (see :func:`positional_parts`), float32
    ``[sum(num_nodes), positional_dim]``, its parts side by side in order."""
    parts = parse_features(features).positional
    values = positional_parts(parts, num_nodes, edge_index, edge_ptr)
    if not values:
        return np.zeros((int(np.sum(num_nodes)), 0), dtype=np.float32)
    return np.concatenate(values, axis=1) if len(values) > 1 else values[0]


def batch_positional(
    features: Features | str, edge_index: torch.Tensor, batch: torch.Tensor | None, num_nodes: int
) -> torch.Tensor:
    """The positional block of a batch of graphs given as a PyG batch (``batch`` maps nodes to graphs, each
    graph's nodes contiguous; None: one graph), computed on the CPU from each graph's own edges."""
    import torch

    features = parse_features(features)
    if not features.positional:
        return torch.zeros(num_nodes, 0, device=edge_index.device)
    b = np.zeros(num_nodes, np.int64) if batch is None else batch.detach().cpu().numpy().astype(np.int64)
    ei = edge_index.detach().cpu().numpy().astype(np.int64)
    graphs = int(b.max()) + 1 if b.size else 0
    counts = np.bincount(b, minlength=graphs)
    node_ptr = np.concatenate([[0], np.cumsum(counts)])
    of_edge = b[ei[0]] if ei.size else np.zeros(0, np.int64)
    order = np.argsort(of_edge, kind="stable")
    local = ei[:, order] - node_ptr[of_edge[order]]
    edge_ptr = np.concatenate([[0], np.cumsum(np.bincount(of_edge, minlength=graphs))])
    values = positional_encoding(features, counts, local, edge_ptr)
    return torch.as_tensor(values, device=edge_index.device)


def model_inputs(
    features: Features | str,
    edge_index: torch.Tensor,
    num_nodes: int,
    positional: torch.Tensor | None = None,
    flips: torch.Tensor | None = None,
    batch: torch.Tensor | None = None,
) -> torch.Tensor:
    """The model's input ``[num_nodes, dim]``: the base part from ``edge_index``, then the positional block
    (``positional``, or computed now from the graphs of ``batch``), times ``flips`` ``[num_nodes, P]`` when
    given."""
    import torch

    features = parse_features(features)
    x = base_features(features, edge_index, num_nodes)
    if not features.positional:
        return x
    if positional is None:
        positional = batch_positional(features, edge_index, batch, num_nodes)
    if positional.shape != (num_nodes, features.positional_dim):
        raise GaptuiError(
            f"features '{features.text}': positional inputs of shape {tuple(positional.shape)}, expected "
            f"{(num_nodes, features.positional_dim)}"
        )
    if flips is not None:
        positional = positional * flips
    return torch.cat([x, positional.to(x.dtype)], dim=1)


def flip_seed(seed: int, epoch: int, step: int) -> int:
    """The seed of the sign flips of optimiser step ``step`` (0-based, over the run) in epoch ``epoch``."""
    return int(np.random.SeedSequence([int(seed), int(epoch), int(step), 0x1A9]).generate_state(1, np.uint64)[0])


def sign_flips(
    features: Features | str, graphs: int, seed: int, epoch: int, step: int, device: Any = "cpu"
) -> torch.Tensor | None:
    """``[graphs, positional_dim]`` of +-1: an independent random sign per graph and per ``lap`` eigenvector (1 for
    every other column), a pure function of (seed, epoch, step); None when ``features`` has no ``lap`` part."""
    import torch

    features = parse_features(features)
    flipped = torch.as_tensor(features.flipped)
    if not bool(flipped.any()):
        return None
    gen = torch.Generator().manual_seed(flip_seed(seed, epoch, step))
    bits = torch.randint(0, 2, (graphs, int(flipped.sum())), generator=gen)
    out = torch.ones(graphs, features.positional_dim)
    out[:, flipped] = 1.0 - 2.0 * bits.to(out.dtype)
    return out.to(device)


# --------------------------------------------------------------------------------------------- pairs and cache


@dataclass(frozen=True)
class PairPositional:
    """The positional block of a split: float32 ``[total nodes, P]`` for the ``G`` side and the ``H`` side."""

    g: np.ndarray
    h: np.ndarray


def split_parts(split: Any, parts: Sequence[Part]) -> list[tuple[np.ndarray, np.ndarray]]:
    """``(G side, H side)`` of each of ``parts`` for a :class:`~engine.pairs.PairSplit`, each side from its own
    graphs' edges."""
    g = positional_parts(parts, split.num_nodes, split.edge_index_g, split.edge_ptr_g)
    h = positional_parts(parts, split.num_nodes, split.edge_index_h, split.edge_ptr_h)
    return list(zip(g, h, strict=True))


def _join(features: Features, values: Sequence[tuple[np.ndarray, np.ndarray]]) -> PairPositional:
    def side(i: int) -> np.ndarray:
        arrays = [v[i] for v in values]
        return np.ascontiguousarray(np.concatenate(arrays, axis=1) if len(arrays) > 1 else arrays[0])

    return PairPositional(side(0), side(1))


def pair_positional(split: Any, features: Features | str) -> PairPositional | None:
    """The positional block of ``split`` computed now (no cache); None when ``features`` has no positional part."""
    features = parse_features(features)
    if not features.positional:
        return None
    return _join(features, split_parts(split, features.positional))


def cached_positional(
    split: Any,
    features: Features | str,
    folder: Path,
    key: dict[str, Any],
    log: Callable[[str], None] | None = None,
) -> PairPositional | None:
    """The positional block of ``split``, each part read from its cache entry under ``folder``
    (``<split>-<kind><K>-<hash>``, hashed over :data:`POSITIONAL_VERSION`, ``key`` and the part) or computed
    (all missing parts in one pass) and cached. ``key`` must identify the split's content (dataset id, split
    name, fingerprints); a cache that cannot be written is left out with one log line."""
    from engine.cache import content_digest, open_entry, write_entry

    features = parse_features(features)
    if not features.positional:
        return None
    rows = int(np.sum(split.num_nodes))
    say = log or (lambda _line: None)
    found: dict[Part, tuple[np.ndarray, np.ndarray]] = {}
    entries: dict[Part, tuple[Path, dict[str, Any]]] = {}
    stale: set[Part] = set()  # an entry that passed its check but is not this part's: replaced
    for part in features.positional:
        spec = {"version": POSITIONAL_VERSION, **key, "part": part.text}
        final = Path(folder) / f"{key.get('split', 'split')}-{part.kind}{part.k}-{content_digest(spec)[:12]}"
        entries[part] = (final, spec)
        meta = open_entry(final, "cached positional inputs", required=("spec", "shape"), files=("g.npy", "h.npy"))
        if meta is None:
            continue
        try:
            g, h = (np.load(final / name, allow_pickle=False) for name in ("g.npy", "h.npy"))
        except (OSError, ValueError, EOFError):
            g = h = np.zeros(0, np.float32)
        if meta["spec"] == spec and g.shape == h.shape == (rows, part.k) and g.dtype == h.dtype == np.float32:
            found[part] = (g, h)
        else:
            stale.add(part)
    missing = [p for p in features.positional if p not in found]
    if missing:
        started = time.perf_counter()
        computed = split_parts(split, missing)
        seconds = time.perf_counter() - started
        say(f"positional inputs {'+'.join(p.text for p in missing)} computed in {seconds:.1f} s ({rows:,} nodes x 2)")
        for part, (g, h) in zip(missing, computed, strict=True):
            found[part] = (g, h)
            final, spec = entries[part]

            def write(tmp: Path, g: np.ndarray = g, h: np.ndarray = h, spec: dict[str, Any] = spec) -> dict[str, Any]:
                np.save(tmp / "g.npy", g, allow_pickle=False)
                np.save(tmp / "h.npy", h, allow_pickle=False)
                return {"spec": spec, "shape": list(g.shape), "seconds": round(seconds, 3)}

            try:
                write_entry(final, write, force=part in stale)
            except OSError as exc:
                say(f"positional inputs {part.text} not cached ({exc.strerror or exc}); computed again next time")
    return _join(features, [found[p] for p in features.positional])


def dataset_positional(
    dataset: Any, name: str, split: Any, features: Features | str, log: Callable[[str], None] | None = None
) -> PairPositional | None:
    """The positional block of split ``name`` (``split``, loaded) of the cached dataset ``dataset``
    (:class:`engine.alignment.datasets.Dataset`), cached in ``<dataset>/positional/``."""
    from engine.pairs import ARRAYS

    recorded = dataset.meta.get("files") or {}
    prints = {a: (recorded.get(f"{name}/{a}.npy") or {}).get("sha256") for a in ARRAYS}
    if not all(prints.values()):
        import hashlib

        # No recorded fingerprints (cannot happen for a verified dataset): key by the arrays themselves.
        prints = {a: hashlib.sha256(np.ascontiguousarray(getattr(split, a), np.int64)).hexdigest() for a in ARRAYS}
    key = {"dataset": dataset.id, "split": name, "arrays": prints}
    return cached_positional(split, features, Path(dataset.path) / "positional", key, log)


def prepare_positional(dataset_spec: Any, features: str, datasets_dir: Path, raw_root: Path | None = None) -> None:
    """Build (or check) the cached positional inputs ``features`` of both splits of the dataset of
    ``dataset_spec``, so that the runs find them cached: the manager does it before its workers start, and a cache
    that fails its check is moved aside with its ``warning:`` on the manager's own output."""
    from engine.alignment.datasets import SPLITS, build_dataset

    dataset, _built = build_dataset(dataset_spec, datasets_dir, raw_root)
    for name in SPLITS:
        dataset_positional(dataset, name, dataset.split(name), features)
