"""A toy task family, registered the way a plug-in registers one (``GAPTUI_FAMILIES=tests.support.toy_family``).

It exercises the whole seam without torch: a spec with a dependency (a ``pre`` run per size that the other
runs of that size need), an input to prepare (a small data file, whose builds are logged so a test can count
them), a worker loop that streams events, polls for a stop request and can wait on a gate file, and metrics
whose direction is declared (``loss_gain`` is better when *higher* although its name says loss).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Generator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, ClassVar

from engine.errors import GaptuiError
from engine.tasks import (
    FAMILIES,
    Axis,
    Cancelled,
    CostModel,
    FamilyForm,
    FormField,
    Input,
    Metric,
    Outcome,
    Placement,
    PresetBase,
    References,
    RunContext,
    RunFailed,
    TableLayout,
    TaskFamily,
    TaskSpec,
    drop_blank,
    list_of,
    run_steps,
    unknown_keys,
)

PRE = "pre"


@dataclass(frozen=True)
class ToySpec(TaskSpec):
    size: int
    model: str = "mean"
    task: str = "toy"
    seed: int = 0
    steps: int = 3
    fail: bool = False
    after: str | None = None
    gate: str | None = None
    datasets_dir: str | None = None

    PLACEMENT: ClassVar[tuple[str, ...]] = ("gate", "datasets_dir")

    def validate(self, where: str = "run spec") -> None:
        if self.size < 1:
            raise GaptuiError(f"{where}: size = {self.size} must be >= 1")


def _data_path(spec: ToySpec) -> Path:
    return Path(spec.datasets_dir or ".") / f"toy-{spec.size}.json"


def build_data(spec: ToySpec) -> Path:
    """The run's data file (built once; every build is logged in ``builds.log``)."""
    path = _data_path(spec)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path.parent / "builds.log", "a") as log:
            log.write(f"{spec.size}\n")
        path.write_text(json.dumps({"values": list(range(spec.size))}))
    return path


@dataclass(frozen=True)
class ToyPreset(PresetBase):
    task: ClassVar[str] = "toy"
    sizes: tuple[int, ...]
    models: tuple[str, ...]
    pretrain: bool = True
    fail_sizes: tuple[int, ...] = ()
    steps: int = 3
    gate: str | None = None


class ToyForm(FamilyForm):
    """The toy's New-experiment form."""

    def fields(self) -> tuple[FormField, ...]:
        return (
            FormField("sizes", "sizes", "seeds", [2, 3], "data sizes: 2-4 or 2,5", section="Grid"),
            FormField("models", "models", "multi", ["mean"], choices=("mean", "median"), free=True, section="Models"),
            FormField("seeds", "seeds", "seeds", [0], section="Runs"),
            FormField("steps", "steps", "int", None, placeholder="3", section="Runs"),
            FormField("pretrain", "a pre run per size", "bool", True, section="Runs"),
        )

    def preset_from_form(self, values: dict[str, Any]) -> dict[str, Any]:
        doc = {key: values.get(key) for key in ("sizes", "models", "seeds", "pretrain", "steps")}
        return drop_blank(doc)

    def form_values(self, raw: dict[str, Any]) -> dict[str, Any]:
        return {key: raw.get(key) for key in ("sizes", "models", "seeds", "steps")} | {
            "pretrain": raw.get("pretrain", True)
        }


class ToyCosts(CostModel):
    """A run's units are its steps (the history of its cell gives the seconds per step); its data holds ``size``
    values of a megabyte each (so a test can ask for more than any machine has)."""

    def cell(self, spec: ToySpec) -> str:
        return f"{spec.size}:{spec.model}"

    def units(self, spec: ToySpec) -> float | None:
        return 0 if spec.model == PRE else float(spec.steps)

    def memory(self, spec: ToySpec) -> Any:
        from engine.memory import MemoryNeed, human

        need = spec.size * TOY_BYTES_PER_VALUE
        detail = f"{spec.size:,} values of {human(TOY_BYTES_PER_VALUE)}"
        return MemoryNeed(f"toy data n={spec.size}", "toy data", need, detail, "lower the sizes", str(spec.size))


#: The toy's published table (a plug-in's own reference file, outside gaptui).
REFERENCE = Path(__file__).with_name("toy_reference.csv")


class Toy(TaskFamily):
    name = "toy"
    title = "a toy family for tests"
    spec_type = ToySpec
    metrics = (Metric("val_mae", "val MAE", higher_is_better=False), Metric("loss_gain", "loss gain", True))
    default_metric = "val_mae"
    axes = (Axis("size", "size", numeric=True, prefix="n="), Axis("model", "model", order=(PRE,)))
    table = TableLayout(group=None, rows="model", columns="size", baselines=(PRE,))
    references = References("paper", files={"paper": REFERENCE})
    optimal = {None: "optimal size (largest best − worst spread)"}
    form = ToyForm()
    cost_model = ToyCosts
    commands = "tests.support.toy_family"  # its own `gaptui toy ...` commands: register() below

    def record_axes(self, spec: ToySpec) -> dict[str, Any]:
        return {"size": spec.size, "model": spec.model}

    def is_baseline(self, spec: ToySpec) -> bool:
        return spec.model == PRE

    def dependencies(self, spec: ToySpec) -> tuple[str, ...]:
        return (spec.after,) if spec.after else ()

    def inputs(self, spec: ToySpec) -> list[Input]:
        return [Input(f"toy:{spec.size}", f"toy data n={spec.size}", partial(build_data, spec))]

    def run(self, spec: ToySpec, ctx: RunContext) -> Outcome:
        return run_steps(self.steps(spec, ctx))

    def steps(self, spec: ToySpec, ctx: RunContext) -> Generator[None, None, Outcome]:
        """One "epoch" per step, yielding between them: the seeds of a pack take turns (no torch, no loop)."""
        values = json.loads(build_data(spec).read_text())["values"]
        ctx.emit("start", run=spec.hash(), model=spec.model, params=0, epochs=spec.steps, pid=os.getpid())
        base = 0.0
        if spec.after:
            upstream = json.loads((ctx.run_dir_of(spec.after) / "result.json").read_text())
            if upstream.get("status") != "done":
                raise GaptuiError(f"dependency {spec.after[:12]} is not done")
            base = float(upstream["metrics"]["val_mae"])
        while spec.gate and not Path(spec.gate).exists():
            if ctx.should_stop():
                raise Cancelled(step=0)
            time.sleep(0.05)
        for step in range(1, spec.steps + 1):
            if ctx.should_stop():
                raise Cancelled(step=step - 1)
            ctx.emit("epoch", epoch=step, step=step, train_loss=1.0 / step, lr=0.1, seconds=0.0, val_acc=None)
            yield
        if spec.fail:
            raise RunFailed("toy failure on purpose", "crash")
        mae = base + len(values) / 10 + (0.0 if spec.model == "median" else 0.5) + spec.seed / 100
        return Outcome(metrics={"val_mae": mae, "loss_gain": 1.0 / (1.0 + mae)}, params=0)

    def parse_preset(self, raw: dict[str, Any], where: str, path: Path | None = None) -> ToyPreset:
        keys = ("task", "name", "description", "sizes", "models", "seeds", "pretrain", "fail_sizes", "steps", "gate")
        unknown_keys(where, raw, keys)
        return ToyPreset(
            name=str(raw.get("name") or (path.stem if path else "toy")),
            description=str(raw.get("description", "")),
            sizes=tuple(list_of(where, "sizes", raw.get("sizes"), int, "sizes")),
            models=tuple(list_of(where, "models", raw.get("models"), str, "model names")),
            seeds=tuple(list_of(where, "seeds", raw.get("seeds"), int, "seeds")),
            pretrain=bool(raw.get("pretrain", True)),
            fail_sizes=tuple(raw.get("fail_sizes", ())),
            steps=int(raw.get("steps", 3)),
            gate=raw.get("gate"),
            path=path,
        )

    def grid(self, preset: ToyPreset, placement: Placement, limit: int | None = None) -> list[ToySpec]:
        common = {"datasets_dir": placement.datasets_dir, "steps": preset.steps}
        specs: list[ToySpec] = []
        pre: dict[int, ToySpec] = {}
        for size in preset.sizes:
            if preset.pretrain:
                pre[size] = ToySpec(size=size, model=PRE, fail=size in preset.fail_sizes, **common)
                specs.append(pre[size])
        for seed in preset.seeds:
            for size in preset.sizes:
                after = pre[size].hash() if size in pre else None
                for model in preset.models:
                    specs.append(ToySpec(size=size, model=model, seed=seed, after=after, gate=preset.gate, **common))
        return specs[:limit] if limit else specs


#: What one value of a toy run's data stands for in memory.
TOY_BYTES_PER_VALUE = 1 << 20


FAMILIES.register(Toy())


def register(app: Any) -> None:
    """The toy's own commands (``gaptui toy sizes``), added to the CLI as a plug-in family's are."""
    import typer

    toy_app = typer.Typer(help="The toy family's own commands.", no_args_is_help=True)

    @toy_app.command("sizes")
    def sizes_cmd(preset: Path) -> None:
        """Print the data sizes of a toy preset, one per line."""
        from gaptui.presets import load_preset

        for size in load_preset(str(preset)).sizes:
            print(size)

    app.add_typer(toy_app, name="toy")
