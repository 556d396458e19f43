"""A run's identity: one pinned run id per family of every shipped preset, and the declared rule that keeps them.

A run id is :meth:`engine.tasks.TaskSpec.run_id`, SHA-256 of the spec's canonical form. Options added after runs
were recorded are declared on the spec class (``HASHED_WHEN_SET``) and hashed only away from their old value, so a
new option leaves the ids of every run from before it as they were. A new field that forgets the declaration
changes every id below.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import pytest
import tomllib

from engine.tasks import Placement, TaskSpec, family
from tests.support import ROOT

PRESETS = ROOT / "presets"
PLACEMENT = Placement("/tmp/unused/datasets", "/tmp/unused/raw")

#: Per shipped preset and per family in its grid: the run id of its first run that trains a model (in grid order;
#: the first run where none trains). These are the ids the runs had before the rule moved onto the spec base.
PINNED = {
    "brec-smoke": {"brec": "fade0a18b91012af9e96f1d54f8b8c6a31e40de63e83712f79e9e88ec32795b3"},
    "brec": {"brec": "2832c9584e241a0314223a9091ee7410b40013cbd1bdf1718bc16a7d01134c2b"},
    "gape-smoke": {
        "alignment": "6ac4b8fc4cd55bb7988314d0a2019173c94d4441d397af0909342338b6b10533",
        "gape": "d4faa0e05418842508ed5fa9fb5010871d36d6e46a21c24310ba4770bd9ac5e6",
    },
    "gape": {
        "alignment": "ea5beb21894c6ab1e96d930d91d4f1d8ec201b225608e860c80e096c598d0b30",
        "gape": "44fbe018d2edee87f65a42a2fa3995532910c89d1714774990c5e3f3bb494107",
    },
    "paper": {"alignment": "321d4bb92843d32be46707bb5340ee9cb8dddbbb761f7fb6a4b92f4aa6200ada"},
    "properties-smoke": {"properties": "6a8b43f572f30f33bda2d3d0f4f38e0bc274df60e3190a185dea844f8aa207dc"},
    "properties-strategies": {"properties": "d424c27d1def31fcd37b1d6fd9aaf2e46b065c6ba7932b5caffd9e0b37aa53e4"},
    "properties": {"properties": "135e7050cf06097f9c578ab84da53f13633a569aa3a04f49cb4aacc3da4b1569"},
    "quick": {"alignment": "36bd38d35f125cc4e9cb7778bde4db1de2d7c84b8710f88ac192794e8e080443"},
    "smoke": {"alignment": "12c2175147b591cd8f257b865ca9ff3e1ad980fbd350bfabc77c8e9214a3aded"},
    "solvers": {"alignment": "2b3a6220277db3642726727b7b954eaa133c68b66c26c8d58e574fee86ab8541"},
    "zoo-cpu": {"alignment": "fe669f37e94c11e3589da6c79f450dbea7fddf3bae61c5afd287d5ec3410e9ad"},
    "zoo-smoke": {"alignment": "ac6c34c325aed9622658111f6210c3c3398e05ca265998458717b334c2397d0e"},
    "zoo": {"alignment": "36b68ff6e06135184c0eb94a43e1cebb827ca857e402568a5cec0bc6b26d63f1"},
}


def _trains(spec: Any) -> bool:
    if spec.task == "alignment":
        return bool(spec.trained)
    if spec.task == "brec":
        return not spec.is_wl
    return True


def _grid(name: str) -> list[Any]:
    import engine.alignment.solvers  # noqa: F401  # the solver rows a preset may name

    path = PRESETS / f"{name}.toml"
    raw = tomllib.loads(path.read_text())
    fam = family(raw.get("task", "alignment"))
    return list(fam.grid(fam.parse_preset(raw, str(path), path), PLACEMENT))


def test_every_shipped_preset_is_pinned() -> None:
    assert sorted(p.stem for p in PRESETS.glob("*.toml")) == sorted(PINNED)


@pytest.mark.parametrize("name", sorted(PINNED))
def test_a_shipped_preset_keeps_one_run_id_per_family(name: str) -> None:
    specs = _grid(name)
    first: dict[str, Any] = {}
    for spec in [s for s in specs if _trains(s)] + specs:
        first.setdefault(spec.task, spec)
    assert {task: spec.run_id() for task, spec in first.items()} == PINNED[name]
    for spec in first.values():
        if _trains(spec):  # precision is declared hashed only when set in every built-in family
            assert type(spec).HASHED_WHEN_SET["precision"] == "auto" and spec.precision == "auto"
            assert "precision" not in spec.canonical()
            fp32 = spec.replace(precision="fp32")
            assert fp32.canonical()["precision"] == "fp32" and fp32.run_id() != spec.run_id()


@dataclass(frozen=True)
class _Before(TaskSpec):
    task: str = "toy"
    seed: int = 0
    size: int = 3
    device: str = "auto"


@dataclass(frozen=True)
class _After(TaskSpec):
    """``_Before`` with two options added later, declared with the values every earlier run had."""

    task: str = "toy"
    seed: int = 0
    size: int = 3
    device: str = "auto"
    width: int = 8
    mode: str | None = None

    HASHED_WHEN_SET: ClassVar[dict[str, Any]] = {"width": 8, "mode": None}


def test_an_option_declared_hashed_when_set_keeps_the_ids_from_before_it() -> None:
    before = _Before(size=5, seed=2)
    assert _After(size=5, seed=2).run_id() == before.run_id()
    assert _After(size=5, seed=2, device="cuda").run_id() == before.run_id()  # placement is never hashed
    assert _After(size=5, seed=2, width=16).run_id() != before.run_id()
    assert _After(size=5, seed=2, mode="x").canonical() == {"task": "toy", "seed": 2, "size": 5, "mode": "x"}
    assert _After(size=5).reseeded(2).run_id() == before.run_id()  # a grid's later seeds hash the same way
    assert _After(size=5).hash() == _After(size=5).run_id()
