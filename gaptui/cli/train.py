"""``gaptui train``: one run in the foreground, described by flags or picked from a preset, with its progress."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.markup import escape
from rich.table import Table

from engine.errors import GaptuiError
from engine.tasks import family
from gaptui.cli.common import JsonOpt, WorkspaceOpt, console, err_console, note, print_json, warn
from gaptui.runner import run_id
from gaptui.workspace import Workspace


def register(app: typer.Typer) -> None:
    app.command("train")(train_cmd)


#: The parameters of ``gaptui train`` that describe a run alone, by the flag name a family's ``TrainFlags`` reads.
TRAIN_FLAGS = {
    **{key: key for key in ("base", "noise", "model", "epochs", "train", "val", "seed", "data_seed", "batch_size")},
    **{key: key for key in ("recipe", "features", "input_layer", "norm", "device", "precision", "noise_model")},
    "param": "param",
    "compile_mode": "compile",
}


TrainBaseOpt = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option("--base", help="Base dataset name (the alignment flags: with --noise and --model)."),
]
TrainNoiseOpt = Annotated[Optional[float], typer.Option("--noise", help="Noise level eta in [0, 1).")]  # noqa: UP045
TrainModelOpt = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option("--model", help="Model name, 'laplacian', or module.path:Factory."),
]
TrainEpochsOpt = Annotated[Optional[int], typer.Option("--epochs", help="Training epochs [default: 300].")]  # noqa: UP045
TrainTrainOpt = Annotated[Optional[int], typer.Option("--train", help="Training pairs.")]  # noqa: UP045
TrainValOpt = Annotated[Optional[int], typer.Option("--val", help="Validation pairs.")]  # noqa: UP045
TrainSeedOpt = Annotated[Optional[int], typer.Option("--seed", help="Training seed [default: 0].")]  # noqa: UP045
TrainDataSeedOpt = Annotated[Optional[int], typer.Option("--data-seed", help="Dataset seed [default: 0].")]  # noqa: UP045
TrainBatchSizeOpt = Annotated[
    Optional[int],  # noqa: UP045
    typer.Option("--batch-size", help="Pairs per optimiser step [default: 100]."),
]
TrainRecipeOpt = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option(
        "--recipe",
        help="Training recipe: gaptui, ngab, paper or legacy (docs/fidelity.md) [default: gaptui; with --preset "
        "or --spec: the run's, and a recipe given here replaces all of its recipe fields].",
    ),
]
TrainFeaturesOpt = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option(
        "--features",
        help="Node inputs: degree or ones, and/or positional rwpe:K, lap:K joined by + (degree+rwpe:16) "
        "[default: the recipe's].",
    ),
]
TrainInputLayerOpt = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option("--input-layer", help="linear, conv (per-model first layer) or gcn [default: the recipe's]."),
]
TrainNormOpt = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option("--norm", help="per-graph, or whole-batch (the paper's) [default: the recipe's]."),
]
TrainDeviceOpt = Annotated[Optional[str], typer.Option("--device", help="auto, cpu or cuda[:N] [default: auto].")]  # noqa: UP045
TrainCompileModeOpt = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option("--compile", help="torch.compile the model: auto (long CPU runs), on or off [default: auto]."),
]
TrainPrecisionOpt = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option(
        "--precision",
        help="auto, fp32 or bf16 (the forward pass under bf16 autocast) [default: the spec's, auto]; any family.",
    ),
]
TrainNoiseModelOpt = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option("--noise-model", help="add_remove or add [default: the base dataset's own]."),
]
TrainParamOpt = Annotated[
    Optional[list[str]],  # noqa: UP045
    typer.Option("--param", "-p", help="Base dataset parameter key=value (repeatable)."),
]
TrainTaskOpt = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option("--task", "-t", help="Task family of the run (with --preset or --spec): any of `gaptui tasks`."),
]
TrainPresetOpt = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option("--preset", help="Take the run from this preset's grid (choose it with --where)."),
]
TrainWhereOpt = Annotated[
    Optional[list[str]],  # noqa: UP045
    typer.Option("--where", "-W", help="With --preset: axis=value (or seed=N) choosing one run (repeatable)."),
]
TrainSpecFileOpt = Annotated[
    Optional[Path],  # noqa: UP045
    typer.Option("--spec", help="The run's spec.json (any family; e.g. one written in a run folder)."),
]
TrainOverridesOpt = Annotated[
    Optional[list[str]],  # noqa: UP045
    typer.Option("--set", help="With --preset or --spec: change a spec field, key=value (JSON value; repeatable)."),
]
TrainOutOpt = Annotated[
    Optional[Path],  # noqa: UP045
    typer.Option("--out", help="Run folder [default: <workspace>/runs/<run id>]."),
]
TrainForceOpt = Annotated[
    bool,
    typer.Option(
        "--force", help="Replace another run's files in the --out folder; start a run estimated over 30 days."
    ),
]


def train_cmd(
    base: TrainBaseOpt = None,
    noise: TrainNoiseOpt = None,
    model: TrainModelOpt = None,
    epochs: TrainEpochsOpt = None,
    train: TrainTrainOpt = None,
    val: TrainValOpt = None,
    seed: TrainSeedOpt = None,
    data_seed: TrainDataSeedOpt = None,
    batch_size: TrainBatchSizeOpt = None,
    recipe: TrainRecipeOpt = None,
    features: TrainFeaturesOpt = None,
    input_layer: TrainInputLayerOpt = None,
    norm: TrainNormOpt = None,
    device: TrainDeviceOpt = None,
    compile_mode: TrainCompileModeOpt = None,
    precision: TrainPrecisionOpt = None,
    noise_model: TrainNoiseModelOpt = None,
    param: TrainParamOpt = None,
    task: TrainTaskOpt = None,
    preset: TrainPresetOpt = None,
    where: TrainWhereOpt = None,
    spec_file: TrainSpecFileOpt = None,
    overrides: TrainOverridesOpt = None,
    out: TrainOutOpt = None,
    force: TrainForceOpt = False,
    workspace: WorkspaceOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Train one run in the foreground and print its final metrics: one model on one alignment dataset (--base,
    --noise, --model), or one run of any family (--task NAME with --preset P --where axis=value, or --spec FILE;
    --set key=value changes a field).

    The run is checked (files, memory) and its inputs built by the same launch service as `gaptui run`, and it is
    recorded in the workspace history like the runs of a grid; Ctrl-C (or SIGTERM, SIGHUP) stops the worker with a
    checkpoint, and the same command resumes it.
    """
    # The flags that describe a run alone (a family's train_flags), as given: absent ones take the spec's defaults.
    flags = {TRAIN_FLAGS[key]: value for key, value in locals().items() if key in TRAIN_FLAGS and value is not None}
    ws = Workspace.resolve(workspace)
    if preset is not None or spec_file is not None:
        spec = _generic_spec(ws, flags, task, preset, where, spec_file, overrides, recipe, precision)
    else:
        spec = _flags_spec(ws, flags, task, where, overrides)
    train_one(ws, spec, out.expanduser().resolve() if out else None, force=force, as_json=as_json)


def train_one(
    ws: Workspace, spec: Any, folder: Path | None = None, *, force: bool = False, as_json: bool = False
) -> None:
    """What ``gaptui train`` does with its run: check it, build its inputs, run it in the foreground (recorded in
    the history) and print its final metrics; a family's own commands run their runs through it too."""
    fam = family(spec.task)
    folder = folder or ws.runs / run_id(spec)
    _check_train_run(ws, spec, fam, folder, force)
    _prepare_inputs(spec, fam, as_json)
    result = _run_foreground(spec, folder, ws, show_progress=not as_json)
    _print_train_result(spec, fam, result, folder, as_json)


def _flag_names(keys: Iterable[str]) -> list[str]:
    return [f"--{key.replace('_', '-')}" for key in keys]


def _generic_spec(
    ws: Workspace,
    flags: dict[str, Any],
    task: str | None,
    preset: str | None,
    where: list[str] | None,
    spec_file: Path | None,
    overrides: list[str] | None,
    recipe: str | None,
    precision: str | None,
) -> Any:
    """The run of ``--preset``/``--spec`` with --recipe and --precision applied; the flags that describe a run by
    themselves (a family's required train flags) are refused."""
    from engine.tasks import FAMILIES

    required = dict.fromkeys(k for fam in FAMILIES if fam.train_flags for k in fam.train_flags.required)
    given = _flag_names(k for k in required if k in flags)
    if given:
        raise GaptuiError(f"{', '.join(given)}: these flags describe a run alone and do not go with --preset or --spec")
    spec = _chosen_spec(ws, task, preset, where or [], spec_file, overrides or [])
    return with_precision(with_recipe(spec, recipe), precision)


def _flags_spec(
    ws: Workspace, flags: dict[str, Any], task: str | None, where: list[str] | None, overrides: list[str] | None
) -> Any:
    """The run that the flags describe alone: of the family whose required train flags are all given (the family's
    :class:`~engine.tasks.TrainFlags`); --task, --where and --set are refused."""
    from engine.hardware import RunOptions
    from engine.tasks import FAMILIES, Placement, load_spec

    if task is not None or where or overrides:
        raise GaptuiError("--task, --where and --set go with --preset P or --spec FILE (the run to train)")
    owners = {fam.name: fam.train_flags for fam in FAMILIES if fam.train_flags is not None}
    chosen = [name for name, train in owners.items() if all(key in flags for key in train.required)]
    if not chosen:
        other = "--task NAME with --preset P --where axis=value or --spec FILE"
        if not owners:
            raise GaptuiError(f"gaptui train: give {other}")
        closest = max(owners, key=lambda name: sum(key in flags for key in owners[name].required))
        required = owners[closest].required
        names = _flag_names(required)
        listed = f"{', '.join(names[:-1])} and {names[-1]}" if len(names) > 1 else names[0]
        missing = ", ".join(_flag_names(key for key in required if key not in flags))
        article = "an" if closest[:1] in "aeiou" else "a"
        raise GaptuiError(f"gaptui train: missing {missing}: give {listed} ({article} {closest} run), or {other}")
    if "precision" in flags:
        RunOptions(precision=flags["precision"]).check("--precision")
    most = max(chosen, key=lambda name: len(owners[name].required))  # the family the flags describe most closely
    raw = owners[most].spec(flags, Placement(str(ws.datasets), str(ws.raw_data)))
    return load_spec(raw, where="gaptui train")


def _check_train_run(ws: Workspace, spec: Any, fam: Any, folder: Path, force: bool) -> None:
    """Check the run before it starts: its estimated duration, its folder, its files and its dependencies."""
    from gaptui import launch
    from gaptui.estimate import check_duration

    for line in check_duration([spec], 1, f"run {fam.describe(spec)}", force)[1]:
        err_console.print(escape(line), highlight=False, soft_wrap=True)
    _claim_run_folder(folder, spec, force)
    for line in launch.check_specs([spec]):
        warn(line)
    _check_dependencies_done(ws, spec)


def _prepare_inputs(spec: Any, fam: Any, as_json: bool) -> None:
    """Build the run's inputs (``launch.prepare_checked``), under a status line unless --json."""
    from gaptui import launch
    from gaptui.cli.progress import step_progress

    with step_progress(f"preparing the inputs of {fam.describe(spec)}", quiet=as_json) as update:
        launch.prepare_checked([spec], lambda done, total, label: update(label, done, total))


def _print_train_result(spec: Any, fam: Any, result: dict[str, Any], folder: Path, as_json: bool) -> None:
    """Print the run's final metrics: one JSON document, or a table and the run folder."""
    from gaptui.runner import run_id

    if as_json:
        print_json({"run": run_id(spec), "out": str(folder), **result.get("metrics", {}), **_result_summary(result)})
        return
    what = f"{fam.name}: {fam.describe(spec)}"
    if getattr(spec, "recipe_label", "-") != "-":
        what += f", recipe {spec.recipe_label}"
    table = Table(title=f"{what} (run {run_id(spec)})")
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_row("parameters", f"{result.get('params', 0):,}")
    for key, value in result.get("metrics", {}).items():
        table.add_row(key, f"{value:.4f}" if isinstance(value, float) else str(value))
    console.print(table)
    console.print(f"run folder: {folder}", highlight=False, markup=False)


def with_recipe(spec: Any, recipe: str | None) -> Any:
    """``spec`` trained by ``recipe`` instead (``gaptui train --recipe``; None: as it is): every field the recipe
    sets takes the recipe's value. One-line GaptuiError for a family whose runs have no recipe."""
    if recipe is None:
        return spec
    if not hasattr(spec, "with_recipe"):
        raise GaptuiError(f"--recipe {recipe}: a {spec.task} run has no recipe option")
    return spec.with_recipe(recipe, where="--recipe")


def with_precision(spec: Any, precision: str | None) -> Any:
    """``spec`` with its ``precision`` field set to ``precision`` (``gaptui train --precision``; None: as it is);
    one-line GaptuiError for a value not in :data:`engine.hardware.PRECISIONS` or a family whose runs have no such
    option."""
    if precision is None:
        return spec
    from engine.hardware import RunOptions
    from engine.tasks import load_spec

    RunOptions(precision=precision).check("--precision")
    raw = spec.to_dict()
    if "precision" not in raw:
        raise GaptuiError(f"--precision {precision}: a {spec.task} run has no precision option")
    return load_spec({**raw, "precision": precision}, where="--precision")


def _chosen_spec(
    ws: Workspace, task: str | None, preset: str | None, where: list[str], spec_file: Path | None, overrides: list[str]
) -> Any:
    """The one run ``--preset P --where axis=value`` or ``--spec FILE`` names, with ``--set key=value`` applied;
    GaptuiError (one line) when the choice is not exactly one run or the result does not validate."""
    from engine.tasks import family, load_spec, load_spec_file

    if preset is not None and spec_file is not None:
        raise GaptuiError("--preset and --spec: give one of them (the run comes from a grid or from a file)")
    if preset is not None:
        from gaptui.preset_code import review_preset
        from gaptui.presets import grid

        loaded = review_preset(preset, ws).load(note)
        # A grid may hold runs of other families (a GAPE grid's pretraining runs are alignment runs): --task
        # chooses among them, the preset's own family by default.
        name = family(task).name if task is not None else loaded.task
        specs = grid(loaded, ws)
        if not any(s.task == name for s in specs):
            tasks = ", ".join(sorted({s.task for s in specs}))
            raise GaptuiError(f"--preset {preset} has no run of task {name} (its runs: task {tasks})")
        spec = _select([s for s in specs if s.task == name], where, f"--preset {preset}")
    else:
        if where:
            raise GaptuiError("--where chooses a run of a --preset grid; a --spec file is one run already")
        assert spec_file is not None
        spec = load_spec_file(spec_file.expanduser())
        if task is not None and spec.task != family(task).name:
            raise GaptuiError(f"--spec {spec_file}: a run of task {spec.task}, not {task}")
        # Where the data lives is the workspace's (-w), not the one the file was written in (a spec.json of a
        # copied or moved workspace names the old one's folders); --set below may still choose other folders.
        # Placement is not hashed: the run id stays the file's.
        placement = {"datasets_dir": str(ws.datasets), "data_root": str(ws.raw_data)}
        raw = spec.to_dict()
        spec = load_spec({**raw, **{k: v for k, v in placement.items() if k in raw}})
    if overrides:
        raw = spec.to_dict()
        for item in overrides:
            key, sep, text = item.partition("=")
            if not sep or key.strip() not in raw:
                known = ", ".join(sorted(k for k in raw if k != "task"))
                raise GaptuiError(f"--set '{item}': expected key=value with a key of the {spec.task} spec ({known})")
            try:
                raw[key.strip()] = json.loads(text)
            except json.JSONDecodeError:
                raw[key.strip()] = text
        spec = load_spec(raw, where="--set")
    return spec


def _select(specs: list[Any], where: list[str], what: str) -> Any:
    """The one spec of ``specs`` whose axes (and seed) match every ``axis=value`` of ``where``, as ``history
    --filter`` matches them (:func:`gaptui.record.axis_matches`: numbers as numbers, text ignoring case, a base
    dataset name matching its parameterised datasets)."""
    from engine.tasks import family
    from gaptui.record import axis_matches, run_axes

    wanted: dict[str, str] = {}
    for item in where:
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise GaptuiError(f"--where '{item}': expected axis=value (or seed=N)")
        wanted[key.strip()] = value.strip()

    def axes(spec: Any) -> dict[str, Any]:
        fam = family(spec.task)
        return run_axes(fam, fam.record_axes(spec), spec.seed)

    def values(spec: Any) -> dict[str, str]:
        return {k: axis.format(value) for k, (axis, value) in axes(spec).items()}

    if specs:
        known = values(specs[0])
        for key in wanted:
            if key not in known:
                raise GaptuiError(f"--where {key}=...: not an axis of task {specs[0].task} (axes: {', '.join(known)})")

    def matches(spec: Any) -> bool:
        chosen_by = axes(spec)
        return all(axis_matches(*chosen_by[k], v) for k, v in wanted.items())

    chosen = [s for s in specs if matches(s)]
    if len(chosen) != 1:
        found = "no run" if not chosen else f"{len(chosen)} runs"
        options = {k: sorted({values(s)[k] for s in (chosen or specs)}) for k in (values(specs[0]) if specs else {})}
        choices = "; ".join(f"{k}: {', '.join(v[:6])}{' ...' if len(v) > 6 else ''}" for k, v in options.items())
        raise GaptuiError(
            f"{what}: {found} of its grid match{'es' if not chosen else ''}; choose one with --where ({choices})"
        )
    return chosen[0]


def _check_dependencies_done(ws: Workspace, spec: Any) -> None:
    """Refuse a run whose dependencies (a downstream run's pretraining run) are not done in this workspace."""
    from engine.tasks import family
    from gaptui.history.store import read_records

    deps = family(spec.task).dependencies(spec)
    if not deps:
        return
    done = {r["hash"] for r in read_records(ws) if r.get("status") == "done"}
    for dep in deps:
        if dep not in done:
            raise GaptuiError(
                f"run {spec.hash()[:12]} needs run {dep[:12]} done first (not done in {ws.root}); "
                "train that one first (gaptui train --where ...) or run the grid (gaptui run --preset ...)"
            )


def _claim_run_folder(folder: Path, spec: Any, force: bool) -> None:
    """Refuse a folder that belongs to another run (or to no run) before anything is written; ``--force``
    removes the other run's files first."""
    from engine.worker import RUN_FILES, check_run_folder

    try:
        check_run_folder(folder, spec)
    except GaptuiError:
        if not force or not folder.is_dir():
            raise
        for name in RUN_FILES:
            (folder / name).unlink(missing_ok=True)
        return
    if folder.is_dir() and not (folder / "spec.json").exists():
        foreign = sorted(p.name for p in folder.iterdir() if p.name not in RUN_FILES)
        if foreign:
            raise GaptuiError(
                f"--out {folder} is not a run folder (it holds {foreign[0]}{' ...' if len(foreign) > 1 else ''}); "
                "choose a new or empty folder"
            )


def _result_summary(result: dict[str, Any]) -> dict[str, Any]:
    return {
        "params": result.get("params"),
        "width": result.get("width"),
        "metrics": result.get("metrics", {}),
        "seconds": result.get("seconds"),
        "device": result.get("device"),
        "dataset": result.get("dataset"),
    }


def _train_events(progress: Any, task: Any, fam: Any) -> Any:
    """The listener that moves ``gaptui train``'s bar with the worker's events: preparing, then batches of epochs
    (a ``progress`` event every few seconds within an epoch), each epoch's loss and validation metrics."""
    metrics = {m.key: m for m in fam.metrics}
    plan: dict[str, int] = {"epochs": 0, "batches": 1}

    def on_event(kind: str, run_hash: str, event: dict[str, Any]) -> None:
        if kind != "event":
            return
        what = event.get("event")
        if what == "progress" and event.get("phase") == "preparing":
            progress.update(task, where=f"preparing: {event.get('what') or 'its data, inputs and model'}")
        elif what == "start" and isinstance(event.get("epochs"), int):
            plan["epochs"], plan["batches"] = event["epochs"], int(event.get("steps_per_epoch") or 1)
            resumed = event.get("resumed_from") or {}
            done = int(resumed.get("epoch") or 0) * plan["batches"] + int(resumed.get("batch") or 0)
            where = f"{resumed.get('epoch') or 0}/{plan['epochs']} epochs"
            progress.update(task, total=plan["epochs"] * plan["batches"], completed=done, where=where)
        elif what == "progress" and event.get("phase") == "training":
            epoch, batch = int(event["epoch"]), int(event.get("batch") or 0)
            where = f"epoch {epoch}/{plan['epochs']} · batch {batch}/{plan['batches']}"
            progress.update(task, completed=(epoch - 1) * plan["batches"] + batch, where=where)
        elif what == "epoch":
            info = f"loss {event['train_loss']:.3f}" if isinstance(event.get("train_loss"), float) else ""
            for key, value in event.items():
                if key.startswith("val_") and isinstance(value, float):
                    name = metrics[key].name if key in metrics else key.replace("_", " ")
                    info += f"  {name} {value:.3f}"
            where = f"{event['epoch']}/{plan['epochs']} epochs"
            progress.update(task, completed=event["epoch"] * plan["batches"], info=info.strip(), where=where)

    return on_event


def _run_foreground(spec: Any, folder: Path, ws: Workspace, show_progress: bool) -> dict[str, Any]:
    """Run one worker through the scheduler (so the run is in the history), mirror its events in a progress bar;
    SIGINT, SIGTERM and SIGHUP stop it with a checkpoint, and it never outlives this process. Returns
    result.json."""
    import signal

    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    from engine.worker import ENV_STOP_WITH_PARENT
    from gaptui.history.store import History
    from gaptui.processes import FOREGROUND
    from gaptui.scheduler import Scheduler, Slot

    progress = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TextColumn("{task.fields[where]}"),
        TextColumn("{task.fields[info]}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=err_console,
        disable=not show_progress,
        transient=True,  # a failed run's error line is the only line left, not under a bar
    )
    from engine.tasks import family

    fam = family(spec.task)
    # The total (batches of every epoch) comes from the worker's start event, so every family's run shows its own.
    task = progress.add_task(fam.costs.label(spec), total=None, info="", where="starting the worker")
    on_event = _train_events(progress, task, fam)

    def on_signal(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    h = spec.hash()
    with History(ws, write=True, exclusive=False, purpose="gaptui train") as history:
        _claim_foreground(history, spec, folder, ws)
        slot = Slot("foreground", {ENV_STOP_WITH_PARENT: "1"})
        # Recorded as the run's driver: no manager adopts, stops or files it while this command lives.
        scheduler = Scheduler(ws, history, [slot], listener=on_event, driver=FOREGROUND)
        previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGHUP)}
        try:
            with progress:
                scheduler.enqueue([spec])
                while scheduler.pending():
                    scheduler.step()
                    time.sleep(0.1)
        except KeyboardInterrupt:
            err_console.print("stopping: the worker saves a checkpoint ...")
        finally:
            # Never leave the worker behind: SIGTERM, a grace period to checkpoint, then SIGKILL.
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            if scheduler.pending():
                scheduler.stop_all()
        record = history.by_hash()[h]
    return _foreground_result(record, folder)


def _claim_foreground(history: Any, spec: Any, folder: Path, ws: Workspace) -> None:
    """Record the run in ``folder`` before its worker starts; refuse one another process holds."""
    from engine.files import FileLock
    from engine.worker import LOCK
    from gaptui.processes import worker_gone
    from gaptui.scheduler import new_record

    h = spec.hash()
    record = history.by_hash().get(h)
    # A record left running by a killed train or manager is resumed; one whose worker may be alive is not.
    if record and record["status"] == "running" and record.get("pid") and not worker_gone(record):
        raise GaptuiError(f"run {record['id']} is running already (pid {record['pid']}, {record['run_dir']})")
    probe = FileLock(folder / LOCK, "gaptui train")
    if folder.is_dir() and not probe.acquire():
        raise GaptuiError(f"run folder {folder} is in use by {probe.current_holder()}")
    probe.release()
    if record is None:
        history.put(new_record(spec, ws, run_dir=folder))
    elif Path(record["run_dir"]) != folder:
        history.update(h, run_dir=str(folder))


def _foreground_result(record: dict[str, Any], folder: Path) -> dict[str, Any]:
    """result.json of a run that ended done; a cancelled or failed one ends the command with its status."""
    status = record["status"]
    if status == "done":
        return json.loads((folder / "result.json").read_text())
    if status == "cancelled":
        err_console.print(
            f"cancelled; checkpoint saved in {folder}: run the same command again to resume",
            highlight=False,
            markup=False,
        )
        raise typer.Exit(130)
    message = record.get("error") or f"worker exited with status {record.get('exit_code')}"
    if record.get("exit_code") == 2:
        raise GaptuiError(message.removeprefix("error: "))
    err_console.print(f"[red]error:[/] run failed: {escape(message)}; log: {folder / 'log.txt'}")
    raise typer.Exit(1)
