"""Memory needs, checked before anything large is allocated.

Every family says what its runs need at their peak (:class:`MemoryNeed`, from the spec alone: the alignment pairs'
estimate, with what a model's layers save per node and per edge, is :mod:`engine.alignment.memory`'s); a plan that
cannot fit in the machine's memory is refused in one line with the estimate and the machine's total, before minutes
are spent generating, and the scheduler starts a worker only while the estimates of the running ones and its own
fit in the machine's memory.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from engine.errors import GaptuiError
from engine.tasks.registry import family


def human(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1024 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TB"


#: ``GAPTUI_MALLOC=default`` leaves glibc's allocator as it is (see :func:`tune_allocator`).
ENV_MALLOC = "GAPTUI_MALLOC"


def tune_allocator() -> bool:
    """Keep freed blocks of glibc's heap for reuse instead of handing them back to the system; True when set.

    A training step allocates and frees the same few large tensors (the messages ``[edges, heads, channels]`` of
    an attention layer: 58 MB for 100 pairs of ER(100, 8)). glibc serves blocks above its mmap threshold (at most
    32 MB) with a fresh ``mmap`` each time and gives them back on ``free``, so every step pays the page faults of
    zeroing that memory again: a GATv2 forward and backward of 200 graphs took 3.5 times as long as one of 100.
    Serving every block from the heap (``M_MMAP_MAX = 0``), growing it 256 MB at a time and trimming it only above
    1 GB free makes those steps 1.6-2.2x faster (GATv2 1.19 -> 0.54 s, GatedGCN 0.59 -> 0.36 s) and leaves the
    others as they were; the process keeps up to 1 GB of freed memory for its next step. A no-op off glibc and
    when ``GAPTUI_MALLOC=default``. The workers and the dry run's calibration call it when they start.
    """
    if os.environ.get(ENV_MALLOC, "") == "default" or not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl and others: no mallopt
        return False
    m_trim_threshold, m_top_pad, m_mmap_max = -1, -2, -4
    return bool(mallopt(m_mmap_max, 0) and mallopt(m_top_pad, 256 << 20) and mallopt(m_trim_threshold, 1 << 30))


#: ``GAPTUI_DENORMALS=keep`` leaves subnormal floats as they are (see :func:`flush_denormals`).
ENV_DENORMALS = "GAPTUI_DENORMALS"


def flush_denormals() -> bool:
    """Treat subnormal floats (below 1.2e-38 in float32) as zero on this CPU; True when set.

    The gradient of the row softmax holds many of them once training sharpens the similarities (``exp(-90)`` is
    subnormal), and x86 cores take a microcode assist for every subnormal operand: the backward ``bmm`` of a
    step of 100 pairs took 17 ms on average instead of 1-2 ms (150 ms when its input is all subnormal). Flushing
    them changes values below 1.2e-38 only. The flag is per thread and threads copy it when they are created, so
    it must be set before torch starts its thread pool: workers and the dry run's calibration call it first
    thing. A no-op on CPUs without the flag (``torch.set_flush_denormal`` says so) and when
    ``GAPTUI_DENORMALS=keep``.
    """
    if os.environ.get(ENV_DENORMALS, "") == "keep":
        return False
    import torch

    return bool(torch.set_flush_denormal(True))


def machine_memory() -> int | None:
    """Total physical memory in bytes (None where the platform does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


@dataclass(frozen=True)
class MemoryNeed:
    """What one run (or the dataset it reads) needs at its peak: ``what`` names it (``gcn on er``), ``kind`` is the
    kind of dataset (the dry run shows the peak per kind), ``need`` the bytes, ``detail`` what they are made of and
    ``hint`` what to lower; runs with the same ``key`` need the same memory."""

    what: str
    kind: str
    need: int
    detail: str
    hint: str
    key: str

    def check(self) -> None:
        """Refuse (GaptuiError, one line) when this machine cannot hold it (:func:`refuse_over_memory`)."""
        refuse_over_memory(self.what, self.need, self.detail, self.hint)

    def line(self) -> str:
        total = machine_memory()
        return f"memory: {self.what}: peak about {human(self.need)} ({self.detail})" + (
            f" of {human(total)}" if total else ""
        )


def memory_needs(specs: Iterable[Any]) -> list[MemoryNeed]:
    """The distinct memory needs of ``specs`` (each family's :meth:`~engine.cost.CostModel.memory`), in order.

    A run's need does not depend on its seed (sizes, not draws): runs of one cell (:meth:`TaskSpec.seedless`) are
    asked once."""
    out: dict[str, MemoryNeed] = {}
    asked: set[tuple[str, str]] = set()
    for spec in specs:
        cell = (spec.task, spec.seedless())
        if cell in asked:
            continue
        asked.add(cell)
        need = family(spec.task).costs.memory(spec)
        if need is not None:
            out.setdefault(f"{spec.task}:{need.key}", need)
    return list(out.values())


def check_memory(specs: Iterable[Any]) -> list[MemoryNeed]:
    """Refuse the first of ``specs``' needs this machine cannot hold (one line: the run or dataset, the estimate
    and the limit), before any work; returns the needs."""
    needs = memory_needs(specs)
    for need in needs:
        need.check()
    return needs


def peaks_by_kind(needs: Iterable[MemoryNeed]) -> dict[str, MemoryNeed]:
    """The largest need of each dataset kind (what the dry run summarises)."""
    out: dict[str, MemoryNeed] = {}
    for need in needs:
        if need.kind not in out or need.need > out[need.kind].need:
            out[need.kind] = need
    return out


def refuse_over_memory(what: str, need: float, detail: str, hint: str) -> None:
    """Refuse work whose estimate ``need`` (bytes) exceeds this machine's memory, before any of it is done: one
    line with the estimate, what it is made of (``detail``), the machine's total and what to lower (``hint``).
    Every family and source calls it with its own estimate; a no-op where the platform does not say its total."""
    total = machine_memory()
    if total is None or need <= total:
        return
    raise GaptuiError(
        f"{what} needs about {human(need)} of memory ({detail}) but this machine has {human(total)}; {hint}"
    )


#: Bytes a trainable parameter holds while it trains: its value, its gradient and two Adam moments (float32).
PARAM_BYTES = 16


def check_parameters(what: str, params: int, hint: str) -> None:
    """Refuse (one line) a model whose declared size (``params`` trainable parameters, worked out from its layers and
    width before anything is built) cannot train in this machine's memory."""
    refuse_over_memory(
        what, params * PARAM_BYTES, f"about {params:,} trainable parameters, their gradients and optimiser state", hint
    )


def check_layers_fit(what: str, layers: int, budget: int) -> None:
    """Refuse (one line) more ``layers`` than a budget of ``budget`` parameters can hold (each layer holds at least
    one), before the width search builds a model of that depth."""
    if layers > budget:
        raise GaptuiError(
            f"{what}: layers = {layers:,} is more than a budget of {budget:,} parameters can hold (each layer holds "
            "at least one); lower layers or raise the budget"
        )


#: Work estimated to take longer than this (a week) is refused before it starts.
MAX_SECONDS = 7 * 24 * 3600


def refuse_over_time(what: str, seconds: float, detail: str, hint: str, bound: float = MAX_SECONDS) -> None:
    """Refuse work estimated to run longer than ``bound`` seconds, in one line with the estimate and the bound."""
    if seconds <= bound:
        return
    raise GaptuiError(
        f"{what} would take about {seconds / 3600:,.0f} hours ({detail}), more than the {bound / 3600:,.0f} hours "
        f"gaptui starts without asking; {hint}"
    )
