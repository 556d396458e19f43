"""The sparse products of the fast path (:mod:`engine.models.sparse`) with their gradients written out.

Each is a ``torch.autograd.Function`` over the CSR matrices that :class:`engine.models.sparse.Graph` builds once per
forward pass: :class:`Spmm` multiplies by a matrix and its gradient by the transpose built beforehand, so no
product is ever transposed on the fly; :class:`Attend` aggregates attention heads with the weights as matrix values
and takes their gradient as a sampled dense product (``torch.sparse.sampled_addmm``) on the same pattern, so the
``[edges, heads, channels]`` messages of PyG's path are never built; :class:`Gather` and :class:`Sum` move node
states to the edges and back by products with the incidence matrix (GatedGCN's edge gates); :class:`PairScores`
and :class:`GatedMessages` are GATv2's scores and GatedGCN's messages with their gradients written out. The
attention layers' per-head score sums are one small dense product with a block-diagonal matrix of the attention
vectors, and their heads are aggregated by one product with a block matrix of the pattern per head
(:class:`Heads`), so no per-head slice is copied or stacked.

Under bf16 autocast every sparse product, which has no bf16 kernel on a CPU, runs in fp32 on its input cast up and
returns its result cast back (:func:`sparse_product`), forward and backward, so the matrices are always fp32
(:func:`matrix_dtype`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor


def sparse_product(matrix: Tensor, x: Tensor) -> Tensor:
    """``matrix @ x`` in the matrix's dtype, returned in ``x``'s: under bf16 autocast the node states are bf16,
    while the sparse products (which have no bf16 kernel on a CPU) stay fp32, one cast each way."""
    if x.dtype == matrix.dtype and not torch.is_autocast_enabled(x.device.type):
        return matrix @ x
    with torch.autocast(x.device.type, enabled=False):
        return (matrix @ x.to(matrix.dtype)).to(x.dtype)


def matrix_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype of the sparse matrices for node states of ``dtype``: fp32 for the 16-bit floats of autocast."""
    return torch.float32 if dtype in (torch.bfloat16, torch.float16) else dtype


class Spmm(torch.autograd.Function):
    """``matrix @ x`` whose backward is ``transpose @ grad`` (with the transpose built once, beforehand)."""

    @staticmethod
    def forward(ctx: Any, matrix: Tensor, transpose: Tensor, x: Tensor) -> Tensor:
        ctx.transpose = transpose
        return sparse_product(matrix, x)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[None, None, Tensor]:
        return None, None, sparse_product(ctx.transpose, grad)


@dataclass(frozen=True)
class Heads:
    """A pattern repeated once per attention head as one ``[N * H, N * H]`` CSR matrix: row ``i * H + h`` holds
    row ``i``'s entries at columns ``j * H + h``. Node states ``[N, H, C]`` are then ``[N * H, C]`` as they lie,
    so one product aggregates every head (no per-head slices, transposes or stacking), with ``values[p]`` the
    weight ``alpha[e, h]`` at ``alpha.view(-1)[take[p]]``."""

    crow: Tensor
    col: Tensor
    take: Tensor

    @classmethod
    def build(cls, crow: Tensor, col: Tensor, edge: Tensor, heads: int) -> Heads:
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
class Pattern:
    """Edges sorted by target (CSR rows), with what the transposed product needs: its rows and the edge order."""

    src: Tensor
    dst: Tensor
    crow: Tensor
    crow_t: Tensor
    col_t: Tensor
    order_t: Tensor  # edge positions (in CSR order) sorted by source: the transpose's value order
    _heads: dict[int, tuple[Heads, Heads]] = field(default_factory=dict, compare=False, repr=False)

    def matrix(self, values: Tensor, n: int) -> Tensor:
        return torch.sparse_csr_tensor(self.crow, self.src, values, (n, n), check_invariants=False)

    def per_head(self, heads: int) -> tuple[Heads, Heads]:
        """The pattern once per head as one block matrix, and its transpose (built once per head count)."""
        if heads not in self._heads:
            edges = torch.arange(self.src.shape[0], device=self.src.device)
            self._heads[heads] = (
                Heads.build(self.crow, self.src, edges, heads),
                Heads.build(self.crow_t, self.col_t, self.order_t, heads),
            )
        return self._heads[heads]

    def matrix_t(self, values: Tensor, n: int) -> Tensor:
        return torch.sparse_csr_tensor(self.crow_t, self.col_t, values[self.order_t], (n, n), check_invariants=False)

    def incidence(self, end: str, n: int, dtype: torch.dtype) -> Tensor:
        """The ``[n, E]`` 0/1 matrix of which edges start (``end="src"``) or end (``"dst"``) at each node: the
        sum over edges that a gather's backward is (:class:`Gather`)."""
        crow, cols = (self.crow_t, self.order_t) if end == "src" else (self.crow, self.positions)
        ones = torch.ones(cols.shape[0], dtype=dtype, device=cols.device)
        return torch.sparse_csr_tensor(crow, cols, ones, (n, cols.shape[0]), check_invariants=False)

    @property
    def positions(self) -> Tensor:
        return torch.arange(self.dst.shape[0], device=self.dst.device)


class Sum(torch.autograd.Function):
    """``out[i] = sum of x[e]`` over the edges ``e`` into node ``i`` (``x [E, C]`` in pattern order): one product
    with the ``[N, E]`` incidence matrix, whose backward gathers the gradient of each edge's target."""

    @staticmethod
    def forward(ctx: Any, pattern: Pattern, n: int, x: Tensor) -> Tensor:
        ctx.pattern = pattern
        return sparse_product(pattern.incidence("dst", n, matrix_dtype(x.dtype)), x)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[None, None, Tensor]:
        return None, None, grad.index_select(0, ctx.pattern.dst)


def crow_of(rows: Tensor, n: int) -> Tensor:
    crow = torch.zeros(n + 1, dtype=rows.dtype, device=rows.device)
    torch.cumsum(torch.bincount(rows, minlength=n), 0, out=crow[1:])
    return crow


class Attend(torch.autograd.Function):
    """``out[:, h] = A(alpha[:, h]) @ x[:, h]`` per head: ``alpha [E, H]`` in pattern order, ``x [N, H, C]``; all
    heads in one product with the block matrix of :meth:`Pattern.per_head`."""

    @staticmethod
    def forward(ctx: Any, pattern: Pattern, alpha: Tensor, x: Tensor) -> Tensor:
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


class Gather(torch.autograd.Function):
    """``x[pattern.src]`` or ``x[pattern.dst]`` (``x [N, ...]``), whose backward sums the edges' gradients into
    their nodes by one sparse product with the incidence matrix, instead of the serial accumulating
    ``index_put_`` that advanced indexing's backward is on a CPU (a third of a GATv2 step)."""

    @staticmethod
    def forward(ctx: Any, pattern: Pattern, end: str, x: Tensor) -> Tensor:
        ctx.pattern, ctx.end, ctx.shape = pattern, end, x.shape
        return x.index_select(0, pattern.src if end == "src" else pattern.dst)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[None, None, Tensor]:
        pattern: Pattern = ctx.pattern
        incidence = pattern.incidence(ctx.end, ctx.shape[0], matrix_dtype(grad.dtype))
        return None, None, sparse_product(incidence, grad.reshape(grad.shape[0], -1)).view(ctx.shape)


class PairScores(torch.autograd.Function):
    """GATv2's scores ``LeakyReLU(x_l[src] + x_r[dst]) @ att`` (``x [N, H * C]``, ``att [H * C, H]`` the
    block-diagonal matrix of :func:`_per_head`) -> ``[E, H]``, with one ``[E, H * C]`` tensor made and kept:
    the sum and the activation are computed in place, and the backward writes the activation's gradient in fp32
    straight away, which both ends' incidence products then read (autograd's own makes three such tensors
    forward and casts the gradient once per end)."""

    @staticmethod
    def forward(ctx: Any, pattern: Pattern, x_l: Tensor, x_r: Tensor, att: Tensor, slope: float) -> Tensor:
        edges = x_l.index_select(0, pattern.src)
        edges += x_r.index_select(0, pattern.dst)
        activated = F.leaky_relu_(edges, slope)
        ctx.pattern, ctx.slope, ctx.dtypes = pattern, slope, (x_l.dtype, x_r.dtype)
        ctx.n = x_l.shape[0]
        ctx.save_for_backward(activated, att)
        return activated @ att

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[None, Tensor, Tensor, Tensor, None]:
        pattern: Pattern = ctx.pattern
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


class GatedMessages(torch.autograd.Function):
    """GatedGCN's aggregation ``out_i = sum over edges j -> i of sigmoid(k_i + q_j) * v_j`` (``k, q, v [N, C]``):
    the gate is made in place on the gathered keys, the messages are written in fp32 for the incidence product
    that sums them, and the backward writes its two edge gradients in fp32 for the products that sum them back
    (autograd's own path keeps five ``[E, C]`` tensors and casts three of them under bf16)."""

    @staticmethod
    def forward(ctx: Any, pattern: Pattern, k: Tensor, q: Tensor, v: Tensor) -> Tensor:
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
        pattern: Pattern = ctx.pattern
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


def csr_matrix(rows: Tensor, cols: Tensor, values: Tensor, n: int) -> Tensor:
    """A CSR ``n x n`` matrix from coordinates (any order; repeated coordinates add up, as messages do)."""
    order = torch.argsort(rows, stable=True)
    counts = torch.bincount(rows, minlength=n)
    crow = torch.zeros(n + 1, dtype=rows.dtype, device=rows.device)
    torch.cumsum(counts, 0, out=crow[1:])
    return torch.sparse_csr_tensor(crow, cols[order], values[order], (n, n), check_invariants=False)
