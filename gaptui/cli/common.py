"""Options and output helpers shared by every ``gaptui`` command module."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console

from gaptui.workspace import DEFAULT_WORKSPACE, ENV_WORKSPACE

console = Console()
err_console = Console(stderr=True)

WorkspaceOpt = Annotated[
    Optional[Path],  # noqa: UP045 (Typer needs Optional on Python 3.10)
    typer.Option("--workspace", "-w", envvar=ENV_WORKSPACE, help=f"Workspace folder [default: ./{DEFAULT_WORKSPACE}]."),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document instead of tables.")]
#: The local slots of a command that starts runs (``gaptui run``, ``gaptui tune``).
GpusOpt = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option("--gpus", help="GPU indices, e.g. 0,1; 'none' for CPU only [default: all visible]."),
]
JobsPerGpuOpt = Annotated[int, typer.Option("--jobs-per-gpu", help="Concurrent runs per GPU.")]
CpuJobsOpt = Annotated[
    Optional[int],  # noqa: UP045
    typer.Option("--cpu-jobs", help="Concurrent CPU runs [default: half the cores when there is no GPU]."),
]


#: A JSON list longer than this is printed one item per line (json's C encoder) instead of indented (its Python
#: one, ~10x slower): 20,000 history records.
JSON_LINES_ITEMS = 1000


def print_json(obj: Any) -> None:
    if isinstance(obj, list) and len(obj) > JSON_LINES_ITEMS:
        items = ",\n".join(json.dumps(item, sort_keys=True, default=str) for item in obj)
        sys.stdout.write("[\n" + items + "\n]\n")
        return
    sys.stdout.write(json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def warn(line: str) -> None:
    """One ``warning:`` line on stderr (the text printed as it is, never read as markup)."""
    from rich.markup import escape

    err_console.print(f"[yellow]warning:[/] {escape(line)}", highlight=False, soft_wrap=True)


def note(line: str) -> None:
    """One ``note:`` line on stderr."""
    from rich.markup import escape

    err_console.print(f"[yellow]note:[/] {escape(line)}", highlight=False, soft_wrap=True)


def task_name(value: str | None) -> str | None:
    """``--task``: a family name. An empty one is refused, never read as the default family."""
    if value is not None and not value.strip():
        from engine.errors import GaptuiError
        from engine.tasks import FAMILIES

        raise GaptuiError(f"--task '{value}': expected a task family name ({', '.join(FAMILIES.names())})")
    return value


TaskOpt = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option(
        "--task",
        "-t",
        callback=task_name,
        help="Task family (see `gaptui tasks`) [default: the family of the history's runs, when they are of one].",
    ),
]
