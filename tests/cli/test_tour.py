"""The README's tour, run as a user runs it: every command of its blocks, in order, in one workspace, through the
CLI in a subprocess. Sizes are small (each README command has a stand-in with fewer epochs, graphs and runs, and
the real datasets are small files in the workspace's data folder), the order and the commands are the README's.

The whole tour is slow; the default suite runs the commands that need no training and checks that every command
of the README has its stand-in here, so a tour that changes changes this test."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from tests.support import ROOT
from tests.support.cli import run_cli
from tests.support.sources import (
    ARXIV_EDGES,
    OFFICIAL_SPLIT,
    SMILES,
    write_aqsol,
    write_arxiv_raw,
    write_cora,
    write_pcqm,
)

#: The README's sections whose ``bash`` blocks make the tour.
SECTIONS = ("## A tour", "## Publishing results")

#: A tiny alignment grid standing in for ``quick`` (same family, same axes; 2 epochs, 16 pairs).
QUICK = """
task = "alignment"
name = "tour-quick"
noise = [0.12, 0.24]
models = ["gcn", "gin"]
seeds = [0, 1]
laplacian = true

[run]
epochs = 2
batch_size = 8
budget = 4000
out_dim = 8

[[datasets]]
base = "er"
params = { n = 12, degree = 3 }
train = 16
val = 4
"""

#: A tiny GAPE chain standing in for ``gape-smoke`` (its datasets and PEs, fewer molecules and epochs).
GAPE = """
task = "gape"
name = "tour-gape"
pes = ["none", "rwpe", "gape"]
seeds = [0]

[[datasets]]
base = "ringmol"
params = { count = 60 }

[datasets.pretrain]
model = "gin"
noise = 0.15
out_dim = 16
epochs = 1
budget = 8000
batch_size = 20

[datasets.run]
layers = 1
heads = 2
budget = 4000
epochs = 2
batch_size = 16
"""

#: A tiny property grid standing in for ``properties-smoke`` (one property and pooling, the three dimensions).
PROPERTIES = """
task = "properties"
name = "tour-properties"
properties = ["irreflexive"]
poolings = ["mean"]
dimensions = ["generalisation", "sensitivity", "robustness"]
seeds = [0]

[run]
epochs = 1
graphs = 60
sizes = 2
hidden = 16
"""

#: A tiny BREC grid standing in for ``brec-smoke`` (one pair of two categories, one model, the exact 3-WL row).
BREC = """
task = "brec"
name = "tour-brec"
models = ["gin"]
categories = ["basic", "regular"]
wl = ["3-wl"]
seeds = [0]

[run]
pairs = 1
epochs = 1
budget = 4000
"""


@dataclass(frozen=True)
class Step:
    """The stand-in of one README command: its arguments (``{name}`` placeholders filled as the tour goes) and
    whether it must succeed, or be refused in one ``error:`` line (a placeholder no machine can fetch offline)."""

    args: str
    refused: bool = False
    #: Needs no training: part of the default suite's short tour.
    fast: bool = False


#: README command (without ``gaptui`` and its comment) -> its stand-in.
STEPS = {
    "datasets build er --noise 0.12": Step("datasets build er --noise 0.12 --train 16 --val 4 -p n=12", fast=True),
    "models": Step("models", fast=True),
    "train --base er --noise 0.12 --model gatv2 --epochs 20 --train 1000 --val 200": Step(
        "train --base er --noise 0.12 --model gatv2 --epochs 2 --train 16 --val 4 -p n=12 -p degree=3"
    ),
    "train --base er --noise 0.12 --model gat --epochs 20 --recipe ngab": Step(
        "train --base er --noise 0.12 --model gat --epochs 2 --recipe ngab --train 16 --val 4 -p n=12 -p degree=3"
    ),
    "run --preset quick": Step("run --preset {quick}"),
    # The estimate calibrates this machine for minutes: the plan and its checks are what the tour shows here.
    "run --preset paper --dry-run": Step("run --preset paper --dry-run --no-estimate", fast=True),
    "history --filter model=gin --filter noise=0.12": Step("history --filter model=gin --filter noise=0.12"),
    "show 3f2a9c1b2d4e": Step("show {alignment_run}"),
    "diff 3f2a9c1b2d4e 7a8b9c0d1e2f": Step("diff {alignment_run} {alignment_other_run}"),
    "table --format latex": Step("table --format latex"),
    "table --reference paper": Step("table --reference paper"),
    "gap": Step("gap"),
    "export --out paper-tables/": Step("export --out {dir}/paper-tables/"),
    "export --wandb my-project": Step("export --wandb my-project"),
    # NAME stands for a dataset of the Hub: offline, one line naming the folder and the files to place.
    "train --base pairs -p hub=NAME --noise 0.12 --model gin": Step(
        "train --base pairs -p hub=NAME --noise 0.12 --model gin", refused=True, fast=True
    ),
    # graspologic's mice in its own layout (20 regions, 8 mice), read from the folder the path parameter names.
    "train --base connectome --noise 0.19 --model gatv2": Step(
        "train --base connectome -p path={mice} --noise 0.19 --model gatv2 --epochs 1"
    ),
    "probe 3f2a9c1b2d4e --figures probes/": Step("probe {alignment_run} --figures {dir}/probes/"),
    "run --preset gape-smoke": Step("run --preset {gape}"),
    "table --task gape --reference paper": Step("table --task gape --reference paper"),
    "train --task gape --preset gape-smoke --where pe=rwpe": Step("train --task gape --preset {gape} --where pe=rwpe"),
    "gape embed 3f2a9c1b2d4e --dataset aqsol --out pe.npz": Step(
        "gape embed {alignment_run} --dataset aqsol --out {dir}/pe.npz"
    ),
    "properties list": Step("properties list", fast=True),
    "run --preset properties-smoke --cpu-jobs 2": Step("run --preset {properties} --cpu-jobs 2"),
    "table --task properties --reference paper": Step("table --task properties --reference paper"),
    "properties export --out published/ -p transitive": Step(
        "properties export --out {dir}/published/ -p transitive --graphs 20 --sizes 1 -j 1"
    ),
    "properties score RUN my_graph.txt kg.csv --explain": Step(
        "properties score {properties_run} {dir}/my_graph.txt {dir}/kg.csv --explain"
    ),
    "brec wl": Step("brec wl -c basic", fast=True),
    "run --preset brec-smoke --cpu-jobs 2": Step("run --preset {brec} --cpu-jobs 2"),
    "brec table": Step("brec table"),
    "table --task brec --reference paper": Step("table --task brec --reference paper"),
    "stats --format latex": Step("stats --format latex"),
    "figures --out figs/ --format pdf": Step("figures --out {dir}/figs/ --format pdf"),
    "report --out study/": Step("report --out {dir}/study/"),
}


def tour_commands() -> list[str]:
    """The commands of the README's tour, in order: each ``gaptui`` line of its sections' bash blocks."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    commands = []
    for heading in SECTIONS:
        section = text.split(heading, 1)[1].split("\n## ", 1)[0]
        for block in re.findall(r"```bash\n(.*?)```", section, re.S):
            for line in block.splitlines():
                command = re.split(r"\s#", line, maxsplit=1)[0].strip()
                if command.startswith("gaptui "):
                    commands.append(command.removeprefix("gaptui "))
    return commands


def test_every_command_of_the_tour_has_its_stand_in() -> None:
    assert tour_commands() == list(STEPS)


def real_data(data: Path) -> None:
    """Small files of the paper's real datasets in the workspace's data folder, in their libraries' layouts."""

    write_aqsol(data)
    write_cora(data)
    write_arxiv_raw(data / "ogbn-arxiv" / "ogbn_arxiv" / "raw", ARXIV_EDGES, 42)
    write_pcqm(data, SMILES, {k: np.asarray(v) for k, v in OFFICIAL_SPLIT.items()})


class Tour:
    """One workspace the tour's commands run in, and the values its placeholders take as it goes."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.ws = root / "ws"
        real_data(self.ws / "data")
        self.values = {"dir": str(root)}
        from tests.support.sources import write_mice

        write_mice(root / "mice")
        self.values["mice"] = str(root / "mice")
        for name, text in (("quick", QUICK), ("gape", GAPE), ("properties", PROPERTIES), ("brec", BREC)):
            (root / f"{name}.toml").write_text(text)
            self.values[name] = str(root / f"{name}.toml")
        (root / "my_graph.txt").write_text("a b\nb c\nc a\n")
        (root / "kg.csv").write_text("head,relation,tail\nann,parent_of,bob\nbob,parent_of,cid\nann,knows,cid\n")
        self.env = {"GAPTUI_WORKSPACE": str(self.ws), "OMP_NUM_THREADS": "1", "WANDB_MODE": "offline"}
        self.env |= {"WANDB_SILENT": "true", "WANDB_API_KEY": ""}

    def run(self, command: str) -> None:
        step = STEPS[command]
        self.values |= self.run_ids()
        args = step.args.format(**self.values).split()
        res = run_cli(*args, env=self.env, timeout=900, cwd=self.root)
        said = f"gaptui {' '.join(args)}\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
        if step.refused:
            lines = res.stderr.strip().splitlines()
            assert res.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), said
        else:
            assert res.returncode == 0, said
            assert "error:" not in res.stderr and "Traceback" not in res.stderr, said

    def run_ids(self) -> dict[str, str]:
        """The first finished run of each family (what ``3f2a9c1b2d4e`` and ``RUN`` stand for), and its second
        (``7a8b9c0d1e2f``)."""
        if not (self.ws / "history.json").exists():
            return {}
        from gaptui.history.store import read_records
        from gaptui.workspace import Workspace

        ids = {}
        for record in sorted(read_records(Workspace(self.ws)), key=lambda r: r.get("created") or ""):
            if record["status"] == "done" and record.get("axes", {}).get("model") != "laplacian":
                first = ids.setdefault(f"{record['task']}_run", record["id"])
                if first != record["id"]:  # the second, for ``diff``
                    ids.setdefault(f"{record['task']}_other_run", record["id"])
        return ids


@pytest.mark.e2e
def test_the_tour_steps_that_need_no_training(tmp_path: Path) -> None:
    tour = Tour(tmp_path)
    for command in tour_commands():
        if STEPS[command].fast:
            tour.run(command)
    paper = run_cli("run", "--preset", "paper", "--dry-run", "--no-estimate", env=tour.env, cwd=tmp_path)
    assert "preset paper (task alignment): 2040 runs" in paper.stdout, paper.stdout + paper.stderr


@pytest.mark.e2e
@pytest.mark.slow
def test_the_whole_tour_in_one_workspace(tmp_path: Path) -> None:
    tour = Tour(tmp_path)
    for command in tour_commands():
        tour.run(command)
    # What the tour promised is there: tables, figures of every family, the report, the embeddings.
    assert (tmp_path / "paper-tables" / "tables.tex").read_text().strip()
    assert {p.name.split("-")[0] for p in (tmp_path / "figs").glob("*.pdf")} == {
        "alignment",
        "gape",
        "properties",
        "brec",
    }
    assert (tmp_path / "study" / "report.html").stat().st_size > 0
    assert np.load(tmp_path / "pe.npz")["pe"].shape[0] > 0
    runs = json.loads(run_cli("history", "--json", "--limit", "0", env=tour.env, cwd=tmp_path).stdout)
    assert {r["task"] for r in runs} == {"alignment", "gape", "properties", "brec"}
    assert all(r["status"] == "done" for r in runs), [(r["id"], r["status"], r.get("error")) for r in runs]
    assert os.listdir(tmp_path / "published")
