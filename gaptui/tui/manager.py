"""The manager loop: the one thread that owns the Scheduler (and, in write mode, the History object).

Neither :class:`~gaptui.scheduler.Scheduler` nor TinyDB is thread-safe, so the UI never calls them: it submits
commands (small dataclasses) to :meth:`ManagerLoop.submit`, a thread-safe queue. The loop runs inside one Textual
thread worker: it executes commands as they arrive and every :data:`POLL_SECONDS` steps the scheduler, tails the
files of runs it does not drive itself (read-only mode, finished runs being inspected) and posts what changed as
:mod:`gaptui.tui.messages` to the app. Dataset builds before runs happen here too (a launch blocks the loop while
they are built, exactly like ``gaptui run``).
"""

from __future__ import annotations

import gc
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from textual.message import Message

from engine.errors import GaptuiError
from engine.events import read_events
from engine.tasks import PresetBase
from engine.typed import parse_dataclass
from gaptui.backends.slurm import (
    SlurmOptions,
    SlurmScheduler,
    in_flight_on_slurm,
    sbatch_available,
)
from gaptui.history.journal import history_stamp
from gaptui.history.store import History
from gaptui.preset_code import is_trusted, review_preset
from gaptui.queue_control import ControlChannel
from gaptui.recovery import foreground_line
from gaptui.scheduler import Scheduler, tail
from gaptui.tui.messages import (
    LogTail,
    ManagerNotice,
    RecordsAdded,
    RecordsLoaded,
    Recovered,
    RunEvents,
    RunUpdated,
    SchedulerState,
)
from gaptui.tui.planning import RETRYABLE, SlotConfig
from gaptui.workspace import Workspace

#: Seconds between scheduler steps (the CLI's pace).
POLL_SECONDS = 0.25
#: Seconds between checks of the history file when another manager writes it (read-only mode).
HISTORY_POLL_SECONDS = 1.0
#: Events that end a worker's stream.
TERMINAL_EVENTS = ("done", "cancelled", "error")
#: Runs whose files are tailed at once besides the scheduler's own (the selection of the UI).
MAX_FOLLOWED = 32


def _reviewed(path: Path, ws: Workspace) -> Any:
    """The preset file ``path`` validated again at launch (as ``gaptui run --preset`` would), from its bytes as
    they are now: local code it names is imported only when the user allowed this very content (the file may have
    changed since it was loaded)."""
    review = review_preset(str(path), ws)
    if review.local_code and not is_trusted(review):
        raise GaptuiError(
            f"{path} changed since it was loaded and names local code that was not allowed in this form; load the "
            "preset again (ctrl+o) to review its code"
        )
    return review.load(lambda line: None)


# ------------------------------------------------------------------------------------------ commands


@dataclass(frozen=True)
class Launch:
    """Queue a grid like ``gaptui run --preset``: skip done runs, build datasets, enqueue the rest."""

    preset: PresetBase
    slots: SlotConfig
    retry_failed: bool = False


@dataclass(frozen=True)
class Cancel:
    """Cancel queued or running runs (running workers checkpoint and exit)."""

    hashes: tuple[str, ...]


@dataclass(frozen=True)
class Retry:
    """Queue failed, cancelled or interrupted runs again (they resume from their checkpoints)."""

    hashes: tuple[str, ...]


@dataclass(frozen=True)
class EditRecord:
    """Change user fields of a record (tags, note) through the history."""

    run_hash: str
    fields: dict[str, Any]


@dataclass(frozen=True)
class Follow:
    """Send the whole ``events.jsonl`` of runs, then keep tailing those no scheduler of ours drives."""

    runs: tuple[tuple[str, str], ...]  # (run hash, run dir)


@dataclass(frozen=True)
class FollowLog:
    """Tail ``log.txt`` of one run for ``owner`` (a view: each follows at most one log); ``None`` stops."""

    owner: str
    run_hash: str | None
    run_dir: str | None = None


@dataclass(frozen=True)
class Steer:
    """Pause or resume the queue, drain slots or give them runs again (:meth:`QueueControl.apply`'s request)."""

    action: str
    slots: tuple[str, ...] = ()


@dataclass(frozen=True)
class StopAll:
    """Cancel everything in flight (SIGTERM, checkpoint, marked cancelled) and keep the loop going."""


@dataclass(frozen=True)
class Shutdown:
    """End the loop. ``stop``: stop every run first; ``detach``: leave workers running for the next manager."""

    how: str = "stop"


Command = Launch | Cancel | Retry | EditRecord | Follow | FollowLog | Steer | StopAll | Shutdown


# ------------------------------------------------------------------------------------------ the loop


@dataclass
class _Tailed:
    path: Path
    offset: int = 0


@dataclass
class _LogTarget:
    run_hash: str
    path: Path
    stamp: tuple[int, int] | None = None


@dataclass
class ManagerLoop:
    """Owns the scheduler; call :meth:`run` in one thread and :meth:`submit` from any thread.

    ``post`` delivers a message to the app (``App.post_message``, which is thread-safe). With ``read_only`` there
    is no scheduler: the loop only follows files and re-reads the history another manager writes.
    """

    ws: Workspace
    history: History
    post: Callable[[Message], Any]
    read_only: bool = False
    slots: SlotConfig = field(default_factory=SlotConfig)
    commands: queue.Queue[Command] = field(default_factory=queue.Queue)
    closed: threading.Event = field(default_factory=threading.Event)
    scheduler: Scheduler | None = None
    #: The Slurm backend, once a grid went to Slurm or the history holds runs in flight there.
    slurm: SlurmScheduler | None = None
    _followed: dict[str, _Tailed] = field(default_factory=dict)
    _logs: dict[str, _LogTarget] = field(default_factory=dict)
    _pending_events: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    _state: SchedulerState | None = None
    #: The ETA of the runs in flight and queued (:class:`gaptui.eta.Countdown`), once there are some.
    _countdown: Any = None
    _building: str = ""
    _history_stamp: tuple[Any, ...] | None = None
    _next_history_poll: float = 0.0
    _finished: str | None = None
    #: Run ids left running by a ``detach`` shutdown (the next manager re-attaches them).
    detached: list[str] = field(default_factory=list)
    #: Run ids filed ``interrupted`` because the app went away without a choice (:meth:`run`).
    interrupted: list[str] = field(default_factory=list)
    #: Requests of `gaptui queue` in another terminal, and the state it reads (:mod:`gaptui.queue_control`).
    channel: ControlChannel | None = None

    def submit(self, command: Command) -> None:
        """Queue a command for the loop (thread-safe)."""
        self.commands.put(command)

    # -------------------------------------------------------------------------------------- lifecycle

    def run(self, abandoned: Callable[[], str | None]) -> str:
        """Loop until a :class:`Shutdown`, or until ``abandoned()`` says why the app went away without choosing
        (an error in the app, a test that ended): local workers then stop with a checkpoint and, like the runs
        still queued, are filed ``interrupted`` with that reason (resumable, never passed off as the user's
        cancellation); runs on Slurm are left to it. Returns how it ended. Closes the history (releases the
        workspace lock)."""
        try:
            self._start()
            next_tick = time.monotonic()
            while self._finished is None:
                reason = abandoned()
                if reason is not None:
                    self._shutdown("interrupt", reason)
                    break
                try:
                    command = self.commands.get(timeout=max(0.0, next_tick - time.monotonic()))
                except queue.Empty:
                    command = None
                if command is not None:
                    self._execute(command)
                    continue
                self._tick()
                next_tick = time.monotonic() + POLL_SECONDS
            return self._finished or "stopped"
        finally:
            if self.channel is not None:
                self.channel.close()
            self.history.close()
            self.closed.set()

    def _start(self) -> None:
        if self.read_only:
            self._poll_history(force=True)
            return
        self.scheduler = Scheduler(self.ws, self.history, self.slots.slots(), listener=self._listen)
        self.channel = ControlChannel(self.ws, "the gaptui app")
        reattached, interrupted = self.scheduler.recover()
        reattached += self._reattach_slurm()
        refiled = list(self.scheduler.refiled)
        # A foreground `gaptui train` files its own run: followed here (its end updates the book), never adopted.
        self.scheduler.watch(self.scheduler.foreground)
        foreground = foreground_line(self.scheduler.foreground, "followed here, never stopped from here")
        if reattached or interrupted or refiled or foreground:
            self.post(Recovered(reattached, interrupted, refiled, foreground))
        self._post_state()
        # The history this manager read (its cache: every record) lives as long as the app: out of the
        # collector's full passes, each of which would otherwise walk it (half a second at 20,000 records).
        gc.freeze()

    def _reattach_slurm(self) -> list[str]:
        """Follow the runs a previous manager left queued or running on Slurm, with the settings they went out with."""
        records = self.history.records()
        live = in_flight_on_slurm(records)
        if not live:
            return []
        if not sbatch_available():
            self.post(ManagerNotice(f"{len(live)} run(s) are in flight on Slurm; sbatch is not found here", "warning"))
            return []
        self.slurm = self._slurm_backend([r for r in records if r["hash"] in live])
        return self.slurm.recover()[0]

    def _slurm_backend(self, records: list[dict[str, Any]]) -> SlurmScheduler:
        """A Slurm backend with the settings these runs were last submitted with."""
        saved = next((r["slurm"]["options"] for r in records if (r.get("slurm") or {}).get("options")), {})
        options = parse_dataclass(SlurmOptions, saved, f"{self.ws.history}: slurm options")
        return SlurmScheduler(self.ws, self.history, options, listener=self._listen)

    def _backends(self) -> list[Scheduler]:
        return [b for b in (self.scheduler, self.slurm) if b is not None]

    def _shutdown(self, how: str, reason: str | None = None) -> None:
        """``stop``: stop every run; ``detach``: leave workers running for the next manager (queued runs are
        cancelled); ``interrupt`` (no one chose): stop local workers and file them and the queued runs
        ``interrupted`` with ``reason``, leaving Slurm's runs to it."""
        for backend in self._backends():
            if how == "interrupt" and backend is not self.slurm:
                ids = {h: self.history.find(h) for h in (*backend.running, *(s.hash() for s in backend.queue))}
                backend.stop_all(status="interrupted", reason=reason)
                self.interrupted += [r["id"] for r in ids.values() if r is not None]
            elif how in ("detach", "interrupt"):
                # Queued runs have no worker to leave behind: file them so history does not claim they are queued.
                backend.withdraw_queued("cancelled" if how == "detach" else "interrupted", reason)
                self.detached += backend.detach()
            elif backend.pending():
                backend.stop_all()
        self._flush_events()
        self._finished = how

    # -------------------------------------------------------------------------------------- commands

    def _execute(self, command: Command) -> None:
        try:
            if isinstance(command, Shutdown):
                self._shutdown(command.how)
            elif isinstance(command, Follow):
                self._follow(command)
            elif isinstance(command, FollowLog):
                self._follow_log(command)
                self._tail_logs()
            elif self.scheduler is None:
                raise GaptuiError(
                    "the workspace is open read-only (another manager holds it): launching, cancelling and "
                    "editing are disabled"
                )
            elif isinstance(command, Launch):
                self._launch(command)
            elif isinstance(command, Cancel):
                self._cancel(command.hashes)
            elif isinstance(command, Retry):
                self._retry(command.hashes)
            elif isinstance(command, EditRecord):
                self.history.update(command.run_hash, **command.fields)
                self.post(RunUpdated(command.run_hash, dict(command.fields)))
            elif isinstance(command, StopAll):
                for backend in self._backends():
                    backend.stop_all()
            elif isinstance(command, Steer):
                self._steer({"action": command.action, "slots": list(command.slots)})
        except GaptuiError as exc:
            self.post(ManagerNotice(str(exc), "error"))
        except Exception as exc:  # noqa: BLE001 - one failed command must not end the supervision of running workers
            name = type(command).__name__.lower()
            self.post(ManagerNotice(f"{name} failed: {type(exc).__name__}: {exc}", "error"))
        finally:
            self._flush_events()
            self._post_state()

    def _launch(self, command: Launch) -> None:
        from gaptui import launch

        assert self.scheduler is not None
        # The same validation as `gaptui run --preset` (it builds each model once): what launches here runs there.
        # A preset without a file was parsed from the form's document just before (FormDraft.preset()).
        preset = command.preset
        if preset.path is not None:
            preset = _reviewed(preset.path, self.ws)
        options = launch.LaunchOptions(
            gpus=command.slots.gpus,
            jobs_per_gpu=command.slots.jobs_per_gpu,
            cpu_jobs=command.slots.cpu_jobs,
            backend=command.slots.backend,
            retry_failed=command.retry_failed,
        )
        # The one launch service of `gaptui run`: options, plan, checks (memory included), backend, inputs.
        settings = launch.launch_settings(preset, options, self.ws)
        launch_plan = launch.plan_launch(preset, self.ws, self.history.records(), settings)
        grid_plan = launch_plan.plan
        # A grid that would run for months is refused here as by `gaptui run` (whose --force insists).
        for line in launch_plan.duration_lines(self.ws, self.history.records())[1]:
            self.post(ManagerNotice(line))
        if settings.backend == "slurm":
            target: Scheduler = launch.make_backend(
                settings, self.ws, self.history, slurm=self.slurm, listener=self._listen
            )
            self.slurm = target
        else:
            target = launch.make_backend(settings, self.ws, self.history, local=self.scheduler)
        for line in (*preset.notes, *grid_plan.warnings):
            self.post(ManagerNotice(line, "warning" if line in grid_plan.warnings else "information"))
        for line in grid_plan.redo_lines():
            self.post(ManagerNotice(line.removeprefix("note: ")))
        # Runs followed by the other backend here, or submitted to Slurm by another manager, are left alone.
        other = [b for b in self._backends() if b is not target]
        leave = {h for b in other for h in (*b.running, *(s.hash() for s in b.queue))}
        leave |= in_flight_on_slurm(self.history.records()) - set(target.running)
        if grid_plan.to_run:
            self._building = f"preparing inputs for {len(grid_plan.to_run)} run(s)"
            self._post_state()
            try:
                launched = launch.start(launch_plan, target, self._preparing, leave=leave)
                if target is self.slurm:
                    target.step()  # submits now: a submission that fails is this command's error, not the loop's
            except GaptuiError:
                self.post(RecordsLoaded(self.history.records()))  # the runs it queued were withdrawn
                raise
            finally:
                self._building = ""
        else:
            launched = launch.Launched([], {}, 0)
        by_hash = self.history.by_hash()
        self.post(RecordsAdded([by_hash[s.hash()] for s in grid_plan.specs if s.hash() in by_hash]))
        parts = [f"{preset.name}: {len(grid_plan.specs)} runs", f"{len(grid_plan.done)} already done"]
        if grid_plan.failed:
            parts.append(f"{len(grid_plan.failed)} failed before (skipped; tick 'retry failed' to rerun)")
        if launched.in_flight:
            parts.append(f"{launched.in_flight} already in flight")
        if launched.foreground:
            parts.append(f"{len(launched.foreground)} of them trained by `gaptui train` elsewhere (waited for)")
        if launched.failed:
            parts.append(f"{len(launched.failed)} failed to prepare")
        where = "Slurm" if target is self.slurm else f"{len(self.scheduler.slots)} slot(s)"
        parts.append(f"{len(launched.queued)} queued on {where}")
        self.post(ManagerNotice(", ".join(parts)))

    def _preparing(self, done: int, total: int, label: str) -> None:
        self._building = f"inputs {done}/{total} ready ({label})"
        self._post_state()

    def _cancel(self, hashes: tuple[str, ...]) -> None:
        assert self.scheduler is not None
        foreground = [h for h in hashes if h in self.scheduler.watched]
        if foreground:
            line = foreground_line([self.history.find(h) or {"id": h[:12]} for h in foreground], "stop it there")
            self.post(ManagerNotice(line, "warning"))
        hashes = tuple(h for h in hashes if h not in foreground)
        missed = [h[:12] for h in hashes if not any(b.cancel(h) for b in self._backends())]
        if missed:
            self.post(ManagerNotice(f"not queued or running in this session: {', '.join(missed)}", "warning"))

    def _retry(self, hashes: tuple[str, ...], build: bool = True) -> None:
        from engine.tasks import load_spec
        from gaptui import launch

        assert self.scheduler is not None
        by_hash = self.history.by_hash()
        records = [by_hash[h] for h in hashes if h in by_hash and by_hash[h]["status"] in RETRYABLE]
        skipped = len(hashes) - len(records)
        if skipped:
            self.post(
                ManagerNotice(f"{skipped} run(s) not retried: only {', '.join(RETRYABLE)} runs can be", "warning")
            )
        # Slurm runs go back to Slurm, with the settings they were submitted with.
        slurm = [r for r in records if r.get("backend") == "slurm"]
        if slurm and self.slurm is None:
            self.slurm = self._slurm_backend(slurm)
        for target, chosen in ((self.scheduler, [r for r in records if r not in slurm]), (self.slurm, slurm)):
            if target is None or not chosen:
                continue
            if build:
                retried = launch.retry(target, chosen, self._preparing)
                self._building = ""
                for line in launch.redo_lines(retried.redo):
                    self.post(ManagerNotice(line.removeprefix("note: ")))
            else:
                target.enqueue(launch.order_specs(load_spec(r["spec"]) for r in chosen))

    def _follow(self, command: Follow) -> None:
        for run_hash, run_dir in command.runs:
            path = Path(run_dir) / "events.jsonl"
            events, offset = read_events(path)
            self.post(RunEvents(run_hash, events, reset=True))
            # Runs of our scheduler stream through its listener; tailing them as well would send events twice.
            ours = any(run_hash in b.running or any(s.hash() == run_hash for s in b.queue) for b in self._backends())
            ended = bool(events) and events[-1].get("event") in TERMINAL_EVENTS
            if not ours and not ended:
                self._followed[run_hash] = _Tailed(path, offset)
        while len(self._followed) > MAX_FOLLOWED:
            self._followed.pop(next(iter(self._followed)))

    def _follow_log(self, command: FollowLog) -> None:
        if command.run_hash is None or command.run_dir is None:
            self._logs.pop(command.owner, None)
        else:
            self._logs[command.owner] = _LogTarget(command.run_hash, Path(command.run_dir) / "log.txt")

    # -------------------------------------------------------------------------------------- each tick

    def _listen(self, kind: str, run_hash: str, payload: dict[str, Any]) -> None:
        """The scheduler's callback (this thread): events are batched per tick, status changes go out at once."""
        if kind == "event":
            self._pending_events.setdefault(run_hash, []).append(payload)
            return
        self._flush_events(run_hash)  # the events that led to a status change arrive before it
        self.post(RunUpdated(run_hash, dict(payload)))

    def _flush_events(self, only: str | None = None) -> None:
        for run_hash in [only] if only is not None else list(self._pending_events):
            events = self._pending_events.pop(run_hash, None)
            if events:
                self.post(RunEvents(run_hash, events))

    def _steer(self, request: dict[str, Any]) -> None:
        """Apply a request (the app's keys, or `gaptui queue` in another terminal) to the local slots; a pause or a
        resume of the whole queue holds for Slurm too."""
        assert self.scheduler is not None
        line = self.scheduler.control.apply(request, (s.name for s in self.scheduler.slots))
        if self.slurm is not None and not request.get("slots"):
            self.slurm.control.apply(request, ())
        self.post(ManagerNotice(f"queue: {line}", "warning" if line.startswith("ignored") else "information"))

    def _tick(self) -> None:
        if self.channel is not None and self.scheduler is not None:
            for request in self.channel.poll():
                self._steer(request)
        for backend in self._backends():
            if backend.pending():
                try:
                    backend.step()
                except GaptuiError as exc:  # a Slurm submission that failed: its runs were withdrawn
                    self.post(ManagerNotice(str(exc), "error"))
                    self.post(RecordsLoaded(self.history.records()))
        self._flush_events()
        for run_hash, tailed in list(self._followed.items()):
            events, tailed.offset = read_events(tailed.path, tailed.offset)
            if events:
                self.post(RunEvents(run_hash, events))
                if events[-1].get("event") in TERMINAL_EVENTS:
                    del self._followed[run_hash]
        self._tail_logs()
        if self.read_only:
            self._poll_history()
        self._post_state()
        if self.channel is not None and self.scheduler is not None:
            running, queued = (len(x) for x in self._state_fields()[:2])
            self.channel.publish(self.scheduler.control, self.scheduler.slots, running, queued)

    def _eta(self) -> str:
        """The time left of the runs this manager drives: ``gaptui run``'s ETA (:class:`gaptui.eta.Countdown`)."""
        from gaptui.eta import Countdown

        if self.scheduler is None or not (self.scheduler.running or self.scheduler.queue):
            return ""
        if self._countdown is None:
            self._countdown = Countdown(self.ws)
        self._countdown.pack_seeds = self.scheduler.pack_seeds
        self._countdown.refresh(self.scheduler, self.history.records)
        return self._countdown.text()

    def _tail_logs(self) -> None:
        for target in self._logs.values():
            try:
                st = target.path.stat()
            except FileNotFoundError:
                continue
            stamp = (st.st_mtime_ns, st.st_size)
            if stamp != target.stamp:
                target.stamp = stamp
                self.post(LogTail(target.run_hash, tail(target.path, 200)))

    def _poll_history(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now < self._next_history_poll:
            return
        self._next_history_poll = now + HISTORY_POLL_SECONDS
        stamp = history_stamp(self.ws.history)
        if force or stamp != self._history_stamp:
            self._history_stamp = stamp
            # Only the records the journal says changed, so a run filed costs the same at any history size.
            changed = None if force else self.history.changes()
            if changed is None:
                self.post(RecordsLoaded(self.history.records()))
            elif changed:
                self.post(RecordsAdded(changed))

    def _state_fields(self) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
        if self.scheduler is None:
            return (), (), ()
        backends = self._backends()
        return (
            tuple(h for b in backends for h in b.running),
            tuple(s.hash() for b in backends for s in b.queue),
            tuple(s.name for s in self.scheduler.slots) + (("slurm",) if self.slurm is not None else ()),
        )

    def _post_state(self) -> None:
        control = self.scheduler.control if self.scheduler is not None else None
        state = SchedulerState(
            *self._state_fields(),
            building=self._building,
            paused=bool(control and control.paused),
            draining=tuple(sorted(control.draining)) if control else (),
            control=control.state_line() if control else "",
            eta=self._eta(),
        )
        if self._state is None or state != self._state:
            self._state = state
            self.post(state)
