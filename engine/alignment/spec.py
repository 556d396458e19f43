"""RunSpec: everything that defines one alignment run (training or baseline); its canonical hash is its identity.

The spec of the ``alignment`` task family (:mod:`engine.alignment.family`); the generic parts (hash, placement
fields, dict form) come from :class:`engine.tasks.TaskSpec`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from engine.alignment.datasets import DatasetSpec
from engine.alignment.recipes import (
    DEFAULT_RECIPE,
    LEGACY_RECIPE,
    RECIPE_FIELDS,
    RECIPES,
    SCAFFOLD_FIELDS,
    check_recipe,
    resolve,
    spec_recipe_label,
)
from engine.errors import GaptuiError, did_you_mean
from engine.tasks.registry import load_spec_file
from engine.tasks.spec import TaskSpec
from engine.typed import frozen_json

CLIP_MODES = ("value", "norm")
#: What a solver run's identity holds (the rest of a spec are training options it does not read).
SOLVER_FIELDS = ("task", "dataset", "model", "model_kwargs", "topk", "seed")
#: The training-free baseline of the paper (:mod:`engine.laplacian`).
LAPLACIAN = "laplacian"
#: What may decode a trained run's alignment beyond its LAP (``decoder``): FAQ started from the LAP's matching.
DECODERS = ("faq",)
#: Spec fields that are model options of the built-in scaffold (see engine.models.base.COMMON_OPTIONS).
MODEL_FIELDS = SCAFFOLD_FIELDS


@dataclass(frozen=True)
class RunSpec(TaskSpec):
    """One run of the alignment benchmark.

    ``model`` is a registered model name, ``laplacian`` (the training-free baseline), a training-free solver
    (``grampa``, ``umeyama``, ``faq``, ``rrwm``: :mod:`engine.alignment.solvers`, whose options are its
    ``model_kwargs``, hashed only where they differ from the solver's defaults) or ``module.path:Factory``.
    ``seed`` seeds training (initialisation, batch order); the dataset has its own seed in ``dataset``.
    ``decoder`` (``faq``; None by default, hashed only when set) makes the run a *search on top of a model*: it
    trains nothing, loads the run of the same spec without ``decoder`` (its dependency), matches the validation
    pairs by that model's LAP and refines each matching with FAQ started from it.

    ``recipe`` (:mod:`engine.alignment.recipes`: ``gaptui``, the default, ``ngab``, ``paper``, ``legacy``) fills
    in each training field left ``None``: ``features`` (``degree``: ``(1, log(1 + degree))`` inputs, or
    ``ones``; positional parts ``rwpe:K`` and ``lap:K`` may follow, e.g. ``degree+rwpe:16``:
    :mod:`engine.alignment.features`), the scaffold's ``input_layer`` (``linear``, ``conv``: a per-model first
    layer, ``gcn``), ``norm`` (``per-graph`` or ``whole-batch``), ``activation`` (``relu``, ``gelu``) and
    ``block`` (``norm-act``, ``act-norm``), and the optimiser's ``lr``, ``schedule`` (``one-cycle``, ``constant``,
    ``cosine``), ``warmup_steps``, ``weight_decay``, ``clip`` and ``clip_mode``. Once built, a spec holds the
    values; its hash is of the values, not of the recipe's name (:attr:`recipe_label` reads the name back).
    ``epochs`` and ``batch_size`` default to the paper's 300 and 100.
    ``compile`` (``auto``, ``on``, ``off``) says whether the model
    is trained through ``torch.compile`` (same function, other float rounding; see ``engine.alignment.training``).
    ``precision`` (``auto``, ``fp32``, ``bf16``; :func:`engine.hardware.resolve_precision`) is the forward pass's
    (bf16: under autocast, on PyG's gather/scatter layers; the similarity, loss and LAP stay fp32).
    """

    dataset: dict[str, Any]
    model: str
    task: str = "alignment"
    model_kwargs: dict[str, Any] = field(default_factory=dict)
    recipe: str = DEFAULT_RECIPE
    features: str | None = None
    input_layer: str | None = None
    norm: str | None = None
    activation: str | None = None
    block: str | None = None
    budget: int = 60_000
    out_dim: int | None = None
    epochs: int = 300
    batch_size: int = 100
    lr: float | None = None
    schedule: str | None = None
    warmup_steps: int | None = None
    weight_decay: float | None = None
    clip: float | None = None
    clip_mode: str | None = None
    compile: str = "auto"
    precision: str = "auto"
    eval_every: int = 1
    topk: tuple[int, ...] = (5, 10)
    decoder: str | None = None
    seed: int = 0
    device: str = "auto"
    datasets_dir: str | None = None
    data_root: str | None = None

    #: The dataset spec is the ``dataset`` field's, which the seed of the run does not change.
    SEED_FREE: ClassVar[tuple[str, ...]] = (*TaskSpec.SEED_FREE, "_dataset_spec")
    #: Fields added after runs were recorded, with the value those runs had (the scaffold's: the legacy recipe's).
    HASHED_WHEN_SET: ClassVar[dict[str, Any]] = {
        **{k: RECIPES[LEGACY_RECIPE].values[k] for k in ("input_layer", "norm", "activation", "block", "schedule")},
        "compile": "auto",
        "precision": "auto",
        "decoder": None,
    }

    def __post_init__(self) -> None:
        # Registered model names are case-insensitive: canonicalise before hashing so GCN and gcn are one run.
        if isinstance(self.model, str) and ":" not in self.model:
            object.__setattr__(self, "model", self.model.lower())
        from engine.alignment.solvers import is_solver, non_default

        if is_solver(self.model) and isinstance(self.model_kwargs, dict):
            # A solver's options at their defaults are no options: the run id and the row label leave them out.
            object.__setattr__(self, "model_kwargs", non_default(self.model, self.model_kwargs))
        # The recipe fills in what was left unset; a bad recipe name is refused by validate (after parsing).
        if self.recipe in RECIPES and isinstance(self.model, str):
            given = {k: getattr(self, k) for k in RECIPE_FIELDS}
            for key, value in resolve(self.recipe, self.model, given).items():
                object.__setattr__(self, key, value)
        # One spelling per input: ``RWPE:16+degree`` is ``degree+rwpe:16`` (a bad value is refused by validate).
        from engine.alignment.features import canonical_features

        object.__setattr__(self, "features", canonical_features(self.features))

    @classmethod
    def from_dict(cls, raw: Any, where: str = "run spec") -> RunSpec:
        """A spec from its dict form; one that names no ``recipe`` was written before recipes existed and is
        read with ``legacy``'s values, so it means (and hashes to) what it did then."""
        if isinstance(raw, dict) and "recipe" not in raw:
            raw = {**raw, "recipe": LEGACY_RECIPE}
        return super().from_dict(raw, where)

    def with_recipe(self, recipe: str, where: str = "run spec") -> RunSpec:
        """This run trained by ``recipe``: every recipe field takes that recipe's value (``gaptui train --recipe``)."""
        check_recipe(recipe, where)
        raw = {**self.to_dict(), **dict.fromkeys(RECIPE_FIELDS), "recipe": recipe}
        return RunSpec.from_dict(raw, where)

    @property
    def trained(self) -> bool:
        """Whether the run's model learns (False for the Laplacian baseline and the solvers)."""
        from engine.alignment.solvers import is_solver

        return self.model != LAPLACIAN and not is_solver(self.model)

    @property
    def trains(self) -> bool:
        """Whether the run trains a model (not the baseline, a solver or a search on top of a trained run)."""
        return self.trained and not self.decoder

    def undecoded(self) -> RunSpec:
        """The run whose model a decoding run refines: this spec without ``decoder`` (its dependency)."""
        return RunSpec.from_dict({**self.to_dict(), "decoder": None})

    @property
    def recipe_label(self) -> str:
        """The recipe this run's values are (``gaptui``, ``paper+lr=0.001``...; ``-`` for the baseline)."""
        fields = {k: getattr(self, k) for k in RECIPE_FIELDS}
        return spec_recipe_label({**fields, "model": self.model, "recipe": self.recipe})

    @classmethod
    def from_file(cls, path: Path) -> RunSpec:
        spec = load_spec_file(path)
        if not isinstance(spec, RunSpec):
            raise GaptuiError(f"run spec {path}: task '{spec.task}' is not an alignment run")
        return spec

    def dataset_spec(self) -> DatasetSpec:
        known = self.__dict__.get("_dataset_spec")
        if known is None:  # specs are frozen: built once (planning a grid asks each spec several times)
            known = self._dataset_spec()
            object.__setattr__(self, "_dataset_spec", known)
        return known

    def _dataset_spec(self) -> DatasetSpec:
        d = self.dataset
        return DatasetSpec(
            base=d["base"],
            noise=d["noise"],
            noise_model=d.get("noise_model"),
            n_train=d.get("n_train"),
            n_val=d.get("n_val"),
            seed=d.get("seed", 0),
            params=dict(d.get("params") or {}),
        )

    def validate(self, where: str = "run spec") -> None:

        if self.task != "alignment":
            raise GaptuiError(f"{where}: task '{self.task}' is not alignment")
        check_recipe(self.recipe, where)
        allowed = {"base", "noise", "noise_model", "n_train", "n_val", "seed", "params"}
        extra = set(self.dataset) - allowed
        if extra or "base" not in self.dataset or "noise" not in self.dataset:
            raise GaptuiError(
                f"{where}: dataset needs keys base and noise (optional: noise_model, n_train, n_val, seed, params)"
                + (f"; unknown: {', '.join(sorted(extra))}" if extra else "")
            )
        self.dataset_spec().canonical()
        self._validate_model(where)
        for key, low in (("epochs", 1), ("batch_size", 1), ("budget", 1), ("eval_every", 1), ("warmup_steps", 0)):
            if getattr(self, key) < low:
                raise GaptuiError(f"{where}: {key} = {getattr(self, key)} must be >= {low}")
        if self.out_dim is not None and self.out_dim < 1:
            raise GaptuiError(f"{where}: out_dim = {self.out_dim} must be >= 1")
        if not self.lr > 0:
            raise GaptuiError(f"{where}: lr = {self.lr} must be > 0")
        for key in ("weight_decay", "clip", "seed"):
            if getattr(self, key) < 0:
                raise GaptuiError(f"{where}: {key} = {getattr(self, key)} must be >= 0")
        from engine.alignment.features import parse_features
        from engine.loop import SCHEDULES
        from engine.models.base import ACTIVATIONS, BLOCKS, INPUT_LAYERS, NORMS

        positional = parse_features(self.features, where).positional
        if self.model == "laplacian" and (self.model_kwargs or positional):
            given = "+".join(p.text for p in positional) or ", ".join(sorted(self.model_kwargs))
            raise GaptuiError(
                f"{where}: model laplacian with {given}: the training-free baseline takes no model options or "
                "positional inputs (it would be a second baseline row); leave them out for it"
            )
        for key, choices in (
            ("input_layer", INPUT_LAYERS),
            ("norm", NORMS),
            ("activation", ACTIVATIONS),
            ("block", BLOCKS),
            ("schedule", SCHEDULES),
            ("clip_mode", CLIP_MODES),
        ):
            value = getattr(self, key)
            if value not in choices:
                raise GaptuiError(
                    f"{where}: {key} '{value}' is not one of {', '.join(choices)}{did_you_mean(value, choices)}"
                )
        for key in MODEL_FIELDS:
            if key in self.model_kwargs:
                raise GaptuiError(f"{where}: model_kwargs '{key}' duplicates the run option {key}; set it there")
            if ":" in self.model and getattr(self, key) != self.HASHED_WHEN_SET[key]:
                raise GaptuiError(
                    f"{where}: {key} = '{getattr(self, key)}' applies to built-in models only, not '{self.model}'"
                )
        from engine.alignment.solvers import is_solver

        if self.model != LAPLACIAN and ":" not in self.model and not is_solver(self.model):
            from engine.models import check_options

            try:
                check_options(self.model, self.budget, **self.model_options())
            except GaptuiError as exc:
                raise GaptuiError(f"{where}: {exc}") from None
        if any(k < 1 for k in self.topk):
            raise GaptuiError(f"{where}: topk values must be >= 1, got {list(self.topk)}")
        self.run_options().check(where)

    def _validate_model(self, where: str) -> None:
        """The model is known; a solver's options, and its package, are; a decoder decodes a trained model."""
        from engine.alignment.solvers import SOLVERS, check_package, is_solver, solver_options
        from engine.models import MODELS

        if is_solver(self.model):
            solver_options(self.model, self.model_kwargs, where)
            check_package(self.model, where)
        elif self.model != LAPLACIAN and self.model not in MODELS:
            try:
                MODELS.get(self.model)  # raises the did-you-mean error
            except GaptuiError as exc:
                if ":" in self.model:
                    raise
                known = [*MODELS.names(), LAPLACIAN, *SOLVERS]
                raise GaptuiError(
                    f"{where}: model '{self.model}' is not a model{did_you_mean(self.model, known)}; "
                    f"known: {', '.join(known)} or module.path:Factory"
                ) from exc
        if self.decoder is None:
            return
        if self.decoder not in DECODERS:
            raise GaptuiError(
                f"{where}: decoder '{self.decoder}' is not one of {', '.join(DECODERS)}"
                f"{did_you_mean(self.decoder, DECODERS)}"
            )
        if not self.trained:
            raise GaptuiError(
                f"{where}: decoder '{self.decoder}' refines a trained model's alignment, and '{self.model}' trains "
                f'none; use the solver row instead (e.g. faq with init = "grampa")'
            )

    def check_memory(self) -> None:
        """Refuse (one line, with the estimate) a run whose dataset or training batch cannot fit in memory, or a
        solver whose per-pair matrices cannot."""
        from engine.alignment.memory import check_fits

        if not self.trained:
            need = self.solver_need()
            if need is not None:
                need.check()
        if self.trained:
            what = f"{self.model} on {self.dataset['base']}"
            check_fits(self.dataset_spec().canonical(), self.batch_size, what, self.model_bytes(), self.node_bytes())

    def solver_need(self, nodes: float | None = None) -> Any:
        """The memory a solver run holds per pair at once (:class:`engine.memory.MemoryNeed`; RRWM's affinity
        matrices, one per pool worker), None for the others and while the graph order is unknown."""
        from engine.alignment.solvers import rrwm_bytes
        from engine.memory import MemoryNeed, human

        if self.model != "rrwm":
            return None
        if nodes is None:
            from engine.sources import SOURCES, parse_params

            source = SOURCES.get(self.dataset_spec().canonical()["base"])
            hint = source.size_hint(parse_params(source, self.dataset_spec().canonical()["params"]))
            if hint is None:
                return None
            nodes = hint[0]
        per_pair = rrwm_bytes(nodes)
        detail = f"an n^2 x n^2 affinity matrix of {human(per_pair)} per pair at n = {nodes:,.0f}"
        return MemoryNeed(
            f"solver rrwm on {self.dataset['base']}", f"rrwm on {self.dataset['base']}", per_pair, detail,
            "use faq or grampa on graphs this large, or smaller graphs (n)", f"rrwm:{nodes:.0f}",
        )  # fmt: skip

    def node_bytes(self) -> int:
        """Bytes a run keeps per node of a pair beside the dataset: its positional inputs, fp32, of G and G~."""
        from engine.alignment.features import parse_features

        try:
            return 2 * 4 * parse_features(self.features).positional_dim
        except GaptuiError:
            return 0  # validate names the bad value

    def model_bytes(self) -> Callable[[int, float, float], int] | None:
        """What the built-in model holds in a training step, as ``(graphs, nodes, degree) -> bytes``: the tensors
        autograd saves per node, per edge and per node pair, measured on tiny batches
        (:func:`engine.models.footprint.step_footprint`), or the dense matrices the model declares
        (:meth:`engine.models.base.ResidualGNN.batch_bytes`) when more; None for the baseline and a user's
        import-path model."""
        from engine.alignment.features import feature_dim
        from engine.models import MODELS
        from engine.models.footprint import step_footprint

        if not self.trained or ":" in self.model or self.model not in MODELS:
            return None
        cls = MODELS.get(self.model)
        options = cls.resolve_options(self.model_options())
        given = self.model_options()
        footprint = step_footprint(self.model, self.out_dim or 64, self.budget, feature_dim(self.features), given)

        def step(graphs: int, nodes: float, degree: float) -> int:
            square = int(footprint.per_square * graphs * nodes * nodes)  # what the declared matrices measure
            dense = cls.batch_bytes(options, graphs, nodes)
            return footprint.bytes(graphs, nodes, degree) - square + max(square, dense)

        return step

    @frozen_json
    def canonical(self) -> dict[str, Any]:
        """What the run computes, resolved (dataset defaults filled in), without placement fields."""
        # The recipe's name is not hashed: the values it filled in are, so a run is what it computes.
        out = {k: v for k, v in super().canonical().items() if k != "recipe"}
        out["dataset"] = self.dataset_spec().canonical()
        from engine.alignment.solvers import is_solver

        if is_solver(self.model):  # a solver trains nothing: the grid's training options are not what it computes
            out = {k: v for k, v in out.items() if k in SOLVER_FIELDS}
        return out

    def model_options(self) -> dict[str, Any]:
        """Keywords for :func:`engine.models.build`: ``model_kwargs`` plus the scaffold fields when set.

        Defaults are left out so that a user's import-path model is called exactly as before.
        """
        extra = {k: getattr(self, k) for k in MODEL_FIELDS if getattr(self, k) != self.HASHED_WHEN_SET[k]}
        return {**self.model_kwargs, **extra}
