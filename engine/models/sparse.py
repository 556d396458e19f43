"""The fast path of the built-in models: sparse-matrix aggregation and dense per-graph normalisation.

PyG's message passing gathers a state per edge (``index_select``) and scatters it back (``scatter_add_``), and
autograd does the same in reverse; on a CPU these four passes over the edges are most of a training step. The
layers whose aggregation is a fixed linear map of the node states (``GCNConv``, ``GINConv`` and
``GatedGraphConv``, each with PyG's defaults) compute exactly the same function as one sparse-matrix product:

    GCNConv:          c = Â (h W) + b,              Â = D^-1/2 (A + I) D^-1/2,  D = in-degree + 1
    GINConv:          c = MLP((1 + eps) h + A h)
    GatedGraphConv:   m = A (h W_s),  h = GRU(m, h)  for each step s
    TAGConv:          c = sum_{k=0..K} (Ã^k h) W_k + b,  Ã = D^-1/2 A D^-1/2 (no self-loops, D = in-degree)
    SGConv:           c = (Â^K h) W + b
    GINEConv:         c = MLP((1 + eps) h + A ReLU(h + e))  for one edge embedding e shared by every edge

with ``A[i, j] = 1`` for each edge ``j -> i``. :class:`Graph` builds ``A`` (and ``Â`` when asked) once per forward
pass as CSR matrices, shared by every layer, together with their transposes, which the backward pass multiplies
by (:class:`Spmm`), so no product is ever transposed on the fly.

Attention layers (``GATConv``, ``GATv2Conv``) weigh each edge per head; their aggregation ``out_h = A(alpha_h)
x_h`` is one sparse product per head with the attention weights as the matrix values, and the gradient of those
weights is a sampled dense product (``torch.sparse.sampled_addmm``) on the same pattern (:class:`Attend`), so
the ``[edges, heads, channels]`` messages of PyG's path are never built (GATv2 still builds them once, for its
scores). The edge-gated ``ResGatedGraphConv`` (GatedGCN) computes its gates per edge as PyG does, but gathers
the node states to the edges and sums the messages back by products with the incidence matrix (:class:`Gather`,
:class:`Sum`).

The autograd functions of these products are :mod:`engine.models.sparse_autograd`'s; PyG's ``GraphNorm`` per
graph, over a ``[graphs, nodes, width]`` view where the graphs allow it, is :mod:`engine.models.graph_norm`'s.

Edges that hold both directions of each edge sorted by (source, target), as alignment pairs do, arrive as a PyG
``EdgeIndex`` flagged sorted and undirected (:meth:`Graph.from_edge_index`): the adjacency is then its own
transpose, its CSR rows are the edge list as it lies, and self-loops are inserted by counting, so a forward pass
builds its matrices without sorting (11-18 ms of a 150 ms step of 100 pairs otherwise).

The results equal PyG's layers up to float rounding (the order of the sums differs); ``sparse=False`` on a model
keeps PyG's own path everywhere.

Under bf16 autocast (the ``precision = "bf16"`` run option) the node states, linear layers and per-edge messages
are bf16; every sparse product, which has no bf16 kernel on a CPU, runs in fp32 on its input cast up and returns
its result cast back (:func:`sparse_product`), forward and backward, so the matrices are always fp32
(:func:`matrix_dtype`). The attention layers' per-head score sums ``(x * att).sum(-1)`` are one small dense
product with a block-diagonal matrix of the attention vectors, and their heads are aggregated by one product with
a block matrix of the pattern per head (:class:`Heads`), so no per-head slice is copied or stacked.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric import EdgeIndex
from torch_geometric.nn import (
    GATConv,
    GatedGraphConv,
    GATv2Conv,
    GCNConv,
    GINConv,
    GINEConv,
    ResGatedGraphConv,
    SGConv,
    TAGConv,
)
from torch_geometric.utils import softmax

from engine.models.sparse_autograd import (
    Attend,
    GatedMessages,
    Gather,
    PairScores,
    Pattern,
    Spmm,
    Sum,
    crow_of,
    csr_matrix,
    matrix_dtype,
)

# torch marks its CSR layout as beta; the products used here are the stable core (mm, sampled_addmm).
warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta", category=UserWarning)


@dataclass
class Graph:
    """One forward pass's structure: the edges, the graph of each node and the matrices built from them.

    ``edge_index`` is ``[2, E]`` (``source, target``: PyG's ``source_to_target`` flow), ``batch`` ``[N]`` or
    ``None`` (one graph). Matrices are built on first use and cached for the other layers of the pass.
    """

    edge_index: Tensor
    batch: Tensor | None
    num_nodes: int
    #: The edges are known to hold both directions of each edge, sorted by (source, target), as alignment pairs
    #: do (:meth:`from_edge_index` reads it from a PyG ``EdgeIndex``): every matrix is then built without a sort.
    undirected_sorted: bool = False
    _cache: dict[str, Any] = field(default_factory=dict, repr=False)
    _size: int | None | bool = field(default=False, repr=False)

    @classmethod
    def from_edge_index(cls, edge_index: Tensor, batch: Tensor | None, num_nodes: int) -> Graph:
        """A graph of ``edge_index``, a plain tensor or a PyG ``EdgeIndex`` whose flags say sorted by row and
        undirected (what :func:`engine.alignment.training.similarity` passes for alignment pairs); the layers get a
        plain tensor either way."""
        if isinstance(edge_index, EdgeIndex):
            known = bool(edge_index.is_sorted_by_row and edge_index.is_undirected)
            return cls(edge_index.as_tensor(), batch, num_nodes, undirected_sorted=known)
        return cls(edge_index, batch, num_nodes)

    def _with_loops(self) -> tuple[Tensor, Tensor, Tensor, Tensor] | None:
        """For sorted undirected edges without self-loops: ``(rows, cols, crow, loop_pos)`` of the edges with one
        self-loop per node inserted in sorted place, found by counting instead of sorting; None otherwise."""
        if not self.undirected_sorted:
            return None
        if "with_loops" not in self._cache:
            src, dst = self.edge_index
            n, edges = self.num_nodes, src.shape[0]
            if bool((src == dst).any()):  # loops to replace: the general path does that
                self._cache["with_loops"] = None
                return None
            # Before each edge lie the loops of the rows above it and, in its own row, the loop when the edge's
            # target is past it; each row's loop follows the row's entries below the diagonal.
            counts = torch.bincount(src, minlength=n)
            below = torch.bincount(src[dst < src], minlength=n)
            start = torch.cumsum(counts, 0) - counts
            loop_pos = start + torch.arange(n, device=src.device) + below
            edge_pos = torch.arange(edges, device=src.device) + src + (dst > src)
            rows = torch.empty(edges + n, dtype=src.dtype, device=src.device)
            cols = torch.empty_like(rows)
            loop = torch.arange(n, device=src.device)
            rows[edge_pos], cols[edge_pos] = src, dst
            rows[loop_pos], cols[loop_pos] = loop, loop
            crow = torch.zeros(n + 1, dtype=src.dtype, device=src.device)
            torch.cumsum(counts + 1, 0, out=crow[1:])
            self._cache["with_loops"] = (rows, cols, crow, loop_pos)
        return self._cache["with_loops"]

    def cached(self, key: Any, build: Callable[[], Any]) -> Any:
        """``build()``, computed once per pass under ``key`` (structure that every layer of the pass shares)."""
        if key not in self._cache:
            self._cache[key] = build()
        return self._cache[key]

    def slots(self) -> tuple[Tensor, Tensor, Tensor, int]:
        """``(graph, slot, mask, n)`` for a dense ``[graphs, n, ...]`` layout padded to the largest graph: each node's
        graph and place in it (in node order, whatever the order of ``batch``), the ``[graphs, n]`` mask of real
        nodes and ``n``. ``dense[graph, slot] = h`` lays node states out; ``dense[graph, slot]`` reads them back."""

        def build() -> tuple[Tensor, Tensor, Tensor, int]:
            device = self.edge_index.device
            batch = (
                self.batch if self.batch is not None else torch.zeros(self.num_nodes, dtype=torch.long, device=device)
            )
            counts = torch.bincount(batch)
            order = torch.argsort(batch, stable=True)
            starts = torch.cumsum(counts, 0) - counts
            slot = torch.empty_like(batch)
            slot[order] = torch.arange(batch.shape[0], device=device) - starts[batch[order]]
            n = int(counts.max()) if counts.numel() else 0
            mask = torch.zeros(counts.shape[0], n, dtype=torch.bool, device=device)
            mask[batch, slot] = True
            return batch, slot, mask, n

        return self.cached("slots", build)

    def _pair(self, key: str, values: Tensor, rows: Tensor, cols: Tensor) -> tuple[Tensor, Tensor]:
        if key not in self._cache:
            n = self.num_nodes
            self._cache[key] = (csr_matrix(rows, cols, values, n), csr_matrix(cols, rows, values, n))
        return self._cache[key]

    def adjacency(self, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """``A`` (``A[i, j]`` = number of edges ``j -> i``) and its transpose."""
        src, dst = self.edge_index
        ones = torch.ones(src.shape[0], dtype=dtype, device=src.device)
        if self.undirected_sorted:  # A = A^T, and its rows are the sources: the edge list is its CSR already
            if "adjacency" not in self._cache:
                matrix = torch.sparse_csr_tensor(
                    crow_of(src, self.num_nodes), dst, ones, (self.num_nodes,) * 2, check_invariants=False
                )
                self._cache["adjacency"] = (matrix, matrix)
            return self._cache["adjacency"]
        return self._pair("adjacency", ones, dst, src)

    def adjacency_plus(self, diagonal: Tensor) -> tuple[Tensor, Tensor] | None:
        """``A + diagonal * I`` and its transpose (``diagonal`` a scalar tensor), for sorted undirected edges
        without self-loops (None otherwise): GIN's ``(1 + eps) h + A h`` as one product."""
        loops = self._with_loops()
        if loops is None:
            return None
        key = ("plus", float(diagonal), diagonal.dtype)  # every layer of a GIN with fixed eps shares one matrix
        if key not in self._cache:
            _, cols, crow, loop_pos = loops
            values = torch.ones(cols.shape[0], dtype=diagonal.dtype, device=cols.device)
            values[loop_pos] = diagonal
            matrix = torch.sparse_csr_tensor(crow, cols, values, (self.num_nodes,) * 2, check_invariants=False)
            self._cache[key] = (matrix, matrix)
        return self._cache[key]

    def gcn(self, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """``Â = D^-1/2 (A + I) D^-1/2`` as PyG's ``gcn_norm`` builds it (self-loops of weight 1, in-degree)."""
        loops = self._with_loops()
        if loops is not None and "gcn" not in self._cache:
            rows, cols, crow, _ = loops
            dinv = crow.diff().to(dtype).pow(-0.5)  # degree + 1 (symmetric: in-degree = out-degree)
            matrix = torch.sparse_csr_tensor(
                crow, cols, dinv[rows] * dinv[cols], (self.num_nodes,) * 2, check_invariants=False
            )
            self._cache["gcn"] = (matrix, matrix)
        if "gcn" not in self._cache:
            src, dst = self.edge_index
            keep = src != dst  # existing self-loops are replaced by one of weight 1, as add_remaining_self_loops
            loop = torch.arange(self.num_nodes, device=src.device)
            src, dst = torch.cat([src[keep], loop]), torch.cat([dst[keep], loop])
            deg = torch.bincount(dst, minlength=self.num_nodes).to(dtype)
            dinv = deg.pow(-0.5)
            return self._pair("gcn", dinv[src] * dinv[dst], dst, src)
        return self._cache["gcn"]

    def sym(self, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """``Ã = D^-1/2 A D^-1/2`` without self-loops (``D`` the in-degree; isolated nodes get 0), as PyG's
        ``gcn_norm(add_self_loops=False)`` builds it for ``TAGConv``."""
        if "sym" not in self._cache:
            src, dst = self.edge_index
            deg = torch.bincount(dst, minlength=self.num_nodes).to(dtype)
            dinv = deg.pow(-0.5).masked_fill_(deg == 0, 0.0)
            values = dinv[src] * dinv[dst]
            if self.undirected_sorted:  # symmetric, rows are the sources: the edge list is its CSR already
                matrix = torch.sparse_csr_tensor(
                    crow_of(src, self.num_nodes), dst, values, (self.num_nodes,) * 2, check_invariants=False
                )
                self._cache["sym"] = (matrix, matrix)
            else:
                return self._pair("sym", values, dst, src)
        return self._cache["sym"]

    def loops(self) -> Pattern:
        """The edges with every self-loop replaced by one per node (as the attention layers add them), by target."""
        loops = self._with_loops()
        if loops is not None and "loops" not in self._cache:
            # Sorted by (row, col) and symmetric: read as (target, source), the list is sorted by target.
            rows, cols, crow, _ = loops
            order_t = torch.argsort(cols, stable=True)
            self._cache["loops"] = Pattern(cols, rows, crow, crow, rows[order_t], order_t)
        if "loops" not in self._cache:
            src, dst = self.edge_index
            keep = src != dst
            loop = torch.arange(self.num_nodes, device=src.device)
            src, dst = torch.cat([src[keep], loop]), torch.cat([dst[keep], loop])
            order = torch.argsort(dst, stable=True)
            src, dst = src[order], dst[order]
            order_t = torch.argsort(src, stable=True)
            pattern = Pattern(
                src, dst, crow_of(dst, self.num_nodes), crow_of(src, self.num_nodes), dst[order_t], order_t
            )
            self._cache["loops"] = pattern  # type: ignore[assignment]
        return self._cache["loops"]  # type: ignore[return-value]

    def edges(self) -> Pattern:
        """The edges as they are (no self-loops added), by target: what an edge-gated layer sums over."""
        if "edges" not in self._cache:
            src, dst = self.edge_index
            n = self.num_nodes
            if self.undirected_sorted:  # read as (target, source), the list is sorted by target already
                crow = crow_of(src, n)
                order_t = torch.argsort(dst, stable=True)
                pattern = Pattern(dst, src, crow, crow, src[order_t], order_t)
            else:
                order = torch.argsort(dst, stable=True)
                src, dst = src[order], dst[order]
                order_t = torch.argsort(src, stable=True)
                pattern = Pattern(src, dst, crow_of(dst, n), crow_of(src, n), dst[order_t], order_t)
            self._cache["edges"] = pattern
        return self._cache["edges"]

    def propagate(self, matrices: tuple[Tensor, Tensor], x: Tensor) -> Tensor:
        """``matrices[0] @ x``: by a sparse product, or for bf16 states of small equal graphs by a dense one."""
        blocks = self.dense_blocks(matrices[0], x.dtype)
        if blocks is not None:
            n = blocks.shape[1]
            return torch.bmm(blocks, x.reshape(-1, n, x.shape[-1])).view(x.shape)
        return Spmm.apply(matrices[0], matrices[1], x)

    def dense_blocks(self, matrix: Tensor, dtype: torch.dtype) -> Tensor | None:
        """``matrix`` as its ``[graphs, n, n]`` diagonal blocks in ``dtype`` (built once per pass), when the states
        are 16-bit floats (bf16 autocast), the graphs all have ``n <= DENSE_MAX_NODES`` nodes in order, no
        entry leaves its graph and the device has bf16 units (a GPU, or a CPU with ``amx_bf16``/``avx512_bf16``:
        :func:`engine.hardware.cpu_has_bf16`); None otherwise.

        The sparse products have no bf16 kernel on a CPU: each would cast the states to fp32 and back, two
        passes over them, around a product bound by memory. A batched dense product of the blocks runs on the
        bf16 matrix units instead (``n / degree`` times the arithmetic, at several times the speed), with fp32
        accumulation; 0/1 adjacencies are exact in bf16, GCN's normalised weights are rounded to it, as any dense
        weight is under autocast.
        """
        n = self.graph_size
        if dtype not in (torch.bfloat16, torch.float16) or n is None or not 0 < n <= DENSE_MAX_NODES:
            return None
        if matrix.device.type == "cpu" and not _cpu_bf16():
            return None  # no bf16 units: the dense product would be emulated, slower than the cast sparse one
        key = ("dense", id(matrix), dtype)
        if key not in self._cache:
            crow, col, values = matrix.crow_indices(), matrix.col_indices(), matrix.values()
            rows = torch.repeat_interleave(torch.arange(self.num_nodes, device=col.device), crow.diff())
            blocks = None
            if bool((rows // n == col // n).all()):
                flat = rows * n + col % n  # graph * n * n + row-in-graph * n + column-in-graph
                size = self.num_nodes * n
                dense = torch.zeros(size, dtype=values.dtype, device=values.device).index_add_(0, flat, values)
                blocks = dense.view(-1, n, n).to(dtype)
            self._cache[key] = (matrix, blocks)  # the matrix is kept so that its id is not reused in this pass
        return self._cache[key][1]

    @property
    def graph_size(self) -> int | None:
        """Nodes per graph when every graph has the same number and they lie in order (or there is one graph,
        ``batch=None``), else ``None``."""
        if self._size is False:
            self._size = self.num_nodes if self.batch is None and self.num_nodes else None
            batch = self.batch
            if batch is not None and batch.numel():
                graphs = int(batch[-1]) + 1
                n = self.num_nodes // graphs
                if n * graphs == self.num_nodes:
                    expected = torch.arange(graphs, device=batch.device).repeat_interleave(n)
                    self._size = n if torch.equal(batch, expected) else None
        return self._size  # type: ignore[return-value]


@functools.lru_cache(maxsize=1)
def _cpu_bf16() -> bool:
    from engine.hardware import cpu_has_bf16

    return cpu_has_bf16()


#: Graphs of at most this many nodes (all of one size, in order) are aggregated by dense products of their
#: adjacency blocks when the node states are bf16 (:meth:`Graph.dense_blocks`).
DENSE_MAX_NODES = 128


def _plain(conv: nn.Module, kind: type) -> bool:
    """``conv`` is exactly PyG's ``kind`` with the defaults the sparse formula assumes."""
    if type(conv) is not kind or getattr(conv, "aggr", "add") not in ("add", "sum"):
        return False
    if kind is GCNConv:
        return conv.normalize and conv.add_self_loops and not conv.improved and not conv.cached
    if kind is ResGatedGraphConv:
        return conv.edge_dim is None
    if kind is TAGConv:
        return conv.normalize
    if kind is SGConv:
        return conv.add_self_loops and not conv.cached
    if kind is GINEConv:
        return conv.lin is None
    if kind in (GATConv, GATv2Conv):
        shared = kind is GATv2Conv or conv.lin is not None
        return shared and conv.concat and conv.add_self_loops and conv.edge_dim is None and not conv.dropout
    return True


def _finish_attention(conv: nn.Module, out: Tensor, h: Tensor) -> Tensor:
    out = out.reshape(out.shape[0], -1)
    if conv.res is not None:
        out = out + conv.res(h)
    return out if conv.bias is None else out + conv.bias


def _per_head(att: Tensor) -> Tensor:
    """An attention vector ``[1, H, C]`` as the ``[H * C, H]`` block-diagonal matrix of its heads: a product
    with it is ``(x * att).sum(-1)`` for ``x [N, H, C]`` viewed as ``[N, H * C]``."""
    return torch.block_diag(*att.reshape(att.shape[1], att.shape[2], 1))


def _gat(conv: GATConv, h: Tensor, graph: Graph) -> Tensor:
    x = conv.lin(h).view(-1, conv.heads, conv.out_channels)
    pattern = graph.loops()
    # (x * att).sum(-1) per head, for both ends, as one product with a [H * C, 2H] block-diagonal matrix
    att = torch.cat([_per_head(conv.att_src), _per_head(conv.att_dst)], 1)
    score_src, score_dst = (x.reshape(x.shape[0], -1) @ att.to(x.dtype)).chunk(2, dim=1)
    scores = Gather.apply(pattern, "src", score_src) + Gather.apply(pattern, "dst", score_dst)
    alpha = F.leaky_relu(scores, conv.negative_slope)
    alpha = softmax(alpha, pattern.dst, ptr=pattern.crow, num_nodes=graph.num_nodes)
    return _finish_attention(conv, Attend.apply(pattern, alpha, x), h)


def _gatv2(conv: GATv2Conv, h: Tensor, graph: Graph) -> Tensor:
    x_l = conv.lin_l(h).view(-1, conv.heads, conv.out_channels)
    x_r = x_l if conv.share_weights else conv.lin_r(h).view(-1, conv.heads, conv.out_channels)
    pattern = graph.loops()
    att = _per_head(conv.att)
    scores = PairScores.apply(pattern, x_l.flatten(1), x_r.flatten(1), att.to(x_l.dtype), conv.negative_slope)
    alpha = softmax(scores, pattern.dst, ptr=pattern.crow, num_nodes=graph.num_nodes)
    return _finish_attention(conv, Attend.apply(pattern, alpha, x_l), h)


def _gated(conv: ResGatedGraphConv, h: Tensor, graph: Graph) -> Tensor:
    """``ResGatedGraphConv``: ``out_i = W_s h_i + b + sum_j act(W_k h_i + W_q h_j) * W_v h_j``, its three edge
    gathers summed back by incidence products and its edge sum one more (PyG: accumulating scatters)."""
    pattern = graph.edges()
    # The four maps of h in one product, and the query and value gathered to the edges together.
    has_skip = conv.lin_skip is not None
    lins = [conv.lin_key, conv.lin_query, conv.lin_value, *([conv.lin_skip] if has_skip else [])]
    weight = torch.cat([lin.weight for lin in lins])
    bias = torch.cat([lin.bias if lin.bias is not None else lin.weight.new_zeros(lin.weight.shape[0]) for lin in lins])
    width = conv.lin_key.weight.shape[0]
    k, q, v, *skip = F.linear(h, weight, bias).split(width, dim=1)
    if isinstance(conv.act, nn.Sigmoid):
        out = GatedMessages.apply(pattern, k, q, v)
    else:
        gate = conv.act(Gather.apply(pattern, "dst", k) + Gather.apply(pattern, "src", q))
        out = Sum.apply(pattern, graph.num_nodes, gate * Gather.apply(pattern, "src", v))
    if skip:
        out = out + skip[0]
    return out if conv.bias is None else out + conv.bias


def _tag(conv: TAGConv, h: Tensor, graph: Graph) -> Tensor:
    """``TAGConv``: the ``K + 1`` hops ``Ã^k h`` side by side, through all ``K + 1`` weights in one product."""
    matrices = graph.sym(matrix_dtype(h.dtype))
    hops = [h]
    for _ in range(conv.K):
        hops.append(graph.propagate(matrices, hops[-1]))
    weight = torch.cat([lin.weight for lin in conv.lins], dim=1)  # [out, (K + 1) * in]
    out = F.linear(torch.cat(hops, dim=-1), weight)
    return out if conv.bias is None else out + conv.bias


def convolve(conv: nn.Module, h: Tensor, graph: Graph, edge_attr: Tensor | None = None) -> Tensor:
    """``conv(h, edge_index)``, by a sparse product when ``conv`` is one of the linear-aggregation layers.

    ``edge_attr`` is for ``GINEConv`` only: one ``[width]`` embedding shared by every edge (graphs without edge
    features), which makes its message ``ReLU(h_j + e)`` a function of the source alone, so ``A`` aggregates it.
    """
    if _plain(conv, GCNConv):
        out = graph.propagate(graph.gcn(matrix_dtype(h.dtype)), conv.lin(h))
        return out if conv.bias is None else out + conv.bias
    if _plain(conv, GINConv):
        dtype = matrix_dtype(h.dtype)
        plus = None if conv.eps.requires_grad else graph.adjacency_plus(1 + conv.eps.to(dtype))
        if plus is not None:
            return conv.nn(graph.propagate(plus, h))
        return conv.nn((1 + conv.eps) * h + graph.propagate(graph.adjacency(dtype), h))
    if _plain(conv, GATConv):
        return _gat(conv, h, graph)
    if _plain(conv, GATv2Conv):
        return _gatv2(conv, h, graph)
    if _plain(conv, ResGatedGraphConv):
        return _gated(conv, h, graph)
    if _plain(conv, GatedGraphConv) and h.shape[-1] == conv.out_channels:
        for weight in conv.weight:
            h = conv.rnn(graph.propagate(graph.adjacency(matrix_dtype(h.dtype)), h @ weight), h)
        return h
    if _plain(conv, TAGConv):
        return _tag(conv, h, graph)
    if _plain(conv, SGConv):
        matrices = graph.gcn(matrix_dtype(h.dtype))
        for _ in range(conv.K):
            h = graph.propagate(matrices, h)
        return conv.lin(h)
    if _plain(conv, GINEConv) and edge_attr is not None and edge_attr.dim() == 1:
        messages = graph.propagate(graph.adjacency(matrix_dtype(h.dtype)), F.relu(h + edge_attr.to(h.dtype)))
        return conv.nn((1 + conv.eps) * h + messages)
    if isinstance(conv, GraphLayer):
        return conv(h, graph, fast=True)
    if edge_attr is not None:
        if edge_attr.dim() == 1:
            edge_attr = edge_attr.expand(graph.edge_index.shape[1], -1)
        return conv(h, graph.edge_index, edge_attr)
    return conv(h, graph.edge_index)


class GraphLayer(nn.Module):
    """A layer that reads the whole :class:`Graph` of a pass (its batch vector, its cached matrices), not only
    ``edge_index``: called as ``layer(h, graph, fast=...)``, with ``fast=False`` for the model's ``sparse=False``
    (PyG's own operations) and ``fast=True`` on the fast path."""

    def forward(self, h: Tensor, graph: Graph, fast: bool = True) -> Tensor:  # pragma: no cover - abstract
        raise NotImplementedError
