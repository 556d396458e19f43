"""Publication figures (gaptui.figures) for a fixture history of each family: every declared kind is written, is a
valid image of the promised size, is not blank, and the same history gives the same bytes."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("matplotlib")

from engine.properties.definitions import PROPERTY_NAMES  # noqa: E402
from gaptui import figures  # noqa: E402
from tests.conftest import run_cli  # noqa: E402

MODELS = ("gcn", "gin", "gat")
NOISES = (0.04, 0.12, 0.24)


def _events(folder: Path, epochs: int, quality: float, metric: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    lines = []
    for e in range(1, epochs + 1):
        lines.append({"v": 1, "event": "epoch", "t": float(e), "epoch": e, "train_loss": 3.0 / e + 1 - quality})
        lines.append({"v": 1, "event": "eval", "t": float(e), "epoch": e, metric: quality * (1 - 0.5 / e)})
    (folder / "events.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))


def _record(n: int, task: str, axes: dict[str, Any], seed: int, metrics: dict[str, float], run_dir: Path | None):
    return {
        "id": f"{n:012x}",
        "hash": f"{n:064x}",
        "status": "done",
        "task": task,
        "axes": axes,
        "seed": seed,
        "metrics": metrics,
        "finished": "2026-01-01T00:00:00",
        "run_dir": str(run_dir) if run_dir else None,
        "planned_seeds": 3,
    }


def alignment_history(root: Path) -> list[dict[str, Any]]:
    rng = random.Random(0)
    records = []
    for m, model in enumerate(MODELS):
        for noise in NOISES:
            for seed in range(3):
                acc = 0.9 - noise * (1.5 + m) + rng.uniform(-0.02, 0.02)
                folder = root / "runs" / f"a{len(records)}"
                _events(folder, 6, acc, "val_lap_acc")
                axes = {"dataset": "er", "noise": noise, "model": model}
                records.append(_record(len(records), "alignment", axes, seed, {"val_lap_acc": acc}, folder))
    return records


def gape_history(root: Path) -> list[dict[str, Any]]:
    rng = random.Random(1)
    records = []
    for p, pe in enumerate(("none", "rwpe", "gape")):
        for dataset in ("aqsol", "zinc"):
            for seed in range(3):
                mae = 1.2 - 0.1 * p + rng.uniform(-0.03, 0.03)
                folder = root / "runs" / f"g{len(records)}"
                _events(folder, 4, mae, "val_mae")
                axes = {"pe": pe, "dataset": dataset}
                records.append(_record(1000 + len(records), "gape", axes, seed, {"val_mae": mae}, folder))
    return records


def properties_history() -> list[dict[str, Any]]:
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
                    records.append(_record(5000 + len(records), "properties", axes, seed, metrics, None))
    return records


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", path
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def _not_blank(path: Path) -> bool:
    import matplotlib.image as mpimg

    pixels = mpimg.imread(path)
    return float(pixels[..., :3].std()) > 0.02


@pytest.mark.parametrize(
    ("task", "kinds"),
    [
        ("alignment", {"lines-er", "gap-er", "curves-er", "cd"}),
        ("gape", {"bars-gape", "curves-gape", "cd"}),
        (
            "properties",
            {
                "heatmap-generalisation",
                "heatmap-sensitivity",
                "bars-table-2-mean-r-score",
                "bars-pooling-advice-mean-r-score-per-property-class",
                "series-generalisation",
                "series-sensitivity",
                "cd",
            },
        ),  # fmt: skip
    ],
)
def test_every_declared_figure_is_drawn(tmp_path: Path, task: str, kinds: set[str]) -> None:
    records = {
        "alignment": lambda: alignment_history(tmp_path),
        "gape": lambda: gape_history(tmp_path),
        "properties": properties_history,
    }[task]()
    files = figures.figure_files(records, tmp_path / "fig", task)
    names = {p.stem.removeprefix(f"{task}-") for p in files}
    assert names == kinds
    for path in files:
        width, height = _png_size(path)
        assert width >= 600 and height > 100, (path, width, height)
        assert _not_blank(path), path


def test_figures_are_deterministic_and_other_formats(tmp_path: Path) -> None:
    records = alignment_history(tmp_path)
    first = {p.name: p.read_bytes() for p in figures.figure_files(records, tmp_path / "a", "alignment")}
    second = {p.name: p.read_bytes() for p in figures.figure_files(records, tmp_path / "b", "alignment")}
    assert first == second
    (pdf,) = [p for p in figures.figure_files(records, tmp_path / "pdf", "alignment", "pdf") if "lines" in p.name]
    assert pdf.read_bytes().startswith(b"%PDF") and b"/FontFile2" in pdf.read_bytes()  # TrueType embedded
    svg = tmp_path / "svg"
    assert all(
        p.read_text().lstrip().startswith("<?xml") for p in figures.figure_files(records, svg, "alignment", "svg")
    )


def test_learning_curves_are_medians_over_seeds(tmp_path: Path) -> None:
    from gaptui import analysis

    records = alignment_history(tmp_path)
    (table,) = analysis.build_tables(records)
    curves = figures.learning_curves(table, records)
    gin = curves[0.12]["gin"]
    assert sorted(gin["loss"]) == list(range(1, 7)) and sorted(gin["metric"]) == list(range(1, 7))
    cell = [r for r in records if r["axes"]["model"] == "gin" and r["axes"]["noise"] == 0.12]
    expected = sorted(r["metrics"]["val_lap_acc"] for r in cell)[1]
    assert gin["metric"][6] == pytest.approx(expected * (1 - 0.5 / 6))


def test_figures_command(tmp_path: Path) -> None:
    from gaptui.history.store import History
    from gaptui.workspace import Workspace

    ws = Workspace.resolve(tmp_path / "ws")
    ws.root.mkdir(parents=True)
    with History(ws, write=True) as history:
        history.put_many(gape_history(tmp_path))
    res = run_cli("figures", "--task", "gape", "--out", str(tmp_path / "out"), "--workspace", str(ws.root))
    assert res.returncode == 0, res.stderr
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [".gaptui-figures.json", "gape-bars-gape.png",
                                                                     "gape-cd.png", "gape-curves-gape.png"]  # fmt: skip
    assert "gape-bars-gape.png" in res.stdout
    res = run_cli("figures", "--format", "gif", "--out", str(tmp_path / "o2"), "--workspace", str(ws.root))
    assert res.returncode == 2 and res.stderr.strip().startswith("error:") and not (tmp_path / "o2").exists()
