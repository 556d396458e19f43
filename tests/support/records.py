"""Run records as the history stores them, histories of each family to rank and draw, and workspaces holding them."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gaptui.workspace import Workspace

_counter = iter(range(10**9))
ALIGNMENT_AXES = {"dataset": "er", "noise": 0.1, "model": "gcn"}
MODELS = ("gcn", "gin", "gat")
NOISES = (0.04, 0.12, 0.24)


def record(
    n: int | None = None,
    task: str = "alignment",
    axes: dict[str, Any] | None = None,
    seed: int = 0,
    metrics: dict[str, float] | None = None,
    **fields: Any,
) -> dict[str, Any]:
    """A run record: id and hash from ``n`` (the next of a counter when None), ``status`` done and a finish time
    unless ``fields`` say otherwise; ``fields`` set or add any other key."""
    n = next(_counter) + 10**6 if n is None else n
    base = {
        "id": f"{n:012x}",
        "hash": f"{n:064x}",
        "status": "done",
        "task": task,
        "axes": dict(axes or ALIGNMENT_AXES),
        "seed": seed,
        "metrics": dict(metrics or {}),
        "finished": "2024-01-01T00:00:00",
    }
    return {**base, **fields}


def queued_record(n: int, **fields: Any) -> dict[str, Any]:
    """A queued alignment run's record, as the scheduler first writes it (no metrics, no finish time)."""
    return record(n, status="queued", finished=None, **fields)


def rec(
    model: str,
    noise: float,
    value: float | None,
    seed: int = 0,
    *,
    dataset: str = "er",
    status: str = "done",
    metric: str = "val_lap_acc",
    planned: int | None = 4,
    finished: str | None = "2024-01-01T00:00:00",
) -> dict[str, Any]:
    """An alignment record with every field analysis reads: ``value`` of ``metric`` (none when None)."""
    return record(
        axes={"dataset": dataset, "noise": noise, "model": model},
        seed=seed,
        metrics={} if value is None else {metric: value},
        status=status,
        params=0 if model == "laplacian" else 1234,
        planned_seeds=planned,
        tags=[],
        note="",
        created="2024-01-01T00:00:00",
        started=None,
        finished=finished,
        duration=1.0,
    )


def run_events(record: dict[str, Any]) -> list[dict[str, Any]]:
    """The events a record's run wrote so far (none before its folder has them)."""
    path = Path(record["run_dir"]) / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def write_events(folder: Path, epochs: int, quality: float, metric: str) -> None:
    """A finished run's events.jsonl in ``folder``: ``epochs`` epochs whose ``metric`` climbs towards ``quality``."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = []
    for e in range(1, epochs + 1):
        lines.append({"v": 1, "event": "epoch", "t": float(e), "epoch": e, "train_loss": 3.0 / e + 1 - quality})
        lines.append({"v": 1, "event": "eval", "t": float(e), "epoch": e, metric: quality * (1 - 0.5 / e)})
    (folder / "events.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))


def figure_record(n: int, task: str, axes: dict[str, Any], seed: int, metrics: dict[str, float], run_dir: Path | None):
    """A record of the figure histories: 3 planned seeds, its run folder when it has one."""
    run = str(run_dir) if run_dir else None
    return record(n, task, axes, seed, metrics, finished="2026-01-01T00:00:00", run_dir=run, planned_seeds=3)


def alignment_history(root: Path) -> list[dict[str, Any]]:
    """3 models x 3 noise levels x 3 seeds on ER, with the events of each run under ``root/runs``."""
    rng = random.Random(0)
    records = []
    for m, model in enumerate(MODELS):
        for noise in NOISES:
            for seed in range(3):
                acc = 0.9 - noise * (1.5 + m) + rng.uniform(-0.02, 0.02)
                folder = root / "runs" / f"a{len(records)}"
                write_events(folder, 6, acc, "val_lap_acc")
                axes = {"dataset": "er", "noise": noise, "model": model}
                records.append(figure_record(len(records), "alignment", axes, seed, {"val_lap_acc": acc}, folder))
    return records


def gape_history(root: Path) -> list[dict[str, Any]]:
    """3 PEs x 2 datasets x 3 seeds, with the events of each run under ``root/runs``."""
    rng = random.Random(1)
    records = []
    for p, pe in enumerate(("none", "rwpe", "gape")):
        for dataset in ("aqsol", "zinc"):
            for seed in range(3):
                mae = 1.2 - 0.1 * p + rng.uniform(-0.03, 0.03)
                folder = root / "runs" / f"g{len(records)}"
                write_events(folder, 4, mae, "val_mae")
                axes = {"pe": pe, "dataset": dataset}
                records.append(figure_record(1000 + len(records), "gape", axes, seed, {"val_mae": mae}, folder))
    return records


def properties_history() -> list[dict[str, Any]]:
    """2 dimensions x 3 poolings x 4 properties x 2 seeds, accuracies per size and the U score."""
    from engine.properties.definitions import PROPERTY_NAMES

    rng = random.Random(2)
    records = []
    for dimension in ("generalisation", "sensitivity"):
        for q, pooling in enumerate(("mean", "sum", "attention")):
            for prop in PROPERTY_NAMES[:4]:
                for seed in range(2):
                    accs = {
                        f"acc_n{n}": 0.95 - 0.02 * (n - 5) - 0.05 * q + rng.uniform(-0.02, 0.02) for n in (6, 8, 10)
                    }
                    u = sum(accs.values()) / len(accs)
                    axes = {"dimension": dimension, "pooling": pooling, "property": prop}
                    metrics = {"u_score": u, **accs}
                    records.append(figure_record(5000 + len(records), "properties", axes, seed, metrics, None))
    return records


def gape_records() -> list[dict[str, Any]]:
    """ZINC MAE: none 0.60/0.62 (mean 0.61), lap 0.20, gape 0.15 (the paper: 0.658, 0.171, 0.147)."""
    values = {"none": (0.60, 0.62), "lap": (0.20, 0.20), "gape": (0.15, 0.15)}
    return [
        record(10 * i + s, "gape", {"dataset": "zinc", "pe": pe}, s, {"val_mae": v})
        for i, (pe, vs) in enumerate(values.items())
        for s, v in enumerate(vs)
    ]


def properties_records() -> list[dict[str, Any]]:
    """Two poolings x two properties x two dimensions, U scores chosen so that R is easy to check by hand.

    generalisation: connex mean 0.6, attention 1.0 (R 0.75, 1.25); reflexive 0.8, 1.0 (R 0.8/0.9, 1.0/0.9).
    sensitivity: every U 0.9 (R 1)."""
    u = {("generalisation", "connex"): (0.6, 1.0), ("generalisation", "reflexive"): (0.8, 1.0)}
    u |= {("sensitivity", "connex"): (0.9, 0.9), ("sensitivity", "reflexive"): (0.9, 0.9)}
    out = []
    for (dimension, prop), values in u.items():
        for pooling, value in zip(("mean", "attention"), values, strict=True):
            axes = {"dimension": dimension, "pooling": pooling, "property": prop}
            out.append(record(100 + len(out), "properties", axes, 0, {"u_score": value}))
    return out


def toy_records() -> list[dict[str, Any]]:
    """The toy family's MAE by model and size (its shipped reference: ``tests/support/toy_reference.csv``)."""
    values = {("mean", 2): 0.72, ("median", 2): 0.2, ("mean", 3): 0.8, ("median", 3): 0.3}
    return [
        record(200 + i, "toy", {"size": size, "model": model}, 0, {"val_mae": v})
        for i, ((model, size), v) in enumerate(values.items())
    ]


def workspace_with(tmp_path: Path, records: list[dict[str, Any]]) -> Workspace:
    """A workspace at ``tmp_path/ws`` whose history holds ``records`` (none: no history file)."""
    from gaptui.history.store import History
    from gaptui.workspace import Workspace

    ws = Workspace.resolve(tmp_path / "ws")
    ws.root.mkdir(parents=True, exist_ok=True)
    if records:
        with History(ws, write=True) as history:
            history.put_many(records)
    return ws


def history_of(tmp_path: Path, records: list[dict[str, Any]]) -> Path:
    """The root of a workspace at ``tmp_path/ws`` whose history holds ``records``."""
    return workspace_with(tmp_path, records).root


def fixed_records(ws: Workspace) -> list[dict[str, Any]]:
    """Deterministic history: 2 models x 3 noise levels x 2 seeds on ER, plus a failed run, with run dirs."""
    from engine.alignment.preset import DatasetEntry, Preset, RunOptions
    from gaptui.presets import grid
    from gaptui.scheduler import new_record

    preset = Preset(
        name="fixed",
        description="",
        datasets=(DatasetEntry("er", {"n": 16, "degree": 4}, train=20, val=6),),
        noise=(0.04, 0.12, 0.24),
        models=("gcn", "gin"),
        seeds=(0, 1),
        run=RunOptions(epochs=3, batch_size=10, budget=5000, out_dim=8),
    )
    records = []
    for i, spec in enumerate(grid(preset, ws)):
        record = new_record(spec, ws, preset="fixed", planned_seeds=2)
        noise = spec.dataset["noise"]
        skill = {"gcn": 0.80, "gin": 0.86}[spec.model] - noise * (1.5 if spec.model == "gcn" else 1.0)
        acc = round(skill + 0.01 * spec.seed, 4)
        failed = i == 5
        record.update(
            status="failed" if failed else "done",
            created=f"2025-01-01T10:{i:02d}:00+0000",
            finished=None if failed else f"2025-01-01T11:{i:02d}:00+0000",
            duration=30.0 + i,
            attempts=1,
            metrics={} if failed else {"val_lap_acc": acc, "val_loss": round(1 - acc, 4), "train_loss": 0.5},
            params=4990,
            error="injected failure" if failed else None,
            tags=["baseline"] if spec.model == "gcn" else [],
            repro={} if failed else {"host": "testhost", "seed": spec.seed, "versions": {"torch": "x"}},
        )
        run_dir = Path(record["run_dir"])
        run_dir.mkdir(parents=True, exist_ok=True)
        lines = [{"v": 1, "event": "start", "epochs": 3, "t": 0.0}]
        for e in (1, 2, 3):  # as the worker writes them: each epoch's evaluation, then the epoch
            lines.append({"v": 1, "event": "eval", "epoch": e, "val_lap_acc": acc * e / 3, "t": float(e)})
            lines.append(
                {"v": 1, "event": "epoch", "epoch": e, "train_loss": 2.0 / e, "val_acc": acc * e / 3, "t": float(e)}
            )
        (run_dir / "events.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
        records.append(record)
    return records


def seeded_workspace(root: Path) -> Workspace:
    """A fresh workspace at ``root`` holding the fixed history."""
    from gaptui.history.store import History
    from gaptui.workspace import Workspace

    if root.exists():
        shutil.rmtree(root)
    ws = Workspace(root)
    with History(ws, write=True) as history:
        history.put_many(fixed_records(ws))
    return ws


def trial_records(ws) -> list[dict]:
    """Three trials of one row (values 0.5, 0.7, 0.6; the third's run still running) from the fixed history."""
    base = [r for r in fixed_records(ws) if r["status"] == "done"][:3]
    out = []
    for number, (record, value, status) in enumerate(
        zip(base, (0.5, 0.7, 0.6), ("done", "done", "running"), strict=True)
    ):
        out.append(
            {
                **record,
                "hash": f"{number:064x}",
                "id": f"tr{number:010d}",
                "status": status,
                "metrics": {"val_lap_acc": value} if status == "done" else {},
                "tags": ["study=zoo"],
                "tune": {"study": "zoo", "row": "er / gcn", "trials": [number], "of": 4, "metric": "val_lap_acc"},
            }
        )
    return out
