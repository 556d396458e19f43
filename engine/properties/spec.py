"""The ``properties`` family's spec: one cell (property, pooling, dimension, seed) of the study and its options.

A ``robustness`` cell depends on the ``generalisation`` cell with the same property, pooling, seed and options and
tests that cell's trained model on GraphPerturb (the two dimensions share one training).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from engine.errors import GaptuiError
from engine.properties.options import TrainOptions
from engine.tasks.spec import TaskSpec


@dataclass(frozen=True, kw_only=True)
class CellOptions(TrainOptions):
    """The options of a study cell: training (:class:`~engine.properties.training.TrainOptions`, the study's
    defaults) and data: ``graphs`` per dataset, ``sizes`` (keep the first K sizes of the property: train at the
    base, test above; default all 11), ``negatives`` (GraphRandom negatives, ``solver`` or ``random``),
    ``data_seed`` and ``published`` (a folder in the published CSV layout instead of generated data)."""

    graphs: int = 10_000
    sizes: int | None = None
    negatives: str | None = None
    data_seed: int = 0
    published: str | None = None
    #: The options of the training strategies (:mod:`engine.properties.strategies`), each read by one strategy.
    finetune_share: float = 0.5
    progressive_k: int = 2
    adversarial_share: float = 0.5


@dataclass(frozen=True, kw_only=True)
class PropertySpec(TaskSpec, CellOptions):
    """One cell of the property study: (property, pooling, dimension, seed) and its :class:`CellOptions`."""

    property: str
    pooling: str
    dimension: str
    task: str = "properties"
    seed: int = 0
    strategy: str = "standard"
    device: str = "auto"
    datasets_dir: str | None = None

    #: Options added after runs were recorded, with the value those runs had.
    HASHED_WHEN_SET: ClassVar[dict[str, Any]] = {"precision": "auto", "strategy": "standard"}

    def validate(self, where: str = "run spec") -> None:
        from engine.properties.datasets import PropertyDatasetSpec, check_builds_fit
        from engine.properties.definitions import get_property
        from engine.properties.poolings import POOLINGS
        from engine.properties.strategies import check_options, check_strategy, dimensions_for
        from engine.properties.study import cell_datasets, check_dimension

        for key in ("seed", "data_seed"):
            if getattr(self, key) < 0:
                raise GaptuiError(f"{where}: {key} = {getattr(self, key)} must be >= 0")
        if self.sizes is not None and self.sizes < 2:
            raise GaptuiError(f"{where}: sizes = {self.sizes}: a cell needs the base size and one larger size")
        check_options(self.finetune_share, self.progressive_k, self.adversarial_share, where)
        try:
            get_property(self.property)
            check_dimension(self.dimension)
            check_strategy(self.strategy)
            if self.dimension not in dimensions_for(self.strategy):
                raise GaptuiError(
                    f"strategy {self.strategy} has no {self.dimension} dimension (its model trains on GraphPerturb "
                    "too, so GraphPerturb is no unseen shift); dimensions: " + ", ".join(dimensions_for(self.strategy))
                )
            if self.strategy == "finetune_perturb" and self.epochs < 2:
                raise GaptuiError(f"finetune_perturb needs epochs >= 2, got {self.epochs}")
            if self.strategy == "progressive" and self.published is not None:
                raise GaptuiError("progressive trains on k + 1 sizes; a published folder has one training size")
            if self.pooling not in POOLINGS:
                POOLINGS.get(self.pooling)
            PropertyDatasetSpec(self.property, 1, "random", self.graphs, self.negatives, self.data_seed).canonical()
            cells = cell_datasets(
                self.property, self.dimension, self.graphs, self.sizes, self.negatives, self.data_seed,
                self.strategy_options(),
            )  # fmt: skip
            check_builds_fit([ds.canonical() for ds in cells], workers=1)
        except GaptuiError as exc:
            raise GaptuiError(f"{where}: {exc}") from None
        for key in ("epochs", "batch_size", "hidden", "layers", "cycle_k"):
            if getattr(self, key) < 1:
                raise GaptuiError(f"{where}: {key} = {getattr(self, key)} must be >= 1")
        from engine.memory import check_parameters

        # each GIN layer holds a (3 hidden x hidden) and a (hidden x hidden) weight
        check_parameters(f"{where}: hidden = {self.hidden}, layers = {self.layers}",
                         4 * self.layers * self.hidden**2, "lower hidden or layers")  # fmt: skip
        if not self.lr > 0:
            raise GaptuiError(f"{where}: lr = {self.lr} must be > 0")
        self.run_options().check(where)
        if self.published is not None and not Path(self.published).is_dir():
            raise GaptuiError(f"{where}: published = {self.published!r} is not a folder")

    def canonical(self) -> dict[str, Any]:
        from engine.properties.datasets import DEFAULT_NEGATIVES

        out = super().canonical()
        out["negatives"] = self.negatives or DEFAULT_NEGATIVES
        from engine.properties.strategies import ALL_STRATEGY_OPTIONS, STRATEGY_OPTIONS

        # A strategy's options are hashed only with the strategy that reads them (`standard`, hashed only when
        # set, reads none), so the ids of runs from before strategies stay.
        used = STRATEGY_OPTIONS.get(out.get("strategy", "standard"), ())
        for key in ALL_STRATEGY_OPTIONS:
            if key not in used:
                out.pop(key, None)
        return out

    def strategy_options(self) -> Any:
        """The :class:`~engine.properties.strategies.Strategy` of this cell."""
        from engine.properties.strategies import Strategy

        return Strategy(self.strategy, self.finetune_share, self.progressive_k, self.adversarial_share)

    def options(self) -> TrainOptions:
        fields = {f.name for f in dataclasses.fields(TrainOptions)}
        return TrainOptions(**{k: getattr(self, k) for k in fields})

    def trainer(self) -> PropertySpec | None:
        """The cell whose trained model this one tests (robustness), or None when it trains itself."""
        from engine.properties.strategies import trained_by

        other = trained_by(self.strategy).get(self.dimension)
        return None if other is None else self.replace(dimension=other)


def cell_datasets_of(spec: PropertySpec) -> list[Any]:
    """The datasets a property run's cell trains and tests on (:func:`engine.properties.study.cell_datasets`)."""
    from engine.properties.study import cell_datasets

    return cell_datasets(
        spec.property, spec.dimension, spec.graphs, spec.sizes, spec.negatives, spec.data_seed, spec.strategy_options()
    )
