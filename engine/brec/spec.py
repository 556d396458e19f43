"""BrecSpec: one run of the ``brec`` family, a model (or an exact WL test) on the pairs of one BREC category.

A trained run goes through the category's pairs one by one (RPC, :mod:`engine.brec.rpc`): a fresh siamese model per
pair, trained contrastively on relabelled copies, then the T^2 test and the reliability check. A ``1-wl`` or
``3-wl`` run is the exact test (:mod:`engine.brec.wl`), training-free. Defaults follow BREC's evaluation code
(``base/test_BREC.py`` of GraphPKU/BREC): 32 relabellings, embeddings of 16 dimensions, 20 epochs of Adam at
learning rate 1e-4 and weight decay 1e-4, batches of 16 graphs, cosine-embedding loss with margin 0, early stop
below a loss of 0.2, threshold 72.34 (alpha 0.05). The model is a zoo model (equal parameter budget, 60,000 as
in the alignment zoo) whose node embeddings are summed per graph.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from engine.brec.data import category
from engine.brec.rpc import STATISTICS, hotelling_threshold
from engine.brec.wl import WL_ROWS
from engine.errors import GaptuiError, did_you_mean
from engine.tasks.spec import TaskSpec

#: How node embeddings become the graph's: ``sum`` (injective on multisets, as GIN's readout) or ``mean``/``max``.
READOUTS = ("sum", "mean", "max")
#: The fields an exact WL run computes from (the rest are training options it does not read).
WL_FIELDS = ("task", "model", "category", "pairs", "data")


@dataclass(frozen=True)
class BrecSpec(TaskSpec):
    """One run: ``model`` (a registered model, ``module.path:Factory``, ``1-wl`` or ``3-wl``) on the first
    ``pairs`` pairs (None: all) of ``category``. ``seed`` seeds the models' initialisation; ``data_seed`` the
    relabellings and which graph of a pair the reliability check copies, so seeds compare models on the same
    copies. ``data``: a folder in BREC's layout instead of the shipped pairs."""

    model: str
    category: str
    task: str = "brec"
    pairs: int | None = None
    data: str | None = None
    features: str = "degree"
    model_kwargs: dict[str, Any] = field(default_factory=dict)
    budget: int = 60_000
    out_dim: int = 16
    readout: str = "sum"
    relabellings: int = 32
    epochs: int = 20
    batch_size: int = 16
    lr: float = 1e-4
    weight_decay: float = 1e-4
    margin: float = 0.0
    loss_threshold: float = 0.2
    alpha: float = 0.05
    threshold: float | None = None
    statistic: str = "reference"
    data_seed: int = 0
    precision: str = "auto"
    seed: int = 0
    device: str = "auto"
    datasets_dir: str | None = None

    #: Options added after runs were recorded, with the value those runs had.
    HASHED_WHEN_SET: ClassVar[dict[str, Any]] = {"precision": "auto"}

    def __post_init__(self) -> None:
        if isinstance(self.model, str) and ":" not in self.model:
            object.__setattr__(self, "model", self.model.lower())
        from engine.alignment.features import canonical_features

        object.__setattr__(self, "features", canonical_features(self.features))
        if isinstance(self.data, str) and self.data:  # workers (and cluster nodes) read it from any folder
            from pathlib import Path

            object.__setattr__(self, "data", str(Path(self.data).expanduser().absolute()))

    @property
    def is_wl(self) -> bool:
        return self.model in WL_ROWS

    def threshold_value(self) -> float:
        """The T^2 threshold: ``threshold``, or Hotelling's quantile for (relabellings, out_dim, alpha)."""
        if self.threshold is not None:
            return float(self.threshold)
        return hotelling_threshold(self.relabellings, self.out_dim, self.alpha)

    def validate(self, where: str = "run spec") -> None:
        if self.task != "brec":
            raise GaptuiError(f"{where}: task '{self.task}' is not brec")
        category(self.category, f"{where}: category")
        if self.pairs is not None and self.pairs < 1:
            raise GaptuiError(f"{where}: pairs = {self.pairs}: expected 1 or more (or none for all)")
        if self.data is not None:
            from engine.brec.data import data_folder

            data_folder(self.data)
        if self.is_wl:
            return
        self._check_model(where)
        for key, low in (("budget", 1), ("out_dim", 1), ("relabellings", 2), ("epochs", 1), ("batch_size", 2)):
            if getattr(self, key) < low:
                raise GaptuiError(f"{where}: {key} = {getattr(self, key)}: expected {low} or more")
        if self.batch_size % 2:
            raise GaptuiError(f"{where}: batch_size = {self.batch_size}: expected an even number (pairs of graphs)")
        if not self.lr > 0 or self.weight_decay < 0 or self.loss_threshold < 0:
            raise GaptuiError(f"{where}: lr must be > 0, weight_decay and loss_threshold >= 0")
        if not -1 <= self.margin <= 1:
            raise GaptuiError(f"{where}: margin = {self.margin}: expected a cosine in [-1, 1]")
        if not 0 < self.alpha < 1:
            raise GaptuiError(f"{where}: alpha = {self.alpha}: expected a level in (0, 1)")
        if self.threshold is not None and not self.threshold > 0:
            raise GaptuiError(f"{where}: threshold = {self.threshold}: expected a T^2 value > 0")
        for key, choices in (("statistic", STATISTICS), ("readout", READOUTS)):
            value = getattr(self, key)
            if value not in choices:
                raise GaptuiError(
                    f"{where}: {key} '{value}' is not one of {', '.join(choices)}{did_you_mean(str(value), choices)}"
                )
        for key in ("seed", "data_seed"):
            if getattr(self, key) < 0:
                raise GaptuiError(f"{where}: {key} = {getattr(self, key)}: expected a seed >= 0")
        try:
            self.threshold_value()
        except GaptuiError as exc:
            raise GaptuiError(f"{where}: {exc}") from None
        self.run_options().check(where)

    def _check_model(self, where: str) -> None:
        from engine.alignment.features import parse_features
        from engine.models import MODELS

        if self.model not in MODELS and ":" not in self.model:
            known = [*MODELS.names(), *WL_ROWS]
            raise GaptuiError(
                f"{where}: model '{self.model}' is not a model{did_you_mean(self.model, known)}; known: "
                f"{', '.join(known)} or module.path:Factory"
            )
        parse_features(self.features, where)

    def canonical(self) -> dict[str, Any]:
        """What the run computes: an exact WL run is its test and its pairs alone; a trained run everything but
        the placement fields (and ``precision`` only when set: :data:`HASHED_WHEN_SET`)."""
        out = super().canonical()
        if self.is_wl:
            return {k: v for k, v in out.items() if k in WL_FIELDS}
        return out

    def model_options(self) -> dict[str, Any]:
        return dict(self.model_kwargs)


def model_label(spec: BrecSpec) -> str:
    """The table row of a run: ``1-wl``/``3-wl``, or the model with its options and positional inputs
    (``graphgps+rwpe:16``) named as the alignment family names its rows, so the two families' rows of one
    architecture match."""
    if spec.is_wl:
        return spec.model
    from engine.alignment.preset import row_label

    return row_label(spec.model, spec.model_kwargs, spec.features)
