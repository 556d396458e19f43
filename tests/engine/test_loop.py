"""The shared epoch loop (engine.loop): exact resume, stop, non-finite loss, old checkpoints, packed seeds for
every family."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from engine.checkpoints import CHECKPOINT
from engine.errors import GaptuiError
from engine.events import read_events
from engine.gape.spec import GapeSpec
from engine.gape.train import run_gape
from engine.hardware import RunOptions
from engine.loop import TrainState, epoch_steps
from engine.properties.options import TrainOptions
from engine.properties.training import load_study_data, train_model
from engine.tasks import Cancelled, RunContext, RunFailed, run_steps
from tests.support.engine import Events, Line, Stopper


def _weights(path: Path) -> dict[str, torch.Tensor]:
    return torch.load(path / CHECKPOINT, weights_only=True)["model"]


def _same_weights(a: Path, b: Path) -> None:
    wa, wb = _weights(a), _weights(b)
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


# ---------------------------------------------------------------------------------------------------------------
# The loop itself, on a task of a few lines


def _loop(run_dir: Path, task: Line, should_stop: Any = lambda: False) -> tuple[Any, Events]:
    events = Events()
    ctx = RunContext(run_dir, events, lambda _text: None, should_stop)
    return run_steps(epoch_steps(task, ctx, "run-hash")), events


def test_stop_saves_then_cancels_and_the_resumed_run_equals_the_uninterrupted_one(tmp_path: Path) -> None:
    straight, _ = _loop(tmp_path / "straight", Line())
    # 4 batches + the check after epoch 1, one batch of epoch 2, then the stop before its second batch.
    with pytest.raises(Cancelled) as stop:
        _loop(tmp_path / "stopped", Line(), Stopper(6))
    assert stop.value.where == {"epoch": 1, "step": 5, "batch": 1}
    assert (tmp_path / "stopped" / CHECKPOINT).exists()
    resumed, events = _loop(tmp_path / "stopped", Line())
    assert events[0][0] == "start" and events[0][1]["resumed_from"] == {"epoch": 1, "batch": 1, "step": 5}
    assert [f["epoch"] for name, f in events if name == "epoch"] == [2, 3]
    assert resumed.metrics == straight.metrics and resumed.state.step == straight.state.step == 12
    _same_weights(tmp_path / "straight", tmp_path / "stopped")


def test_a_non_finite_loss_fails_the_run_naming_its_epoch_and_step(tmp_path: Path) -> None:
    with pytest.raises(RunFailed) as failed:
        _loop(tmp_path, Line(nan_at=6))
    assert failed.value.kind == "nan" and failed.value.event == {"epoch": 2, "step": 6}
    assert "epoch 2, step 6" in str(failed.value)


def test_a_checkpoint_of_another_run_or_a_newer_format_is_refused_in_one_line(tmp_path: Path) -> None:
    _loop(tmp_path, Line())
    ctx = RunContext(tmp_path, Events(), lambda _text: None, lambda: False)
    with pytest.raises(GaptuiError, match="belongs to another run spec"):
        run_steps(epoch_steps(Line(), ctx, "another-run"))
    ckpt = torch.load(tmp_path / CHECKPOINT, weights_only=True)
    (tmp_path / "checkpoint.json").unlink()
    torch.save({**ckpt, "format": 99}, tmp_path / CHECKPOINT)
    with pytest.raises(GaptuiError, match="checkpoint format 99, newer than this gaptui reads"):
        run_steps(epoch_steps(Line(), ctx, "run-hash"))


# ---------------------------------------------------------------------------------------------------------------
# GAPE and the property study: exact resume in the middle of an epoch


def test_gape_resumed_in_the_middle_of_an_epoch_equals_the_uninterrupted_run(tmp_path: Path) -> None:
    # LapPE: random sign flips per batch (replayed on resume); dropout: the global generator (restored).
    spec = GapeSpec(
        dataset={"base": "ringmol", "params": {"count": 40}},
        pe="lap",
        lap_k=4,
        layers=1,
        heads=2,
        budget=2000,
        epochs=2,
        batch_size=8,
        dropout=0.2,
        device="cpu",
        datasets_dir=str(tmp_path / "datasets"),
    )
    straight = run_gape(spec, tmp_path / "straight", Events())
    stopped = run_gape(spec, tmp_path / "stopped", Events(), should_stop=Stopper(2))
    assert stopped == {"status": "cancelled", "epoch": 0, "step": 2, "batch": 2}
    events = Events()
    resumed = run_gape(spec, tmp_path / "stopped", events)
    assert events[0][1]["resumed_from"] == {"epoch": 0, "batch": 2, "step": 2}
    assert resumed == straight
    _same_weights(tmp_path / "straight", tmp_path / "stopped")


def test_properties_resumed_in_the_middle_of_an_epoch_equals_the_uninterrupted_run(tmp_path: Path) -> None:
    data = load_study_data("irreflexive", "random", datasets_dir=tmp_path, graphs=200, sizes=3)
    options = TrainOptions(epochs=3, hidden=16, layers=2)
    _, straight = train_model(data.train, "mean", options, 1, Events(), run_dir=tmp_path / "straight")
    with pytest.raises(Cancelled) as stop:
        train_model(data.train, "mean", options, 1, Events(), run_dir=tmp_path / "stopped", should_stop=Stopper(6))
    assert stop.value.where["epoch"] == 1 and stop.value.where["batch"] == 1
    events = Events()
    _, resumed = train_model(data.train, "mean", options, 1, events, run_dir=tmp_path / "stopped")
    assert events[0][1]["resumed_from"]["batch"] == 1 and [f["epoch"] for n, f in events if n == "epoch"] == [2, 3]
    assert resumed == straight
    _same_weights(tmp_path / "straight", tmp_path / "stopped")


def test_a_property_checkpoint_of_the_old_layout_resumes(tmp_path: Path) -> None:
    """Before the shared loop, a property run saved {model, optimizer, epoch, last} after each epoch."""
    data = load_study_data("irreflexive", "random", datasets_dir=tmp_path, graphs=100, sizes=3)
    options = TrainOptions(epochs=2, hidden=8, layers=1)
    model, last = train_model(data.train, "mean", TrainOptions(epochs=1, hidden=8, layers=1), 0, Events())
    old = torch.optim.AdamW(model.parameters(), lr=options.lr, weight_decay=options.weight_decay)
    run = tmp_path / "run"
    run.mkdir()
    state = {"model": model.state_dict(), "optimizer": old.state_dict(), "epoch": 1, "last": last}
    torch.save(state, run / CHECKPOINT)
    events = Events()
    train_model(data.train, "mean", options, 0, events, run_dir=run)
    assert events[0][1]["resumed_from"] == {"epoch": 1, "batch": 0, "step": 0}
    assert [f["epoch"] for name, f in events if name == "epoch"] == [2]


# ---------------------------------------------------------------------------------------------------------------
# Packed seeds for every family


def _packed_equals_alone_and_alternates(tmp_path: Path, in_process: Any, specs: list[dict[str, Any]]) -> None:
    for i, spec in enumerate(specs):
        assert in_process([(spec, tmp_path / f"alone{i}")]) == 0
    assert in_process([(spec, tmp_path / f"packed{i}") for i, spec in enumerate(specs)]) == 0
    epochs = []
    for i in range(len(specs)):
        alone = json.loads((tmp_path / f"alone{i}" / "result.json").read_text())
        packed = json.loads((tmp_path / f"packed{i}" / "result.json").read_text())
        assert packed["status"] == "done" and packed["metrics"] == alone["metrics"]
        events = read_events(tmp_path / f"packed{i}" / "events.jsonl")[0]
        epochs += [(e["t"], i, e["epoch"]) for e in events if e["event"] == "epoch"]
    # One epoch each per turn: run 0's epoch 1, run 1's epoch 1, run 0's epoch 2...
    assert [(i, epoch) for _, i, epoch in sorted(epochs)] == [(0, 1), (1, 1), (0, 2), (1, 2)]


def test_packed_gape_seeds_take_turns_and_equal_separate_runs(tmp_path: Path, in_process: Any) -> None:
    common = {"task": "gape", "dataset": {"base": "ringmol", "params": {"count": 30}}, "pe": "rwpe", "layers": 1}
    common |= {"heads": 2, "budget": 2000, "epochs": 2, "batch_size": 8, "device": "cpu"}
    common["datasets_dir"] = str(tmp_path / "datasets")
    _packed_equals_alone_and_alternates(tmp_path, in_process, [{**common, "seed": s} for s in (0, 1)])


def test_packed_property_seeds_take_turns_and_equal_separate_runs(tmp_path: Path, in_process: Any) -> None:
    common = {"task": "properties", "property": "irreflexive", "pooling": "mean", "dimension": "generalisation"}
    common |= {"graphs": 100, "sizes": 3, "epochs": 2, "hidden": 8, "layers": 1, "device": "cpu"}
    common["datasets_dir"] = str(tmp_path / "datasets")
    _packed_equals_alone_and_alternates(tmp_path, in_process, [{**common, "seed": s} for s in (0, 1)])


def test_packed_toy_seeds_take_turns(tmp_path: Path, in_process: Any, toy: None) -> None:
    common = {"task": "toy", "size": 3, "steps": 2, "datasets_dir": str(tmp_path / "datasets")}
    _packed_equals_alone_and_alternates(tmp_path, in_process, [{**common, "seed": s} for s in (0, 1)])


# ---------------------------------------------------------------------------------------------------------------
# The precision option


def test_a_checkpoint_resumes_in_the_precision_it_was_written_in(tmp_path: Path) -> None:
    ctx = RunContext(tmp_path, Events(), lambda _text: None, Stopper(6))
    with pytest.raises(Cancelled):
        run_steps(epoch_steps(Line(), ctx, "run-hash", RunOptions("bf16", "cpu")))
    events = Events()
    ctx = RunContext(tmp_path, events, lambda _text: None, lambda: False)
    with pytest.raises(GaptuiError, match="written in bf16 precision and this run asks for fp32; run it with"):
        run_steps(epoch_steps(Line(), ctx, "run-hash", RunOptions("fp32", "cpu")))
    result = run_steps(epoch_steps(Line(), ctx, "run-hash", RunOptions("auto", "cpu")))  # auto follows the checkpoint
    assert result.precision == "bf16" and events[0][1]["precision"] == "bf16"
    assert torch.load(tmp_path / CHECKPOINT, weights_only=True)["precision"] == "bf16"


class Recorded(Line):
    """:class:`Line` as a family writes a task: no autocast, no precision anywhere; it records what the loop ran
    its forward pass and its loss in."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, bool, torch.dtype]] = []

    def forward(self, ids: torch.Tensor, state: TrainState) -> torch.Tensor:
        out = super().forward(ids, state)
        on = torch.is_autocast_enabled("cpu")
        self.seen.append(("forward", on, out.dtype))
        if on:
            assert torch.get_autocast_dtype("cpu") == torch.bfloat16
        return out

    def update(self, ids: torch.Tensor, out: torch.Tensor, state: TrainState) -> tuple[torch.Tensor, int]:
        on = torch.is_autocast_enabled("cpu")
        loss, weight = super().update(ids, out, state)
        self.seen.append(("loss", on, loss.dtype))
        return loss, weight


@pytest.mark.parametrize("precision", ["bf16", "fp32"])
def test_the_loop_runs_a_tasks_forward_in_the_runs_precision_and_its_loss_in_fp32(
    tmp_path: Path, precision: str
) -> None:
    task = Recorded()
    ctx = RunContext(tmp_path, Events(), lambda _text: None, lambda: False)
    result = run_steps(epoch_steps(task, ctx, "run-hash", RunOptions(precision, "cpu")))
    assert result.precision == precision
    forward = torch.bfloat16 if precision == "bf16" else torch.float32
    steps = task.epochs * task.steps_per_epoch
    assert task.seen == [("forward", precision == "bf16", forward), ("loss", False, torch.float32)] * steps
    assert all(w.dtype == torch.float32 for w in task.model.state_dict().values())  # fp32 master weights
    assert not torch.is_autocast_enabled("cpu")  # nothing left on after the run


def test_precision_enters_the_run_id_only_when_set() -> None:
    from engine.tasks import load_spec

    specs = [
        {"dataset": {"base": "er", "noise": 0.1, "params": {"n": 20, "degree": 5}}, "model": "gcn"},
        {"task": "gape", "dataset": {"base": "ringmol", "params": {"count": 30}}, "pe": "rwpe"},
        {"task": "properties", "property": "irreflexive", "pooling": "mean", "dimension": "generalisation"},
    ]
    for raw in specs:
        ids = {p: load_spec({**raw, "precision": p}).hash() for p in ("auto", "fp32", "bf16")}
        assert ids["auto"] == load_spec(raw).hash() and len(set(ids.values())) == 3
        with pytest.raises(GaptuiError, match="precision 'fp16' is not one of auto, fp32, bf16"):
            load_spec({**raw, "precision": "fp16"})


def test_every_family_trains_in_bf16_with_fp32_weights(
    tmp_path: Path, in_process: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    datasets = str(tmp_path / "datasets")
    alignment = {"dataset": {"base": "er", "noise": 0.1, "n_train": 20, "n_val": 10, "params": {"n": 20, "degree": 5}}}
    alignment |= {"model": "gin", "epochs": 2, "batch_size": 10, "budget": 5000, "out_dim": 16, "compile": "off"}
    gape = {"task": "gape", "dataset": {"base": "ringmol", "params": {"count": 30}}, "pe": "rwpe", "layers": 1}
    gape |= {"heads": 2, "budget": 2000, "epochs": 2, "batch_size": 8}
    props = {"task": "properties", "property": "irreflexive", "pooling": "mean", "dimension": "generalisation"}
    props |= {"graphs": 100, "sizes": 3, "epochs": 2, "hidden": 8, "layers": 1}
    # The families' tasks name no precision: the loop runs their forward pass under bf16 autocast.
    from engine.alignment.run import AlignmentTraining
    from engine.gape.train import GapeTraining
    from engine.properties.training import PropertyTraining

    seen: dict[str, set[tuple[bool, torch.dtype]]] = {}
    for name, cls in (("alignment", AlignmentTraining), ("gape", GapeTraining), ("properties", PropertyTraining)):

        def forward(self: Any, batch: Any, state: TrainState, name: str = name, original: Any = cls.forward) -> Any:
            out = original(self, batch, state)
            first = out[0] if isinstance(out, tuple) else out
            seen.setdefault(name, set()).add((torch.is_autocast_enabled("cpu"), first.dtype))
            return out

        monkeypatch.setattr(cls, "forward", forward)
    for name, spec in (("alignment", alignment), ("gape", gape), ("properties", props)):
        out = tmp_path / name
        assert in_process([({**spec, "precision": "bf16", "device": "cpu", "datasets_dir": datasets}, out)]) == 0
        result = json.loads((out / "result.json").read_text())
        assert result["status"] == "done" and result["precision"] == "bf16", name
        assert all(v == v for v in result["metrics"].values() if isinstance(v, float)), name  # no NaN
        start = next(e for e in read_events(out / "events.jsonl")[0] if e["event"] == "start")
        assert start["precision"] == "bf16"
        weights = _weights(out)
        assert all(w.dtype in (torch.float32, torch.int64, torch.bool) for w in weights.values()), name
    # alignment's forward returns the similarity, computed in fp32 from the bf16 embeddings
    assert seen == {
        "alignment": {(True, torch.float32)},
        "gape": {(True, torch.bfloat16)},
        "properties": {(True, torch.bfloat16)},
    }


class Compiling(Line):
    """A task that says whether compiling pays and counts the loop's calls to compile it."""

    def __init__(self, pays: bool) -> None:
        super().__init__()
        self.pays, self.compiled = pays, 0

    def compile_pays(self, device: Any) -> bool:
        return self.pays

    def compile(self) -> None:
        self.compiled += 1


@pytest.mark.parametrize(
    ("mode", "pays", "compiled"), [("on", False, 1), ("off", True, 0), ("auto", True, 1), ("auto", False, 0)]
)
def test_the_loop_applies_the_compile_option(tmp_path: Path, mode: str, pays: bool, compiled: int) -> None:
    task = Compiling(pays)
    ctx = RunContext(tmp_path, Events(), lambda _text: None, lambda: False)
    result = run_steps(epoch_steps(task, ctx, "run-hash", RunOptions(device="cpu", compile=mode)))
    assert task.compiled == compiled and result.state.epoch == task.epochs
