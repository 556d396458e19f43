"""A progress line for the CLI's long steps: calibrating this machine, preparing a grid's inputs, building a
dataset. A spinner, what is being done, a bar and ``done/total`` once the total is known, and the time elapsed, on
stderr; nothing at all when stderr is not a terminal (piped output stays the lines a script reads)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.markup import escape
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from gaptui.cli.common import err_console

#: ``update(text, done, total)``: what is being done, and how far (``total`` 0: not counted).
Update = Callable[[str, int, int], None]


@contextmanager
def step_progress(text: str, quiet: bool = False) -> Iterator[Update]:
    """Show ``text`` with a spinner and the time elapsed until the block ends (nothing when ``quiet``: a command
    asked for JSON); the block moves it on with the ``update`` it is given."""
    progress = Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.fields[count]}"),
        TimeElapsedColumn(),
        console=err_console,
        transient=True,
        disable=quiet or not err_console.is_terminal,
    )
    task = progress.add_task(escape(text), total=None, count="")

    def update(text: str, done: int, total: int) -> None:
        count = f"{done}/{total}" if total else ""
        progress.update(task, description=escape(text), completed=done, total=total or None, count=count)

    with progress:
        yield update
