"""Publication figures (gaptui.figures) for a fixture history of each family: every declared kind is written, is a
valid image of the promised size, is not blank, and the same history gives the same bytes."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

from gaptui import figures  # noqa: E402
from tests.support.cli import run_cli  # noqa: E402
from tests.support.records import alignment_history, gape_history, properties_history  # noqa: E402


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


@pytest.mark.e2e
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
