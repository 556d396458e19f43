"""``gaptui queue``: steer the grid a manager runs on a workspace from another terminal (pause, resume, drain a
slot, status), through the request and state files of :mod:`gaptui.queue_control`."""

from __future__ import annotations

from typing import Annotated, Any, Optional

import typer

from gaptui.cli.common import JsonOpt, WorkspaceOpt, console, print_json
from gaptui.workspace import Workspace

queue_app = typer.Typer(
    help="Steer the grid that `gaptui run` or the app runs on a workspace, from another terminal: pause and resume "
    "the queue, drain a slot (it finishes its run and takes no other), see the state.",
    no_args_is_help=True,
)

SlotsArg = Annotated[
    Optional[list[str]],  # noqa: UP045
    typer.Argument(metavar="[SLOT]...", help="Slot names as `gaptui queue status` lists them (cpu#0, cuda:0#0 ...)."),
]


def register(app: typer.Typer) -> None:
    app.add_typer(queue_app, name="queue")
    queue_app.command("pause")(pause_cmd)
    queue_app.command("resume")(resume_cmd)
    queue_app.command("drain")(drain_cmd)
    queue_app.command("status")(status_cmd)


def pause_cmd(workspace: WorkspaceOpt = None) -> None:
    """Start no more runs (running ones go on); `gaptui queue resume` goes on."""
    _say(_request(workspace, "pause", []))


def resume_cmd(slots: SlotsArg = None, workspace: WorkspaceOpt = None) -> None:
    """Start runs again: end the pause (no SLOT; drained slots stay drained), or give the drained SLOTs runs
    again."""
    _say(_request(workspace, "resume", slots or []))


def drain_cmd(
    slots: Annotated[list[str], typer.Argument(metavar="SLOT...", help="Slot names (`gaptui queue status`).")],
    workspace: WorkspaceOpt = None,
) -> None:
    """Let each SLOT finish its run and take no other (`gaptui queue resume SLOT` gives it runs again)."""
    _say(_request(workspace, "drain", slots))


def status_cmd(workspace: WorkspaceOpt = None, as_json: JsonOpt = False) -> None:
    """The queue of the manager running on the workspace: paused or not, draining slots, runs running and queued."""
    from gaptui.history.store import WorkspaceLock
    from gaptui.queue_control import read_state

    ws = Workspace.resolve(workspace)
    lock = WorkspaceLock(ws, "gaptui queue status")
    state = read_state(ws) if ws.root.is_dir() else None
    running = state is not None and not _lock_free(lock)
    if as_json:
        print_json(state if running else None)
        return
    if not running:
        console.print(f"no manager is running on workspace {ws.root}", highlight=False)
        return
    _say(state)


def _lock_free(lock: Any) -> bool:
    from engine.errors import GaptuiError

    try:
        lock.acquire()
    except GaptuiError:
        return False
    lock.release()
    return True


def _request(workspace: Any, action: str, slots: list[str]) -> dict[str, Any]:
    from gaptui.queue_control import request

    return request(Workspace.resolve(workspace), action, slots)


def _say(state: dict[str, Any]) -> None:
    """One line: the manager, the queue's state, runs running and queued, and the slots."""
    halted = f" · halted ({state['halted']})" if state.get("halted") else ""
    paused = "paused" if state.get("paused") else "going"
    draining = state.get("draining") or []
    slots = ", ".join(f"{s} (draining)" if s in draining else s for s in state.get("slots") or [])
    console.print(
        f"{state.get('manager')} (pid {state.get('pid')}): queue {paused}{halted} · {state.get('running', 0)} "
        f"running, {state.get('queued', 0)} queued · slots {slots or 'none'}",
        highlight=False,
        markup=False,
        soft_wrap=True,
    )
