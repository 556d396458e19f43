"""GaptuiApp: the terminal experiment manager, and :func:`run_app`, its entry point.

Structure
    Four sections are Textual modes, each one installed screen that lives as long as the app: New experiment,
    Runs, History and Ranking. Details, help and questions are pushed on top of them.

    One thread worker runs :class:`~gaptui.tui.manager.ManagerLoop`, which alone touches the Scheduler and the
    History (neither is thread-safe). The UI sends it commands through a thread-safe queue; it posts messages
    (:mod:`gaptui.tui.messages`) back. The app's handlers keep :attr:`GaptuiApp.book` (a copy of the records)
    current and tell the sections which runs changed; only handlers and timers touch widgets.

    Every worker of the app runs on the app node, so one ``Worker.StateChanged`` handler reports failures;
    :class:`GaptuiError` messages are shown verbatim.

Locking
    The app holds the workspace lock while it is open. When another manager holds it (``gaptui run`` in another
    terminal), the app opens read-only: everything can be browsed and followed, nothing launched or edited.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterable
from functools import partial
from pathlib import Path
from typing import Any, ClassVar

from textual import on, work
from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.command import DiscoveryHit, Hit, Hits, Provider
from textual.screen import Screen
from textual.worker import Worker, WorkerState, get_current_worker

from engine.errors import GaptuiError
from engine.tasks import PresetBase
from gaptui.history.store import History, WorkspaceLock
from gaptui.tui.manager import (
    Cancel,
    EditRecord,
    Follow,
    FollowLog,
    Launch,
    ManagerLoop,
    Retry,
    Shutdown,
    Steer,
    StopAll,
)
from gaptui.tui.messages import (
    LogTail,
    ManagerMessage,
    ManagerNotice,
    RecordsAdded,
    RecordsLoaded,
    Recovered,
    RunEvents,
    RunUpdated,
    SchedulerState,
)
from gaptui.tui.planning import SlotConfig
from gaptui.tui.runbook import RunBook
from gaptui.tui.screens.confirm import Choice, ChoiceScreen, confirm
from gaptui.tui.screens.help import HelpScreen
from gaptui.tui.screens.history import HistoryScreen, HistoryTable
from gaptui.tui.screens.new_experiment import NewExperimentScreen
from gaptui.tui.screens.ranking import RankingScreen
from gaptui.tui.screens.run_detail import RunDetailScreen
from gaptui.tui.screens.runs import RunsScreen
from gaptui.tui.screens.section import SectionScreen
from gaptui.tui.widgets.record_table import RecordTable
from gaptui.workspace import Workspace

SECTIONS = {
    "new": NewExperimentScreen,
    "runs": RunsScreen,
    "history": HistoryScreen,
    "ranking": RankingScreen,
}


class PresetCommands(Provider):
    """Command palette: "Load preset NAME" for every preset (the workspace's and the shipped ones)."""

    async def _entries(self) -> list[tuple[str, str, Any]]:
        from gaptui.presets import preset_entries

        app = self.app
        assert isinstance(app, GaptuiApp)
        entries = await asyncio.to_thread(preset_entries, app.ws)
        return [
            (
                f"Load preset {e.name}",
                f"{e.task}: {e.description or 'no description'}",
                partial(app.load_preset, e.name),
            )
            for e in entries
            if not e.error
        ]

    async def discover(self) -> Hits:
        for title, about, command in await self._entries():
            yield DiscoveryHit(title, command, help=about)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for title, about, command in await self._entries():
            score = matcher.match(title)
            if score > 0:
                yield Hit(score, matcher.highlight(title), command, help=about)


class GaptuiApp(App[None]):
    """The experiment manager. ``slots`` is the scheduler's slot set at start (runs re-attached or retried);
    each launch brings its own."""

    TITLE = "gaptui"
    COMMANDS = App.COMMANDS | {PresetCommands}
    MODES: ClassVar[dict[str, str]] = {name: name for name in SECTIONS}  # type: ignore[assignment]
    HORIZONTAL_BREAKPOINTS: ClassVar[list[tuple[int, str]]] = [(0, "-narrow"), (120, "-wide")]
    BINDINGS: ClassVar[list[Binding]] = [
        Binding("f1,question_mark", "help", "Help"),
        Binding("f2", "section('new')", "New"),
        Binding("f3", "section('runs')", "Runs"),
        Binding("f4", "section('history')", "History"),
        Binding("f5", "section('ranking')", "Ranking"),
        Binding("ctrl+q", "quit", "Quit", priority=True),
    ]
    CSS = """
    .section-title { text-style: bold; color: $accent; margin-top: 1; }
    """

    def __init__(self, workspace: Workspace, slots: SlotConfig | None = None) -> None:
        super().__init__()
        self.ws = workspace
        #: Why the workspace is read-only ("" when this app holds the lock).
        self.read_only = ""
        try:
            self.history = History(workspace, write=True, purpose="gaptui tui")
        except GaptuiError:
            holder = _lock_holder(workspace)
            self.read_only = f"workspace {workspace.root} is in use by {holder}"
            self.history = History(workspace)
        self.book = RunBook()
        self.manager = ManagerLoop(
            workspace, self.history, self.post_message, bool(self.read_only), slots or SlotConfig()
        )
        self.state = SchedulerState((), (), ())
        #: Hashes of runs launched, retried or seen running in this session (the Runs screen shows them).
        self.session: set[str] = set()
        self.recovered: Recovered | None = None
        self._quitting = ""
        self._manager_worker: Worker[str] | None = None

    # -------------------------------------------------------------------------------------- start-up

    async def on_mount(self) -> None:
        # Read once before the manager thread starts; afterwards only the manager touches the history.
        self.book.load(self.history.records())
        self._say_left_out()
        # The records live as long as the app: out of the collector's full passes from now on, or the first one
        # (drawing the first screen allocates enough to trigger it) walks them all, 0.15 s at 20,000 runs.
        gc.freeze()
        for name, screen_type in SECTIONS.items():
            self.install_screen(screen_type(), name)
        self._update_subtitle()
        # The first screen comes first. The manager thread (which reads the history again) and the import of the
        # training stack would compete with it for the interpreter, so they start once it is drawn; the other
        # sections are mounted on their first visit (their handlers wait for ``ready``).
        await self.switch_mode("history" if len(self.book) else "new")
        self.call_after_refresh(self._start_background)

    def _say_left_out(self) -> None:
        """Name the history records left out of every screen (a field of the wrong type), as the CLI warns."""
        lines = list(self.history.left_out.values())
        if lines:
            more = f" (and {len(lines) - 1} more; `gaptui history` names each)" if len(lines) > 1 else ""
            self.notify(f"{lines[0]}{more}", severity="warning", markup=False, timeout=15)

    def _start_background(self) -> None:
        self._manager_worker = self._run_manager()
        self._warm_up()
        # Everything loaded so far (modules, the history, the widgets) lives as long as the app: keep it out of
        # the collector's full passes, which otherwise stall a key press now and then with a large history. (No
        # collection first: start-up leaves little cyclic garbage, and a full pass here would hold up the first
        # keys by half a second at 20,000 records.)
        gc.freeze()

    def on_record_table_filled(self, message: RecordTable.Filled) -> None:
        # A table holds every row again (after a filter or a sort: up to 20,000 rows). They live until the next
        # one: out of the collector's full passes, each of which would otherwise walk them (hundreds of ms in the
        # middle of a key press). The young generations are collected first, so no fresh cyclic garbage is kept;
        # rows dropped later are freed by reference counting as usual.
        if message.table.record_count >= 1_000:  # a small table costs a full pass little
            gc.collect(1)
            gc.freeze()

    @work(thread=True, exclusive=True, group="manager", name="scheduler", exit_on_error=False)
    def _run_manager(self) -> str:
        worker = get_current_worker()

        def abandoned() -> str | None:
            """Why the app went away without a quit choice (its worker was cancelled), else None."""
            if not worker.is_cancelled:
                return None
            if self.return_code:
                return "the terminal app stopped on an error; resume with r in Runs or the same `gaptui run`"
            return "the terminal app closed without a quit choice; resume with r in Runs or the same `gaptui run`"

        return self.manager.run(abandoned)

    @work(thread=True, group="warm-up", name="import models", exit_on_error=False)
    def _warm_up(self) -> None:
        # The model registry imports torch (seconds): do it off the UI thread before a form or a launch needs it.
        import engine.models  # noqa: F401
        import engine.sources  # noqa: F401

    def run_task(self, function: Any, *, name: str, group: str, exclusive: bool = False) -> Worker[Any]:
        """Run ``function`` in a thread worker owned by the app (so failures reach :meth:`_worker_changed`)."""
        return self.run_worker(function, name=name, group=group, exclusive=exclusive, thread=True, exit_on_error=False)

    # -------------------------------------------------------------------------------------- sections

    def section(self, name: str) -> SectionScreen:
        """The installed screen of a section."""
        screen = self.get_screen(name)
        assert isinstance(screen, SectionScreen)
        return screen

    @property
    def runs_screen(self) -> RunsScreen:
        """The Runs section (it owns the live event lists)."""
        screen = self.section("runs")
        assert isinstance(screen, RunsScreen)
        return screen

    def action_section(self, name: str) -> None:
        self.switch_mode(name)

    def action_help(self) -> None:
        # Widget-level bindings shown in a section's footer belong to its list too.
        widget_bindings: dict[str, list[Any]] = {"history": list(HistoryTable.BINDINGS)}
        sections: list[tuple[str, Any]] = [("Everywhere", self.BINDINGS)]
        for name, screen_type in SECTIONS.items():
            sections.append((screen_type.TITLE or name, [*widget_bindings.get(name, []), *screen_type.BINDINGS]))
        sections.append(("Run details", RunDetailScreen.BINDINGS))
        self.push_screen(HelpScreen(sections))

    async def open_in_history(self, run_hash: str) -> None:
        """Show a run's details from the History section (mounted first, on a first visit)."""
        await self.switch_mode("history")
        history = self.section("history")
        assert isinstance(history, HistoryScreen)
        history.reveal(run_hash)
        self.push_screen(RunDetailScreen(run_hash))

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        """Command palette entries for the main actions, then Textual's own (theme, screenshot ...)."""
        yield SystemCommand("New experiment", "Compose a grid of runs and launch it (F2)", self._goto("new"))
        yield SystemCommand("Runs", "Queued, running and finished runs with live curves (F3)", self._goto("runs"))
        yield SystemCommand("History", "Every run of the workspace: filter, sort, details (F4)", self._goto("history"))
        yield SystemCommand("Ranking", "Table D.3 per dataset and the accuracy-gap plot (F5)", self._goto("ranking"))
        yield SystemCommand("Export ranking table", "Write the current table to <workspace>/exports", self._export)
        if isinstance(screen, HistoryScreen):
            yield SystemCommand("Diff marked runs", "The marked runs side by side (space marks, D)", screen.action_diff)
        if self.state.paused:
            yield SystemCommand("Resume the queue", "Start queued runs again (p in Runs)", self.action_pause_queue)
        else:
            yield SystemCommand(
                "Pause the queue", "Start no more runs; running ones go on (p in Runs)", self.action_pause_queue
            )
        if self.state.draining:
            yield SystemCommand(
                "Undrain every slot", f"Give {', '.join(self.state.draining)} runs again", self.action_undrain_all
            )
        yield SystemCommand("Stop all runs", "Cancel every queued and running run", self.action_stop_all)
        yield SystemCommand("Keys", "Every key binding (F1)", self.action_help)
        yield SystemCommand("Quit", "Quit gaptui, asking about runs in flight (Ctrl+Q)", self.action_quit)
        for command in super().get_system_commands(screen):
            if command.title not in ("Quit", "Keys"):
                yield command

    async def load_preset(self, name: str) -> None:
        """Open the New-experiment form and load preset ``name`` into it (the form's code review applies)."""
        await self.switch_mode("new")
        form = self.section("new")
        assert isinstance(form, NewExperimentScreen)
        form.load_named(name)

    def _goto(self, name: str) -> Any:
        return lambda: self.switch_mode(name)

    async def _export(self) -> None:
        await self.switch_mode("ranking")
        ranking = self.section("ranking")
        assert isinstance(ranking, RankingScreen)
        ranking.action_export()

    # -------------------------------------------------------------------------------------- commands to the manager

    def writable(self) -> bool:
        """True when commands that change runs or history can be sent; otherwise says why in a notification."""
        if self.read_only:
            self.notify(
                f"{self.read_only}: launching, cancelling and editing are disabled", severity="error", markup=False
            )
            return False
        # Before its thread starts (just after the first screen is drawn) the manager's queue already takes
        # commands: they run as soon as it does.
        worker = self._manager_worker
        if self._quitting or (worker is not None and worker.state not in (WorkerState.PENDING, WorkerState.RUNNING)):
            self.notify("the scheduler is not running; restart gaptui", severity="error")
            return False
        return True

    def launch(self, preset: PresetBase, slots: SlotConfig, retry_failed: bool = False) -> bool:
        """Queue a grid (the manager validates it as `gaptui run` would); False when refused."""
        if not self.writable():
            return False
        self.manager.submit(Launch(preset, slots, retry_failed))
        size = getattr(preset, "size", None)  # PresetBase does not require it
        runs = f": {size} runs" if size is not None else ""
        self.notify(f"launching {preset.name}{runs} (checking history, building datasets) ...")
        return True

    def cancel_runs(self, hashes: Iterable[str]) -> None:
        """Cancel queued or running runs (workers checkpoint and exit)."""
        hashes = tuple(hashes)
        if hashes and self.writable():
            self.manager.submit(Cancel(hashes))
            self.notify(f"cancelling {len(hashes)} run(s): workers save a checkpoint and stop")

    def retry_runs(self, hashes: Iterable[str]) -> None:
        """Queue failed, cancelled or interrupted runs again."""
        hashes = tuple(hashes)
        if hashes and self.writable():
            self.session.update(hashes)
            self.manager.submit(Retry(hashes))
            self.notify(f"queuing {len(hashes)} run(s) again (they resume from their checkpoints)")

    def edit_record(self, run_hash: str, **fields: Any) -> bool:
        """Write user fields (tags, note) through the history; False when refused."""
        if not self.writable():
            return False
        self.manager.submit(EditRecord(run_hash, fields))
        return True

    def follow(self, runs: Iterable[tuple[str, str]]) -> None:
        """Load the events of runs (hash, run dir) and keep them coming (RunEvents)."""
        runs = tuple(runs)
        if runs:
            self.manager.submit(Follow(runs))

    def follow_log(self, owner: str, run_hash: str | None, run_dir: str | None = None) -> None:
        """Have ``owner`` (a view) follow the log of one run; ``None`` stops."""
        self.manager.submit(FollowLog(owner, run_hash, run_dir))

    def steer(self, action: str, slots: Iterable[str] = ()) -> None:
        """Pause or resume the queue (``pause``, ``resume``), drain slots or give them runs again (``drain``,
        ``resume`` with slots): runs already running go on."""
        if self.writable():
            self.manager.submit(Steer(action, tuple(slots)))

    def action_pause_queue(self) -> None:
        self.steer("resume" if self.state.paused else "pause")

    def action_undrain_all(self) -> None:
        self.steer("resume", self.state.draining)

    def action_stop_all(self) -> None:
        if not self.writable():
            return
        count = len(self.state.running) + len(self.state.queued)
        if not count:
            self.notify("no run is queued or running")
            return

        def answer(choice: str | None) -> None:
            if choice == "yes":
                self.manager.submit(StopAll())
                self.notify(f"stopping {count} run(s): workers save a checkpoint and stop ...")

        self.push_screen(confirm(f"Stop all {count} queued and running runs?", "Stop all"), answer)

    # -------------------------------------------------------------------------------------- messages

    #: The handler of each kind of :class:`ManagerMessage` (reached only through :meth:`_from_manager`).
    MANAGER_HANDLERS: ClassVar[dict[type[ManagerMessage], str]] = {
        RecordsLoaded: "_records_loaded",
        RecordsAdded: "_records_added",
        RunUpdated: "_run_updated",
        RunEvents: "_run_events",
        LogTail: "_log_tail",
        SchedulerState: "_scheduler_state",
        ManagerNotice: "_manager_notice",
        Recovered: "_recovered",
    }

    @on(ManagerMessage)
    def _from_manager(self, message: ManagerMessage) -> None:
        """Every message of the manager thread (and of background tasks) arrives here. One that arrives while the
        app is being torn down (quitting uninstalls the sections one by one, and the manager may still post) is
        dropped: nothing is left to show it, and what it says is in the history already."""
        if not self.is_running:
            return
        getattr(self, self.MANAGER_HANDLERS[type(message)])(message)

    def _changed(self, hashes: set[str]) -> None:
        if not hashes:
            return
        for record in (self.book.get(h) for h in hashes):
            if record is not None and record["status"] in ("queued", "running"):
                self.session.add(record["hash"])
        for name in SECTIONS:
            self.section(name).records_changed(hashes)
        for run_hash in hashes:
            for screen in RunDetailScreen.open_screens(run_hash):
                screen.records_changed(hashes)
        self._update_subtitle()

    def _records_loaded(self, message: RecordsLoaded) -> None:
        self._changed(self.book.load(message.records))

    def _records_added(self, message: RecordsAdded) -> None:
        self._changed(self.book.add(message.records))

    def _run_updated(self, message: RunUpdated) -> None:
        if self.book.update(message.run_hash, message.fields):
            self._changed({message.run_hash})

    def _run_events(self, message: RunEvents) -> None:
        self.runs_screen.add_events(message.run_hash, message.events, message.reset)
        for screen in RunDetailScreen.open_screens(message.run_hash):
            screen.add_events(message.events, message.reset)

    def _log_tail(self, message: LogTail) -> None:
        self.runs_screen.show_log(message.run_hash, message.lines)
        for screen in RunDetailScreen.open_screens(message.run_hash):
            screen.show_log(message.lines)

    def _scheduler_state(self, message: SchedulerState) -> None:
        self.state = message
        self.session.update(message.running, message.queued)
        self.runs_screen.scheduler_changed(message)
        self._update_subtitle()

    def _manager_notice(self, message: ManagerNotice) -> None:
        self.notify(message.text, severity=message.severity, markup=False, timeout=8)  # type: ignore[arg-type]

    def _recovered(self, message: Recovered) -> None:
        self.recovered = message
        parts = []
        if message.reattached:
            parts.append(f"re-attached {len(message.reattached)} run(s) still running: {', '.join(message.reattached)}")
        if message.refiled:
            parts.append(f"{len(message.refiled)} run(s) finished while gaptui was closed: their results are filed")
        if message.foreground:
            parts.append(message.foreground)
        waiting = [r for r in message.interrupted if r not in message.refiled]
        if waiting:
            parts.append(
                f"{len(waiting)} interrupted run(s) (their worker died): select them in Runs and press r to resume"
            )
        self.notify("; ".join(parts), title="Recovered", markup=False, timeout=12)

    @property
    def detached(self) -> list[str]:
        """Run ids the manager left running (Quit's "Leave running"), for the next start to re-attach."""
        return self.manager.detached

    @on(Worker.StateChanged)
    def _worker_changed(self, event: Worker.StateChanged) -> None:
        worker = event.worker
        if event.state == WorkerState.ERROR:
            error = worker.error
            if isinstance(error, GaptuiError):
                text = str(error)
            else:
                text = f"{worker.name or 'background task'} failed: {type(error).__name__}: {error}"
            if worker is self._manager_worker:
                text += " — the scheduler stopped; running workers go on and are re-attached at the next start"
            self.notify(text, severity="error", markup=False, timeout=15)
        if worker is self._manager_worker and event.state in (WorkerState.SUCCESS, WorkerState.ERROR):
            if self._quitting:
                self.exit()
            self._update_subtitle()

    def _update_subtitle(self) -> None:
        parts = [str(self.ws.root), f"{len(self.book)} runs"]
        if self.state.running or self.state.queued:
            parts.append(f"{len(self.state.running)} running, {len(self.state.queued)} queued")
        if self.state.building:
            parts.append(self.state.building)
        if self.state.control:
            parts.append(self.state.control)
        if self.read_only:
            parts.append("READ-ONLY")
        self.sub_title = " · ".join(parts)

    # -------------------------------------------------------------------------------------- quitting

    async def action_quit(self) -> None:
        """Quit; with runs in flight, ask whether to stop them or leave them running for the next start."""
        if self._quitting:
            return
        manager_alive = self._manager_worker is not None and self._manager_worker.state == WorkerState.RUNNING
        if not manager_alive:
            self.exit()
            return
        running, queued = len(self.state.running), len(self.state.queued)
        if not running and not queued:
            self._close("idle")
            return
        question = (
            f"{running} run(s) running and {queued} queued.\n\n"
            "Stop: workers save a checkpoint and are marked cancelled (retry resumes them).\n"
            "Leave running: workers go on; the next gaptui start on this workspace re-attaches them "
            "(queued runs are cancelled)."
        )
        choices = [
            Choice("stop", "Stop runs", "s", "error"),
            Choice("detach", "Leave running", "l", "warning"),
            Choice("cancel", "Don't quit", "escape", "primary"),
        ]
        self.push_screen(ChoiceScreen(question, choices, title="Quit gaptui"), self._quit_answer)

    def _quit_answer(self, choice: str | None) -> None:
        if choice in ("stop", "detach"):
            self._close(choice)

    def _close(self, how: str) -> None:
        self._quitting = how
        if how == "stop":
            self.notify("stopping runs: workers save a checkpoint and exit ...", timeout=30)
        self.manager.submit(Shutdown(how))


def _lock_holder(ws: Workspace) -> str:
    try:
        return WorkspaceLock(ws).path.read_text().strip() or "another process"
    except OSError:
        return "another process"


def run_app(workspace: str | Path | None = None) -> int:
    """Open the TUI on a workspace (``--workspace``, ``$GAPTUI_WORKSPACE`` or ``./gaptui-runs``); returns the exit
    status: 1 when the app stopped on an error (Textual prints its traceback), after saying which runs it stopped."""
    from gaptui.cli.common import err_console

    app = GaptuiApp(Workspace.resolve(workspace))
    app.run()
    if app.detached:
        err_console.print(
            f"left {len(app.detached)} run(s) running: {', '.join(app.detached)}; "
            "start gaptui on this workspace again to re-attach them",
            highlight=False,
        )
    interrupted = app.manager.interrupted
    if app.return_code:
        stopped = (
            f"; {len(interrupted)} run(s) stopped or not started were recorded interrupted "
            f"({', '.join(interrupted[:8])}{' ...' if len(interrupted) > 8 else ''}): resume them with r in Runs "
            "or the same `gaptui run --preset`"
            if interrupted
            else ""
        )
        err_console.print(f"[red]error:[/] gaptui stopped on an error (above){stopped}", highlight=False)
        return 1
    return 0
