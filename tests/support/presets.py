"""Preset files as a user writes them: a tiny alignment grid, the same with a [tune] study, a toy-family grid, and
the in-memory tiny preset of the terminal app's tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from engine.alignment.preset import Preset

#: A tiny grid's [run] table: seconds of training per run on one thread.
TINY_RUN = {"epochs": 2, "batch_size": 10, "budget": 5000, "out_dim": 8}
#: Its one dataset: ER graphs of 16 nodes.
TINY_DATASET = {"base": "er", "params": {"n": 16, "degree": 4}, "train": 20, "val": 6}
#: The [tune] tables of a small study (``{trials}`` and ``{space}`` to fill).
TUNE = """
[tune]
trials = {trials}
at = 0.2
sampler = "random"
seed = 3
[tune.space]
lr = {{ log = [1e-4, 1e-2] }}
{space}
"""
#: A user model in a local file: importing it says so on stderr and leaves a marker file beside it.
PROBE = """
import sys
from pathlib import Path

import torch

Path(__file__).with_name("imported").write_text("imported")
sys.stderr.write("probe module imported\\n")


class Model(torch.nn.Module):
    def __init__(self, *, out_dim, budget, in_dim):
        super().__init__()
        self.out = torch.nn.Linear(in_dim, out_dim)

    def forward(self, x, edge_index, batch=None):
        return self.out(x)
"""


def toml_value(value: Any) -> str:
    """``value`` as TOML: an inline table for a dict, JSON's spelling for the rest (lists, strings, numbers)."""
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + " }"
    return json.dumps(list(value) if isinstance(value, tuple) else value)


def table(values: dict[str, Any]) -> str:
    """``key = value`` lines (None: the key left out)."""
    return "".join(f"{k} = {toml_value(v)}\n" for k, v in values.items() if v is not None)


def alignment_preset(
    folder: Path,
    name: str = "tiny",
    *,
    noise: tuple[float, ...] | list[float] = (0.05, 0.2),
    models: tuple[str, ...] | list[str] = ("gcn", "gin"),
    seeds: tuple[int, ...] | list[int] = (0,),
    laplacian: bool | None = False,
    description: str | None = "test grid",
    run: dict[str, Any] | None = None,
    run_lines: str = "",
    dataset: dict[str, Any] | None = None,
    tail: str = "",
) -> Path:
    """Write ``folder/NAME.toml``, a tiny alignment grid: ``run`` and ``dataset`` update ``TINY_RUN`` and
    ``TINY_DATASET`` (a None value leaves the key out), ``run_lines`` is raw text added to [run], ``tail`` raw text
    after the dataset (more tables: [slurm], [tune])."""
    head = {"description": description, "noise": noise, "models": models, "seeds": seeds, "laplacian": laplacian}
    text = table(head) + "\n[run]\n" + table({**TINY_RUN, **(run or {})}) + run_lines
    text += "\n\n[[datasets]]\n" + table({**TINY_DATASET, **(dataset or {})}) + tail
    path = folder / f"{name}.toml"
    path.write_text(text)
    return path


def tune_preset(folder: Path, models: str = '["gcn", "gin"]', trials: int = 2, space: str = "layers = [2, 3]") -> Path:
    """Write ``folder/study.toml``: a small study of ``models`` (TOML text), ``trials`` per row over lr and
    ``space`` (TOML lines of [tune.space]) on ER graphs of 20 nodes."""
    return alignment_preset(
        folder,
        "study",
        models=json.loads(models),
        seeds=(0, 1),
        description="a tiny study",
        run={"batch_size": 20, "budget": 3000},
        dataset={"params": {"n": 20, "degree": 4}, "train": 40, "val": 10},
        tail=TUNE.format(trials=trials, space=space),
    )


def toy_preset(folder: Path, name: str = "toy", **fields: Any) -> Path:
    """Write ``folder/NAME.toml``: a grid of the toy plug-in family (2 sizes x 2 models x 2 seeds), ``fields``
    updating its keys."""
    doc = {"task": "toy", "sizes": [2, 3], "models": ["mean", "median"], "seeds": [0, 1], "steps": 2, **fields}
    path = folder / f"{name}.toml"
    path.write_text(table(doc))
    return path


def tiny_preset(epochs: int = 2, noise: tuple[float, ...] = (0.05, 0.2), models: tuple[str, ...] = ("gcn",)) -> Preset:
    """The tiny grid as a ``Preset`` (what the app's form builds)."""
    from engine.alignment.preset import DatasetEntry, Preset, RunOptions

    return Preset(
        name="tiny",
        description="test grid",
        datasets=(DatasetEntry("er", {"n": 16, "degree": 4}, train=20, val=6),),
        noise=noise,
        models=models,
        seeds=(0,),
        run=RunOptions(epochs=epochs, batch_size=10, budget=5000, out_dim=8),
    )
