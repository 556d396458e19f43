"""The shared epoch loop of every task family: resume, checkpoints, stop, non-finite loss, events, packed seeds.

A family writes its training step and its evaluation only, as an :class:`EpochTask`; :func:`epoch_steps` does
the rest, the same way for every family:

- **Resume at the exact position.** The checkpoint (``checkpoint.pt`` in the run folder, written atomically with
  its size and SHA-256 by :class:`engine.checkpoints.Checkpoints`, which resumes from it; the previous one is
  kept) holds the :class:`TrainState` (completed epochs, batches of the current epoch, optimiser steps, the
  running loss of the epoch), the state of every part the task names (model, optimiser, scheduler:
  :meth:`EpochTask.parts`), the task's own fields and the random generators (torch, CUDA, NumPy, ``random``). A
  run stopped in the middle of an epoch and resumed ends with the same weights and metrics as the uninterrupted
  run, provided the task's batch order is a pure function of (seed, epoch) (:func:`epoch_order`) and its epoch
  starts at ``state.batch_in_epoch``. The body of an epoch is :func:`epoch_body`.
- **Stop.** ``should_stop()`` is polled between batches (by :func:`run_batches`) and after each epoch: the
  checkpoint is saved, then :class:`~engine.tasks.Cancelled` names the epoch, step and batch reached.
- **Non-finite loss.** :class:`NonFiniteLoss` (raised by :func:`run_batches`) becomes
  :class:`~engine.tasks.RunFailed` of kind ``nan`` whose message and ``error`` event name the epoch and step.
- **Events.** ``start`` (``run``, ``epochs``, ``steps_per_epoch``, ``resumed_from``, ``pid`` and the task's
  :meth:`EpochTask.start_fields`), then per epoch ``eval`` (when the task evaluated: ``epoch``, ``seconds`` and
  its metrics) and ``epoch`` (``epoch``, ``step``, the epoch's :meth:`EpochTask.summary` such as ``train_loss``,
  ``lr``, ``seconds`` and :meth:`EpochTask.epoch_fields`). ``done`` / ``cancelled`` / ``error`` are the worker's.
- **Packed seeds.** :func:`epoch_steps` is a generator that yields after each epoch: the worker drives the runs of
  a pack in turn (``engine.worker.interleave``), each with its own random state; :func:`engine.tasks.run_steps`
  runs one alone.
- **Precision and device.** The run's :class:`~engine.hardware.RunOptions` say which device and precision; the
  step comes in three parts (:meth:`EpochTask.batches`, :meth:`EpochTask.forward`, :meth:`EpochTask.update`) and
  :func:`run_epoch` runs the forward pass under the run's autocast (:func:`engine.hardware.autocast`: bf16 for a
  ``precision = "bf16"`` run, nothing for fp32) and the update (loss, backward, optimiser) outside it. A family
  never reads the precision; only the model's forward pass is ever in bf16, while similarities, softmax, losses,
  evaluation, weights and optimiser state stay fp32. The checkpoint records the precision and a resumed run keeps
  it.

The helpers every family's step shares live here too: :func:`make_optimiser`, :func:`epoch_order`,
:func:`seed_everything`; the device and the precision are :mod:`engine.hardware`'s.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Generator, Iterable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from engine.checkpoints import Checkpoints
from engine.hardware import RunOptions, autocast, resolve_device, resolve_precision
from engine.tasks.run import Cancelled, RunContext, RunFailed

if TYPE_CHECKING:
    import torch


#: Training steps between two reads of the loss from the device (see :func:`run_batches`).
CHECK_EVERY = 25

# ------------------------------------------------------------------------------------------------ shared helpers


class NonFiniteLoss(RuntimeError):
    """The loss of optimiser step ``step`` (1-based, counted over the run) in epoch ``epoch`` was not finite."""

    def __init__(self, epoch: int, step: int, value: float) -> None:
        super().__init__(f"loss became {value} at epoch {epoch}, step {step}; lower lr or use clip_mode=norm")
        self.epoch, self.step = epoch, step


#: Learning-rate schedules, each stepped once per optimiser step (see :func:`make_optimiser`).
SCHEDULES = ("one-cycle", "constant", "cosine")


def make_optimiser(
    model: Any, lr: float, weight_decay: float, total_steps: int, warmup_steps: int, schedule: str = "one-cycle"
) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]:
    """AdamW and a learning-rate schedule stepped once per optimiser step.

    ``one-cycle``: PyTorch's one-cycle (cosine up to ``lr`` over ``warmup_steps``, then cosine annealing to
    ``lr / 1e4`` at ``total_steps``). ``constant``: linear warm-up from 0 over ``warmup_steps``, then ``lr``.
    ``cosine``: the same warm-up, then half a cosine from ``lr`` to 0 at ``total_steps``. Every schedule has
    a ``total_steps`` attribute, the count its callers step it up to.
    """
    import math

    import torch

    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {', '.join(SCHEDULES)}, got {schedule!r}")
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    total_steps = max(total_steps, 2)
    if schedule == "one-cycle":
        # One warm-up step makes OneCycleLR's first phase 0 steps long (a division by zero in its first step): a
        # thousandth of a step more is the same schedule to the precision it is stepped at.
        warm = warmup_steps + 1e-3 if warmup_steps == 1 else warmup_steps
        pct = min(max(warm / total_steps, 1e-6), 0.999)
        return opt, torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=total_steps, pct_start=pct)
    warm = max(int(warmup_steps), 0)

    def factor(step: int) -> float:
        if step < warm:
            return (step + 1) / (warm + 1)
        if schedule == "constant":
            return 1.0
        done = min((step - warm) / max(total_steps - warm, 1), 1.0)
        return 0.5 * (1.0 + math.cos(math.pi * done))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, factor)
    sched.total_steps = total_steps  # type: ignore[attr-defined]  # as OneCycleLR's, which callers step up to
    return opt, sched


def epoch_order(seed: int, epoch: int, count: int) -> torch.Tensor:
    """The shuffle of epoch ``epoch`` (1-based), a pure function of (seed, epoch): resuming replays it exactly."""
    import torch

    gen = torch.Generator().manual_seed((int(seed) * 1_000_003 + int(epoch)) % (1 << 63))
    return torch.randperm(count, generator=gen)


def seed_everything(seed: int) -> None:
    import random

    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed % (1 << 32))
    torch.manual_seed(seed)


# ------------------------------------------------------------------------------------------------ the loop


@dataclass
class TrainState:
    """Where training stands; saved in checkpoints so a restarted worker continues at the same batch."""

    epoch: int = 0  # completed epochs
    batch_in_epoch: int = 0  # completed batches of the current (epoch + 1) epoch
    step: int = 0  # optimiser steps over the run
    loss_sum: float = 0.0  # sum over the epoch's batches of loss x weight (real nodes, graphs)
    loss_nodes: int = 0  # sum of the weights
    #: Other running sums of the epoch a task keeps (correct predictions...), reset with the epoch.
    tally: dict[str, float] = field(default_factory=dict)

    @property
    def mean_loss(self) -> float:
        return self.loss_sum / max(self.loss_nodes, 1)

    @classmethod
    def restored(cls, saved: dict[str, Any]) -> TrainState:
        """The state a checkpoint saved (fields this version does not know are left out)."""
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in saved.items() if k in known})

    def next_epoch(self) -> None:
        self.epoch, self.batch_in_epoch, self.loss_sum, self.loss_nodes, self.tally = self.epoch + 1, 0, 0.0, 0, {}


class TrainingStep(Protocol):
    """A training step in the three parts :func:`run_epoch` drives (see :class:`EpochTask`)."""

    def batches(self, state: TrainState) -> Iterable[Any]: ...

    def forward(self, batch: Any, state: TrainState) -> Any: ...

    def update(self, batch: Any, out: Any, state: TrainState) -> tuple[Any, Any]: ...


class EpochTask:
    """What a family writes for :func:`epoch_steps`: its training step and its evaluation.

    Required: :attr:`epochs`, :meth:`parts` (the objects with ``state_dict`` / ``load_state_dict`` a checkpoint
    holds: ``{"model": ..., "optimizer": ..., "scheduler": ...}``) and the step, in three parts the loop drives
    (:func:`run_epoch`): :meth:`batches`, :meth:`forward` (run under the run's autocast) and :meth:`update` (run
    outside it). The task never reads the run's precision: the loop applies it. The rest has defaults.
    """

    #: Epochs to train; :attr:`steps_per_epoch` is reported in the ``start`` event.
    epochs: int = 0
    steps_per_epoch: int = 0

    def parts(self) -> dict[str, Any]:
        raise NotImplementedError

    def batches(self, state: TrainState) -> Iterable[Any]:
        """The batches of epoch ``state.epoch + 1`` from batch ``state.batch_in_epoch`` on, in an order that is a
        pure function of (seed, epoch) (:func:`epoch_order`), so that a resumed epoch replays it; drawn one batch
        per step (a generator builds each when its step comes). Puts the model in training mode."""
        raise NotImplementedError

    def forward(self, batch: Any, state: TrainState) -> Any:
        """The model's forward pass on ``batch`` (``state``: the epoch and the step, for randomness drawn per step):
        the loop runs it under the run's autocast (bf16 for a bf16 run), so it holds the model call and nothing
        that must stay fp32. Returns what :meth:`update` needs."""
        raise NotImplementedError

    def update(self, batch: Any, out: Any, state: TrainState) -> tuple[Any, Any]:
        """The rest of the step, outside autocast: the loss from ``out`` in fp32 (``out.float()``), backward, the
        optimiser (and scheduler) step and the epoch's tallies (``state.tally``). Returns the detached loss and the
        batch's weight (tensors or numbers) for :func:`run_batches`."""
        raise NotImplementedError

    def compile_pays(self, device: Any) -> bool:
        """Whether training through ``torch.compile`` pays for this run on ``device`` (what ``compile = "auto"``
        decides by); default never."""
        return False

    def compile(self) -> None:
        """Train through ``torch.compile`` from now on (``compile = "on"``, or ``auto`` where :meth:`compile_pays`),
        falling back to the eager model with one log line when compiling fails; default: nothing to compile."""

    def summary(self, state: TrainState) -> dict[str, float]:
        """The finished epoch's training figures (``epoch`` event fields, metrics when no evaluation overrides)."""
        return {"train_loss": state.mean_loss}

    def evaluate(self, epoch: int, summary: dict[str, float]) -> dict[str, float] | None:
        """The run's metrics after ``epoch`` (emitted as an ``eval`` event), or None when it does not evaluate."""
        return None

    def epoch_fields(self, evaluated: dict[str, float] | None) -> dict[str, Any]:
        """Extra ``epoch`` event fields (alignment: ``val_acc``)."""
        return {}

    def start_fields(self) -> dict[str, Any]:
        """Extra ``start`` event fields (model, params, width, device, dataset, sizes...)."""
        return {}

    def checkpoint_fields(self) -> dict[str, Any]:
        """Extra checkpoint fields: what readers of the checkpoint need besides the parts, and the task's own
        state to restore (see :meth:`load_checkpoint`)."""
        return {}

    def load_checkpoint(self, ckpt: dict[str, Any]) -> None:
        """Restore the task's own state from a checkpoint written by :meth:`checkpoint_fields`."""

    def failure_fields(self) -> dict[str, Any]:
        """``result.json`` fields of a failed run (dataset, model, params, device...)."""
        return {}


@dataclass
class LoopResult:
    """What :func:`epoch_steps` returns: the final metrics (last evaluation, or the last epoch's summary) and
    where training stands (``state.epoch == task.epochs``)."""

    metrics: dict[str, float]
    state: TrainState
    #: The precision the run trained in (``fp32`` or ``bf16``), for its reproducibility record.
    precision: str = "fp32"


T = TypeVar("T")


def run_batches(
    state: TrainState,
    batches: Iterable[T],
    step: Callable[[T], tuple[Any, Any]],
    should_stop: Callable[[], bool],
    check_every: int = CHECK_EVERY,
) -> bool:
    """The batch loop of an epoch: ``step(batch)`` trains on one batch (forward, backward, optimiser and scheduler
    step) and returns its detached loss and weight (tensors or numbers); ``state`` counts steps and batches.

    ``batches`` are the epoch's remaining batches (from ``state.batch_in_epoch``). Losses stay on the device and
    are read back every ``check_every`` steps and at the end (one host sync for many steps); a non-finite loss
    raises :class:`NonFiniteLoss` naming the step that made it. Returns False when ``should_stop()`` answered True
    before a batch (the losses so far are counted).
    """
    pending: list[tuple[Any, Any]] = []

    def settle() -> None:
        if not pending:
            return
        import torch

        losses = torch.stack([torch.as_tensor(loss) for loss, _ in pending]).double()
        weights = torch.stack([torch.as_tensor(weight) for _, weight in pending]).to(losses.device, torch.float64)
        for i, value in enumerate(losses.tolist()):
            if not math.isfinite(value):
                raise NonFiniteLoss(state.epoch + 1, state.step - len(pending) + i + 1, value)
        state.loss_sum += float((losses * weights).sum())
        state.loss_nodes += int(weights.sum())
        pending.clear()

    for batch in batches:
        if should_stop():
            settle()
            return False
        pending.append(step(batch))
        state.step += 1
        state.batch_in_epoch += 1
        if len(pending) >= check_every:
            settle()
    settle()
    return True


def progress_notes(ctx: RunContext, state: TrainState, batches: int) -> Callable[[], bool]:
    """``ctx.should_stop`` as :func:`run_epoch` asks it between two batches, saying now and then (a ``progress``
    event at most every :data:`engine.events.PROGRESS_EVERY` seconds) which batch of which epoch the run is at:
    an epoch of minutes is not silent."""
    from engine.events import PROGRESS_EVERY

    said = time.monotonic()

    def should_stop() -> bool:
        nonlocal said
        if time.monotonic() - said >= PROGRESS_EVERY:
            said = time.monotonic()
            epoch, batch = state.epoch + 1, state.batch_in_epoch
            ctx.emit("progress", phase="training", epoch=epoch, batch=batch, batches=batches)
        return ctx.should_stop()

    return should_stop


def run_epoch(
    task: TrainingStep,
    state: TrainState,
    should_stop: Callable[[], bool],
    precision: str = "fp32",
    device: torch.device | str = "cpu",
) -> bool:
    """Train (the rest of) epoch ``state.epoch + 1`` of ``task`` from batch ``state.batch_in_epoch``, advancing
    ``state``: each batch of ``task.batches(state)`` goes through ``task.forward`` under the autocast of
    ``precision`` (``fp32`` or ``bf16``, resolved) on ``device``'s type, then through ``task.update`` outside it, in
    :func:`run_batches`. False when ``should_stop()`` stopped it between two batches."""

    def step(batch: Any) -> tuple[Any, Any]:
        with autocast(precision, device):
            out = task.forward(batch, state)
        return task.update(batch, out, state)

    return run_batches(state, task.batches(state), step, should_stop)


def epoch_steps(
    task: EpochTask, ctx: RunContext, run: str, options: RunOptions | None = None
) -> Generator[None, None, LoopResult]:
    """Train ``task`` for run ``run`` in ``ctx.run_dir``, resuming from its checkpoint, yielding after each epoch.

    ``options`` (:class:`~engine.hardware.RunOptions`, the run's spec's: :meth:`~engine.tasks.TaskSpec.run_options`;
    None: ``auto`` precision on the CPU) say where and how: the device (:func:`~engine.hardware.resolve_device`, the
    one the task's model is on), the precision (:func:`~engine.hardware.resolve_precision`) that
    :func:`run_epoch` applies to the task's forward pass (a checkpoint resumes in the precision it was written in:
    ``auto`` follows it, an explicit other one is refused) and whether the task trains compiled (``on``; ``auto``:
    where its :meth:`~EpochTask.compile_pays`; ``off``), set before the checkpoint is read.
    Raises :class:`~engine.tasks.Cancelled` (checkpoint saved) when ``ctx.should_stop()`` turns true,
    :class:`~engine.tasks.RunFailed` (kind ``nan``) on a non-finite loss and :class:`GaptuiError` for a
    checkpoint of another run or of a newer gaptui.
    """
    parts = task.parts()
    ctx.run_dir.mkdir(parents=True, exist_ok=True)
    checkpoints = Checkpoints(ctx.run_dir, ctx.log)
    state = TrainState()
    metrics: dict[str, float] = {}
    resumed_from = None
    options = RunOptions(device="cpu") if options is None else options
    device = resolve_device(options.device)
    precision = resolve_precision(options.precision, device)
    if options.compile == "on" or (options.compile == "auto" and task.compile_pays(device)):
        ctx.emit("progress", phase="preparing", what="compiling the model")
        task.compile()
    resumed = checkpoints.resume(run, parts, precision, options.precision != "auto", device)
    if resumed is not None:
        precision, metrics = resumed.precision, resumed.metrics
        state = TrainState.restored(resumed.state)
        task.load_checkpoint(resumed.checkpoint)
        resumed.restore_rng()
        resumed_from = {"epoch": state.epoch, "batch": state.batch_in_epoch, "step": state.step}
        ctx.log(f"resuming from epoch {state.epoch}, batch {state.batch_in_epoch} (step {state.step})")

    def save() -> None:
        checkpoints.save_run(run, precision, asdict(state), metrics, parts, task.checkpoint_fields())

    ctx.emit(
        "start",
        run=run,
        **task.start_fields(),
        epochs=task.epochs,
        steps_per_epoch=task.steps_per_epoch,
        precision=precision,
        resumed_from=resumed_from,
        pid=os.getpid(),
    )
    should_stop = progress_notes(ctx, state, task.steps_per_epoch)
    while state.epoch < task.epochs:
        finished = epoch_body(task, ctx, state, should_stop, precision, device)
        if finished is not None:
            metrics = finished.merged(metrics)
            save()
            finished.report(ctx, task, state, parts.get("optimizer"))
        if finished is None or ctx.should_stop():
            save()
            raise Cancelled(epoch=state.epoch, step=state.step, batch=state.batch_in_epoch)
        yield
    return LoopResult(metrics, state, precision)


@dataclass
class EpochDone:
    """One finished epoch (:func:`epoch_body`): its number, the training summary, the evaluation (None when the
    task did not evaluate) and the seconds of its training."""

    epoch: int
    summary: dict[str, float]
    evaluated: dict[str, float] | None
    seconds: float

    def merged(self, metrics: dict[str, float]) -> dict[str, float]:
        """The run's metrics after this epoch: an evaluation's stand until the next one; the training figures fill
        what it left out."""
        if self.evaluated is not None:
            return {**self.summary, **self.evaluated}
        return {**metrics, **self.summary}

    def report(self, ctx: RunContext, task: EpochTask, state: TrainState, optimizer: Any) -> None:
        """The ``epoch`` event and the log line of this epoch."""
        lr = optimizer.param_groups[0]["lr"] if optimizer is not None else None
        fields = task.epoch_fields(self.evaluated)
        seconds = round(self.seconds, 4)
        ctx.emit("epoch", epoch=self.epoch, step=state.step, **self.summary, lr=lr, seconds=seconds, **fields)
        shown = " ".join(f"{k} {v:.4f}" for k, v in {**self.summary, **fields}.items() if isinstance(v, float))
        rate = f" lr {lr:.2e}" if lr is not None else ""
        ctx.log(f"epoch {self.epoch}/{task.epochs} {shown}{rate} {self.seconds:.2f}s")


def epoch_body(
    task: EpochTask,
    ctx: RunContext,
    state: TrainState,
    should_stop: Callable[[], bool],
    precision: str,
    device: Any,
) -> EpochDone | None:
    """The body of one epoch: train the rest of epoch ``state.epoch + 1`` (:func:`run_epoch`), then evaluate it
    (an ``eval`` event when the task did) and move ``state`` to the next epoch. None when ``should_stop()`` stopped
    it between two batches; :class:`~engine.tasks.RunFailed` (kind ``nan``) on a non-finite loss."""
    t0 = time.perf_counter()
    try:
        finished = run_epoch(task, state, should_stop, precision, device)
    except NonFiniteLoss as exc:
        event = {"epoch": exc.epoch, "step": exc.step}
        raise RunFailed(str(exc), "nan", event=event, **task.failure_fields()) from None
    if not finished:
        return None
    epoch = state.epoch + 1
    summary = task.summary(state)
    seconds = time.perf_counter() - t0
    t1 = time.perf_counter()
    evaluated = task.evaluate(epoch, summary)
    if evaluated is not None:
        ctx.emit("eval", epoch=epoch, seconds=round(time.perf_counter() - t1, 4), **dict(evaluated))
    state.next_epoch()
    return EpochDone(epoch, summary, None if evaluated is None else dict(evaluated), seconds)
