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
by (:class:`_Spmm`), so no product is ever transposed on the fly.

Attention layers (``GATConv``, ``GATv2Conv``) weigh each edge per head; their aggregation ``out_h = A(alpha_h)
x_h`` is one sparse product per head with the attention weights as the matrix values, and the gradient of those
weights is a sampled dense product (``torch.sparse.sampled_addmm``) on the same pattern (:class:`_Attend`), so
the ``[edges, heads, channels]`` messages of PyG's path are never built (GATv2 still builds them once, for its
scores). The edge-gated ``ResGatedGraphConv`` (GatedGCN) computes its gates per edge as PyG does, but gathers
the node states to the edges and sums the messages back by products with the incidence matrix (:class:`_Gather`,
:class:`_Sum`).

:func:`graph_norm` is PyG's ``GraphNorm`` per graph; when the graphs of a batch all have the same number of nodes
and lie in order (alignment pairs of a fixed-order base, BFS samples), the per-graph statistics are a mean over
one axis of a ``[graphs, nodes, width]`` view instead of two scatters and two gathers.

Edges that hold both directions of each edge sorted by (source, target), as alignment pairs do, arrive as a PyG
``EdgeIndex`` flagged sorted and undirected (:meth:`Graph.from_edge_index`): the adjacency is then its own
transpose, its CSR rows are the edge list as it lies, and self-loops are inserted by counting, so a forward pass
builds its matrices without sorting (11-18 ms of a 150 ms step of 100 pairs otherwise).

The results equal PyG's layers up to float rounding (the order of the sums differs); ``sparse=False`` on a model
keeps PyG's own path everywhere.

Under bf16 autocast (the ``precision = "bf16"`` run option) the node states, linear layers and per-edge messages
are bf16; every sparse product, which has no bf16 kernel on a CPU, runs in fp32 on its input cast up and returns
its result cast back (:func:`_product`), forward and backward, so the matrices are always fp32
(:func:`matrix_dtype`). The attention layers' per-head score sums ``(x * att).sum(-1)`` are one small dense
product with a block-diagonal matrix of the attention vectors, and their heads are aggregated by one product with
a block matrix of the pattern per head (:class:`_Heads`), so no per-head slice is copied or stacked.
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
    GraphNorm,
    ResGatedGraphConv,
    SGConv,
    TAGConv,
)
from torch_geometric.utils import softmax

# torch marks its CSR layout as beta; the products used here are the stable core (mm, sampled_addmm).
warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta", category=UserWarning)


def _product(matrix: Tensor, x: Tensor) -> Tensor:
    """``matrix @ x`` in the matrix's dtype, returned in ``x``'s: under bf16 autocast the node states are bf16,
    while the sparse products (which have no bf16 kernel on a CPU) stay fp32, one cast each way."""
    if x.dtype == matrix.dtype and not torch.is_autocast_enabled(x.device.type):
        return matrix @ x
    with torch.autocast(x.device.type, enabled=False):
        return (matrix @ x.to(matrix.dtype)).to(x.dtype)


def matrix_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype of the sparse matrices for node states of ``dtype``: fp32 for the 16-bit floats of autocast."""
    return torch.float32 if dtype in (torch.bfloat16, torch.float16) else dtype


class _Spmm(torch.autograd.Function):
    """``matrix @ x`` whose backward is ``transpose @ grad`` (with the transpose built once, beforehand)."""

    @staticmethod
    def forward(ctx: Any, matrix: Tensor, transpose: Tensor, x: Tensor) -> Tensor:
        ctx.transpose = transpose
        return _product(matrix, x)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[None, None, Tensor]:
        return None, None, _product(ctx.transpose, grad)


@dataclass(frozen=True)
class _Heads:
    """A pattern repeated once per attention head as one ``[N * H, N * H]`` CSR matrix: row ``i * H + h`` holds
    row ``i``'s entries at columns ``j * H + h``. Node states ``[N, H, C]`` are then ``[N * H, C]`` as they lie,
    so one product aggregates every head (no per-head slices, transposes or stacking), with ``values[p]`` the
    weight ``alpha[e, h]`` at ``alpha.view(-1)[take[p]]``."""

    crow: Tensor
    col: Tensor
    take: Tensor

    @classmethod
    def build(cls, crow: Tensor, col: Tensor, edge: Tensor, heads: int) -> _Heads:
        """From a CSR pattern (``crow``, ``col``) whose entry ``k`` carries the weights of edge ``edge[k]``."""
        n, nnz = crow.shape[0] - 1, col.shape[0]
        deg = crow.diff()
        row = torch.repeat_interleave(torch.arange(n, device=crow.device), deg)
        head = torch.arange(heads, device=crow.device)
        # entry k of row i, head h, sits at crow[i] * H + h * deg[i] + (k - crow[i])
        pos = ((crow[:-1] * (heads - 1))[row] + torch.arange(nnz, device=crow.device))[:, None] + head * deg[row][
            :, None
        ]
        take = torch.empty(nnz * heads, dtype=crow.dtype, device=crow.device)
        take[pos.reshape(-1)] = (edge[:, None] * heads + head).reshape(-1)
        cols = torch.empty_like(take)
        cols[pos.reshape(-1)] = (col[:, None] * heads + head).reshape(-1)
        rows = torch.cat([(crow[:-1, None] * heads + head * deg[:, None]).reshape(-1), crow[-1:] * heads])
        return cls(rows, cols, take)

    def matrix(self, alpha: Tensor, size: int) -> Tensor:
        """The matrix with the weights ``alpha [E, H]``, for ``size = N * H``."""
        values = alpha.reshape(-1)[self.take]
        return torch.sparse_csr_tensor(self.crow, self.col, values, (size, size), check_invariants=False)


@dataclass(frozen=True)
class _Pattern:
    """Edges sorted by target (CSR rows), with what the transposed product needs: its rows and the edge order."""

    src: Tensor
    dst: Tensor
    crow: Tensor
    crow_t: Tensor
    col_t: Tensor
    order_t: Tensor  # edge positions (in CSR order) sorted by source: the transpose's value order
    _heads: dict[int, tuple[_Heads, _Heads]] = field(default_factory=dict, compare=False, repr=False)

    def matrix(self, values: Tensor, n: int) -> Tensor:
        return torch.sparse_csr_tensor(self.crow, self.src, values, (n, n), check_invariants=False)

    def per_head(self, heads: int) -> tuple[_Heads, _Heads]:
        """The pattern once per head as one block matrix, and its transpose (built once per head count)."""
        if heads not in self._heads:
            edges = torch.arange(self.src.shape[0], device=self.src.device)
            self._heads[heads] = (
                _Heads.build(self.crow, self.src, edges, heads),
                _Heads.build(self.crow_t, self.col_t, self.order_t, heads),
            )
        return self._heads[heads]

    def matrix_t(self, values: Tensor, n: int) -> Tensor:
        return torch.sparse_csr_tensor(self.crow_t, self.col_t, values[self.order_t], (n, n), check_invariants=False)

    def incidence(self, end: str, n: int, dtype: torch.dtype) -> Tensor:
        """The ``[n, E]`` 0/1 matrix of which edges start (``end="src"``) or end (``"dst"``) at each node: the
        sum over edges that a gather's backward is (:class:`_Gather`)."""
        crow, cols = (self.crow_t, self.order_t) if end == "src" else (self.crow, self.positions)
        ones = torch.ones(cols.shape[0], dtype=dtype, device=cols.device)
        return torch.sparse_csr_tensor(crow, cols, ones, (n, cols.shape[0]), check_invariants=False)

    @property
    def positions(self) -> Tensor:
        return torch.arange(self.dst.shape[0], device=self.dst.device)


class _Sum(torch.autograd.Function):
    """``out[i] = sum of x[e]`` over the edges ``e`` into node ``i`` (``x [E, C]`` in pattern order): one product
    with the ``[N, E]`` incidence matrix, whose backward gathers the gradient of each edge's target."""

    @staticmethod
    def forward(ctx: Any, pattern: _Pattern, n: int, x: Tensor) -> Tensor:
        ctx.pattern = pattern
        return _product(pattern.incidence("dst", n, matrix_dtype(x.dtype)), x)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[None, None, Tensor]:
        return None, None, grad.index_select(0, ctx.pattern.dst)


def _crow(rows: Tensor, n: int) -> Tensor:
    crow = torch.zeros(n + 1, dtype=rows.dtype, device=rows.device)
    torch.cumsum(torch.bincount(rows, minlength=n), 0, out=crow[1:])
    return crow


class _Attend(torch.autograd.Function):
    """``out[:, h] = A(alpha[:, h]) @ x[:, h]`` per head: ``alpha [E, H]`` in pattern order, ``x [N, H, C]``; all
    heads in one product with the block matrix of :meth:`_Pattern.per_head`."""

    @staticmethod
    def forward(ctx: Any, pattern: _Pattern, alpha: Tensor, x: Tensor) -> Tensor:
        # The products run in fp32 (no bf16 sparse kernels on a CPU); under autocast, in and out are bf16.
        n, heads, channels = x.shape
        dtype = matrix_dtype(x.dtype)
        flat, weights = x.reshape(n * heads, channels).to(dtype), alpha.to(dtype)
        forward_heads, _ = pattern.per_head(heads)
        with torch.autocast(x.device.type, enabled=False):
            out = forward_heads.matrix(weights, n * heads) @ flat
        ctx.pattern, ctx.dtypes = pattern, (alpha.dtype, x.dtype)
        ctx.save_for_backward(weights, flat)
        return out.view(n, heads, channels).to(x.dtype)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[None, Tensor, Tensor]:
        alpha, flat = ctx.saved_tensors
        heads = alpha.shape[1]
        size, channels = flat.shape
        forward_heads, transposed = ctx.pattern.per_head(heads)
        g = grad.reshape(size, channels).to(flat.dtype)
        pattern = torch.sparse_csr_tensor(
            forward_heads.crow,
            forward_heads.col,
            alpha.new_zeros(forward_heads.col.shape),
            (size, size),
            check_invariants=False,
        )
        sampled = torch.sparse.sampled_addmm(pattern, g, flat.T, beta=0.0).values()
        grad_alpha = torch.empty_like(sampled)
        grad_alpha[forward_heads.take] = sampled
        grad_x = transposed.matrix(alpha, size) @ g
        return None, grad_alpha.view_as(alpha).to(ctx.dtypes[0]), grad_x.view(grad.shape).to(ctx.dtypes[1])


class _Gather(torch.autograd.Function):
    """``x[pattern.src]`` or ``x[pattern.dst]`` (``x [N, ...]``), whose backward sums the edges' gradients into
    their nodes by one sparse product with the incidence matrix, instead of the serial accumulating
    ``index_put_`` that advanced indexing's backward is on a CPU (a third of a GATv2 step)."""

    @staticmethod
    def forward(ctx: Any, pattern: _Pattern, end: str, x: Tensor) -> Tensor:
        ctx.pattern, ctx.end, ctx.shape = pattern, end, x.shape
        return x.index_select(0, pattern.src if end == "src" else pattern.dst)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[None, None, Tensor]:
        pattern: _Pattern = ctx.pattern
        incidence = pattern.incidence(ctx.end, ctx.shape[0], matrix_dtype(grad.dtype))
        return None, None, _product(incidence, grad.reshape(grad.shape[0], -1)).view(ctx.shape)


class _PairScores(torch.autograd.Function):
    """GATv2's scores ``LeakyReLU(x_l[src] + x_r[dst]) @ att`` (``x [N, H * C]``, ``att [H * C, H]`` the
    block-diagonal matrix of :func:`_per_head`) -> ``[E, H]``, with one ``[E, H * C]`` tensor made and kept:
    the sum and the activation are computed in place, and the backward writes the activation's gradient in fp32
    straight away, which both ends' incidence products then read (autograd's own makes three such tensors
    forward and casts the gradient once per end)."""

    @staticmethod
    def forward(ctx: Any, pattern: _Pattern, x_l: Tensor, x_r: Tensor, att: Tensor, slope: float) -> Tensor:
        edges = x_l.index_select(0, pattern.src)
        edges += x_r.index_select(0, pattern.dst)
        activated = F.leaky_relu_(edges, slope)
        ctx.pattern, ctx.slope, ctx.dtypes = pattern, slope, (x_l.dtype, x_r.dtype)
        ctx.n = x_l.shape[0]
        ctx.save_for_backward(activated, att)
        return activated @ att

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[None, Tensor, Tensor, Tensor, None]:
        pattern: _Pattern = ctx.pattern
        activated, att = ctx.saved_tensors
        grad = grad.to(activated.dtype)
        grad_att = (grad.T @ activated).T  # [H, E] @ [E, H * C]: no transposed copy of the [E, H * C] tensor
        dtype = matrix_dtype(activated.dtype)
        grad_edges = torch.empty(activated.shape, dtype=dtype, device=activated.device)
        torch.ops.aten.leaky_relu_backward.grad_input(grad @ att.T, activated, ctx.slope, True, grad_input=grad_edges)
        n = ctx.n
        grad_l = pattern.incidence("src", n, dtype) @ grad_edges
        grad_r = pattern.incidence("dst", n, dtype) @ grad_edges
        return None, grad_l.to(ctx.dtypes[0]), grad_r.to(ctx.dtypes[1]), grad_att, None


class _GatedMessages(torch.autograd.Function):
    """GatedGCN's aggregation ``out_i = sum over edges j -> i of sigmoid(k_i + q_j) * v_j`` (``k, q, v [N, C]``):
    the gate is made in place on the gathered keys, the messages are written in fp32 for the incidence product
    that sums them, and the backward writes its two edge gradients in fp32 for the products that sum them back
    (autograd's own path keeps five ``[E, C]`` tensors and casts three of them under bf16)."""

    @staticmethod
    def forward(ctx: Any, pattern: _Pattern, k: Tensor, q: Tensor, v: Tensor) -> Tensor:
        dtype, n = matrix_dtype(k.dtype), k.shape[0]
        gate = k.index_select(0, pattern.dst)
        gate += q.index_select(0, pattern.src)
        gate.sigmoid_()
        values = v.index_select(0, pattern.src)
        messages = torch.empty(gate.shape, dtype=dtype, device=gate.device)
        torch.mul(gate, values, out=messages)
        ctx.pattern, ctx.dtypes = pattern, (k.dtype, q.dtype, v.dtype)
        ctx.save_for_backward(gate, values)
        with torch.autocast(k.device.type, enabled=False):
            return (pattern.incidence("dst", n, dtype) @ messages).to(k.dtype)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[None, Tensor, Tensor, Tensor]:
        pattern: _Pattern = ctx.pattern
        gate, values = ctx.saved_tensors
        n, dtype = grad.shape[0], matrix_dtype(gate.dtype)
        edge_grad = grad.to(gate.dtype).index_select(0, pattern.dst)
        grad_values = torch.empty(gate.shape, dtype=dtype, device=gate.device)
        torch.mul(edge_grad, gate, out=grad_values)
        grad_logits = torch.empty_like(grad_values)
        torch.ops.aten.sigmoid_backward.grad_input(edge_grad * values, gate, grad_input=grad_logits)
        to_src, to_dst = pattern.incidence("src", n, dtype), pattern.incidence("dst", n, dtype)
        k_dtype, q_dtype, v_dtype = ctx.dtypes
        return (
            None,
            (to_dst @ grad_logits).to(k_dtype),
            (to_src @ grad_logits).to(q_dtype),
            (to_src @ grad_values).to(v_dtype),
        )


def _csr(rows: Tensor, cols: Tensor, values: Tensor, n: int) -> Tensor:
    """A CSR ``n x n`` matrix from coordinates (any order; repeated coordinates add up, as messages do)."""
    order = torch.argsort(rows, stable=True)
    counts = torch.bincount(rows, minlength=n)
    crow = torch.zeros(n + 1, dtype=rows.dtype, device=rows.device)
    torch.cumsum(counts, 0, out=crow[1:])
    return torch.sparse_csr_tensor(crow, cols[order], values[order], (n, n), check_invariants=False)


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
            self._cache[key] = (_csr(rows, cols, values, n), _csr(cols, rows, values, n))
        return self._cache[key]

    def adjacency(self, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """``A`` (``A[i, j]`` = number of edges ``j -> i``) and its transpose."""
        src, dst = self.edge_index
        ones = torch.ones(src.shape[0], dtype=dtype, device=src.device)
        if self.undirected_sorted:  # A = A^T, and its rows are the sources: the edge list is its CSR already
            if "adjacency" not in self._cache:
                matrix = torch.sparse_csr_tensor(
                    _crow(src, self.num_nodes), dst, ones, (self.num_nodes,) * 2, check_invariants=False
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
                    _crow(src, self.num_nodes), dst, values, (self.num_nodes,) * 2, check_invariants=False
                )
                self._cache["sym"] = (matrix, matrix)
            else:
                return self._pair("sym", values, dst, src)
        return self._cache["sym"]

    def loops(self) -> _Pattern:
        """The edges with every self-loop replaced by one per node (as the attention layers add them), by target."""
        loops = self._with_loops()
        if loops is not None and "loops" not in self._cache:
            # Sorted by (row, col) and symmetric: read as (target, source), the list is sorted by target.
            rows, cols, crow, _ = loops
            order_t = torch.argsort(cols, stable=True)
            self._cache["loops"] = _Pattern(cols, rows, crow, crow, rows[order_t], order_t)
        if "loops" not in self._cache:
            src, dst = self.edge_index
            keep = src != dst
            loop = torch.arange(self.num_nodes, device=src.device)
            src, dst = torch.cat([src[keep], loop]), torch.cat([dst[keep], loop])
            order = torch.argsort(dst, stable=True)
            src, dst = src[order], dst[order]
            order_t = torch.argsort(src, stable=True)
            pattern = _Pattern(src, dst, _crow(dst, self.num_nodes), _crow(src, self.num_nodes), dst[order_t], order_t)
            self._cache["loops"] = pattern  # type: ignore[assignment]
        return self._cache["loops"]  # type: ignore[return-value]

    def edges(self) -> _Pattern:
        """The edges as they are (no self-loops added), by target: what an edge-gated layer sums over."""
        if "edges" not in self._cache:
            src, dst = self.edge_index
            n = self.num_nodes
            if self.undirected_sorted:  # read as (target, source), the list is sorted by target already
                crow = _crow(src, n)
                order_t = torch.argsort(dst, stable=True)
                pattern = _Pattern(dst, src, crow, crow, src[order_t], order_t)
            else:
                order = torch.argsort(dst, stable=True)
                src, dst = src[order], dst[order]
                order_t = torch.argsort(src, stable=True)
                pattern = _Pattern(src, dst, _crow(dst, n), _crow(src, n), dst[order_t], order_t)
            self._cache["edges"] = pattern
        return self._cache["edges"]

    def propagate(self, matrices: tuple[Tensor, Tensor], x: Tensor) -> Tensor:
        """``matrices[0] @ x``: by a sparse product, or for bf16 states of small equal graphs by a dense one."""
        blocks = self.dense_blocks(matrices[0], x.dtype)
        if blocks is not None:
            n = blocks.shape[1]
            return torch.bmm(blocks, x.reshape(-1, n, x.shape[-1])).view(x.shape)
        return _Spmm.apply(matrices[0], matrices[1], x)

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
    scores = _Gather.apply(pattern, "src", score_src) + _Gather.apply(pattern, "dst", score_dst)
    alpha = F.leaky_relu(scores, conv.negative_slope)
    alpha = softmax(alpha, pattern.dst, ptr=pattern.crow, num_nodes=graph.num_nodes)
    return _finish_attention(conv, _Attend.apply(pattern, alpha, x), h)


def _gatv2(conv: GATv2Conv, h: Tensor, graph: Graph) -> Tensor:
    x_l = conv.lin_l(h).view(-1, conv.heads, conv.out_channels)
    x_r = x_l if conv.share_weights else conv.lin_r(h).view(-1, conv.heads, conv.out_channels)
    pattern = graph.loops()
    att = _per_head(conv.att)
    scores = _PairScores.apply(pattern, x_l.flatten(1), x_r.flatten(1), att.to(x_l.dtype), conv.negative_slope)
    alpha = softmax(scores, pattern.dst, ptr=pattern.crow, num_nodes=graph.num_nodes)
    return _finish_attention(conv, _Attend.apply(pattern, alpha, x_l), h)


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
        out = _GatedMessages.apply(pattern, k, q, v)
    else:
        gate = conv.act(_Gather.apply(pattern, "dst", k) + _Gather.apply(pattern, "src", q))
        out = _Sum.apply(pattern, graph.num_nodes, gate * _Gather.apply(pattern, "src", v))
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


def graph_norm(norm: GraphNorm, x: Tensor, graph: Graph) -> Tensor:
    """PyG's ``GraphNorm(x, batch)``, over a ``[graphs, nodes, width]`` view when the graphs allow it."""
    n = graph.graph_size
    if n is None:
        return norm(x, graph.batch)
    h = x.view(-1, n, x.shape[-1])
    return _DenseGraphNorm.apply(h, norm.weight, norm.bias, norm.mean_scale, norm.eps).view_as(x)


def _node_sum(x: Tensor) -> Tensor:
    """``x [G, n, C]`` summed over the nodes, ``[G, 1, C]``, in fp32 or ``x``'s wider dtype. A bf16 sum accumulates
    in fp32 and is rounded once, at the end; ``sum(dtype=float32)`` would first copy all of ``x`` to fp32."""
    return x.sum(1, keepdim=True).to(matrix_dtype(x.dtype))


class _DenseGraphNorm(torch.autograd.Function):
    r"""GraphNorm over ``h [graphs, nodes, width]`` with its gradient written out, so that a pass over the nodes is
    made only where one is needed (4 forward, 4 backward; autograd's own takes twice as many) and the node-sized
    tensors stay in ``h``'s dtype (bf16 under autocast), the per-graph statistics in fp32 (or ``h``'s, if wider):

    .. math::
        \mu = \operatorname{mean}_n h, \quad o = h - \alpha \mu, \quad r = (\operatorname{mean}_n o^2 +
        \epsilon)^{-1/2}, \quad y = o \, w r + b.
    """

    @staticmethod
    def forward(ctx: Any, h: Tensor, weight: Tensor, bias: Tensor, alpha: Tensor, eps: float) -> Tensor:
        mean = _node_sum(h).div_(h.shape[1])  # [G, 1, C]
        out = h - (alpha * mean).to(h.dtype)
        square = _node_sum(torch.square(out)).div_(h.shape[1])
        rstd = torch.rsqrt(square + eps)
        scale = weight * rstd
        ctx.save_for_backward(out, mean, rstd, weight, alpha)
        return torch.addcmul(bias.to(h.dtype), out, scale.to(h.dtype))

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, None]:
        out, mean, rstd, weight, alpha = ctx.saved_tensors
        n = out.shape[1]
        grad_sum = _node_sum(grad)  # B = sum_n dy
        grad_out_sum = _node_sum(grad * out)  # A = sum_n dy * o
        scale = weight * rstd
        k = weight * grad_out_sum * rstd.pow(3) / n  # d/do through r: -k o
        # sum_n of d/do, with sum_n o = n (1 - alpha) mean: what the mean subtraction takes back
        go_sum = scale * grad_sum - k * (n * (1 - alpha) * mean)
        grad_h = torch.addcmul((-alpha * go_sum / n).to(grad.dtype), grad, scale.to(grad.dtype))
        grad_h.addcmul_(out, (-k).to(grad.dtype))
        grad_weight = (grad_out_sum * rstd).sum((0, 1))
        grad_bias = grad_sum.sum((0, 1))
        grad_alpha = -(go_sum * mean).sum((0, 1))
        return grad_h, grad_weight, grad_bias, grad_alpha, None
