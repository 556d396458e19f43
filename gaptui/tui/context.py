"""What the app's screens need from it: :class:`AppContext`, a small typed interface.

Screens reach the app only through this protocol (``SectionScreen.gapp``), never through :class:`GaptuiApp`
itself, so a screen can be read, type-checked and tested against anything that provides these members, and the
app's own code (start-up, the manager thread, quitting) can change without touching the screens.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from textual.worker import Worker

    from engine.tasks import PresetBase
    from gaptui.history.store import History
    from gaptui.tui.manager import ManagerLoop
    from gaptui.tui.messages import SchedulerState
    from gaptui.tui.planning import SlotConfig
    from gaptui.tui.runbook import RunBook
    from gaptui.workspace import Workspace


@runtime_checkable
class AppContext(Protocol):
    """The app as its screens see it: the workspace and its history, the run book, the manager's commands."""

    #: The workspace the app manages.
    ws: Workspace
    #: Its history (read here; the manager thread writes it).
    history: History
    #: The manager loop (scheduler thread); screens send it commands through the methods below.
    manager: ManagerLoop
    #: The records the screens show, kept current from the manager's messages.
    book: RunBook
    #: The scheduler's last reported state (queued, running, slots).
    state: SchedulerState
    #: Hashes of runs launched, retried or seen running in this session.
    session: set[str]
    #: Why the workspace is read-only ("" when this app holds the lock).
    read_only: str

    def run_task(self, function: Callable[[], Any], *, name: str, group: str, exclusive: bool = False) -> Worker[Any]:
        """Run ``function`` in a worker thread (off the UI thread)."""
        ...

    def notify(
        self,
        message: str,
        *,
        title: str = "",
        severity: Any = "information",
        timeout: float | None = None,
        markup: bool = True,
    ) -> None:
        """Show a notification."""
        ...

    def switch_mode(self, mode: str) -> Any:
        """Show the section ``mode`` (``new``, ``runs``, ``history``, ``ranking``)."""
        ...

    def writable(self) -> bool:
        """True when commands that change runs or history can be sent; otherwise says why in a notification."""
        ...

    def launch(self, preset: PresetBase, slots: SlotConfig, retry_failed: bool = False) -> bool:
        """Queue a grid; False when refused."""
        ...

    def steer(self, action: str, slots: Iterable[str] = ()) -> None:
        """Pause or resume the queue, drain slots or give them runs again."""
        ...

    def cancel_runs(self, hashes: Iterable[str]) -> None: ...

    def retry_runs(self, hashes: Iterable[str]) -> None: ...

    def edit_record(self, run_hash: str, **fields: Any) -> bool: ...

    def follow(self, runs: Iterable[tuple[str, str]]) -> None: ...

    def follow_log(self, owner: str, run_hash: str | None, run_dir: str | None = None) -> None: ...

    async def open_in_history(self, run_hash: str) -> None: ...
