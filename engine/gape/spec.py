"""GapeSpec: one downstream run of GAPE (a molecule dataset, a positional encoding, a transformer, a seed).

Defaults follow the graph alignment paper's Table F.6 (AQSOL column): 12 layers, 8 heads, dropout 0.1, max lr
5e-4, weight decay 1e-4, batch 512, one-cycle schedule with 75 warm-up steps, about 195k parameters. The ``gape``
preset sets the ZINC and PCQM4Mv2 columns per dataset.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from engine.errors import GaptuiError
from engine.gape.data import MoleculeSpec
from engine.gape.pe import PESpec, parse_pe
from engine.tasks.spec import TaskSpec


@dataclass(frozen=True)
class GapeSpec(TaskSpec):
    """One downstream regression run. ``dataset`` is a molecule dataset ``{base, params, seed}``; ``pe`` a
    positional encoding name (:func:`engine.gape.pe.parse_pe`); ``seed`` seeds training (initialisation, batch
    order, ``r-lap`` flips)."""

    dataset: dict[str, Any]
    pe: str = "none"
    task: str = "gape"
    lap_k: int = 8
    rwpe_steps: int = 20
    layers: int = 12
    heads: int = 8
    dropout: float = 0.1
    budget: int = 195_000
    epochs: int = 100
    #: Total optimiser steps (Table F.6 counts steps); when set, the epochs are as many as these steps need.
    steps: int | None = None
    batch_size: int = 512
    lr: float = 5e-4
    warmup_steps: int = 75
    weight_decay: float = 1e-4
    eval_every: int = 1
    #: ``auto``, ``fp32`` or ``bf16`` (the forward pass under autocast; :func:`engine.hardware.resolve_precision`).
    precision: str = "auto"
    seed: int = 0
    device: str = "auto"
    datasets_dir: str | None = None
    data_root: str | None = None
    runs_dir: str | None = None
    #: Where or how the run executes, not what it computes: left out of the hash.
    PLACEMENT: ClassVar[tuple[str, ...]] = ("device", "datasets_dir", "data_root", "runs_dir")
    #: Options added after runs were recorded, with the value those runs had.
    HASHED_WHEN_SET: ClassVar[dict[str, Any]] = {"precision": "auto"}

    @classmethod
    def from_dict(cls, raw: Any, where: str = "gape spec") -> GapeSpec:
        return super().from_dict(raw, where)  # type: ignore[no-any-return]

    def molecule_spec(self) -> MoleculeSpec:
        return MoleculeSpec.from_dict(self.dataset, "dataset")

    def pe_spec(self) -> PESpec:
        return parse_pe(self.pe)

    def validate(self, where: str = "gape spec") -> None:
        if self.task != "gape":
            raise GaptuiError(f"{where}: task '{self.task}' is not gape")
        molecules = self.molecule_spec()
        molecules.canonical()
        self.pe_spec()
        from engine.gape.data import check_source_fits

        # the molecules, and an encoding of every atom as wide as the longest of the Laplacian and random-walk ones
        per_atom = 2 * 4 * max(self.lap_k, self.rwpe_steps)
        check_source_fits(molecules.base, molecules.params, "molecule dataset", per_node=per_atom)
        for key, low in (
            ("lap_k", 1),
            ("rwpe_steps", 1),
            ("layers", 1),
            ("heads", 1),
            ("budget", 1),
            ("epochs", 1),
            ("batch_size", 1),
            ("eval_every", 1),
            ("warmup_steps", 0),
        ):
            if getattr(self, key) < low:
                raise GaptuiError(f"{where}: {key} = {getattr(self, key)} must be >= {low}")
        from engine.memory import check_layers_fit

        check_layers_fit(where, self.layers, self.budget)
        if self.seed < 0:
            raise GaptuiError(f"{where}: seed = {self.seed} must be >= 0")
        if self.steps is not None and self.steps < 1:
            raise GaptuiError(f"{where}: steps = {self.steps} must be >= 1")
        if not 0 <= self.dropout < 1:
            raise GaptuiError(f"{where}: dropout = {self.dropout} must be in [0, 1)")
        if not self.lr > 0 or self.weight_decay < 0:
            raise GaptuiError(f"{where}: lr must be > 0 and weight_decay >= 0 (got {self.lr}, {self.weight_decay})")
        self.run_options().check(where)

    def canonical(self) -> dict[str, Any]:
        """What the run computes, resolved, without placement fields. Options an encoding ignores are dropped,
        so ``none`` with ``lap_k = 4`` and with ``lap_k = 8`` are one run."""
        out = super().canonical()
        out["dataset"] = self.molecule_spec().canonical()
        pe = self.pe_spec()
        out["pe"] = pe.name
        if pe.kind not in ("lap", "abs-lap", "r-lap"):
            out.pop("lap_k")
        if pe.kind not in ("rwpe", "gape+rwpe"):
            out.pop("rwpe_steps")
        if self.steps is not None:
            out.pop("epochs")  # derived from the steps
        return out

    def epochs_for(self, n_train: int) -> int:
        """Epochs of the run: :attr:`epochs`, or as many as :attr:`steps` optimiser steps need over ``n_train``."""
        if self.steps is None:
            return self.epochs
        return -(-self.steps // -(-n_train // self.batch_size))
