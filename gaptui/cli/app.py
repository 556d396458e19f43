"""The ``gaptui`` command line (Typer): the app, its commands gathered from ``gaptui/cli/`` (one module per group)
and the families' own commands, and the entry point that turns bad input into one ``error:`` line. Every command
takes ``--workspace`` (or ``$GAPTUI_WORKSPACE``)."""

from __future__ import annotations

import os
import sys
from typing import Any

import typer
from rich.markup import escape

from engine.errors import GaptuiError
from gaptui.cli.common import WorkspaceOpt, err_console
from gaptui.workspace import ENV_WORKSPACE

app = typer.Typer(
    name="gaptui",
    help="Benchmark GNN architectures by graph alignment. Without a command: the terminal UI.",
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback(invoke_without_command=True)
def _open_tui_without_command(ctx: typer.Context, workspace: WorkspaceOpt = None) -> None:
    if ctx.invoked_subcommand is None:
        from gaptui.tui.app import run_app  # lazily: CLI start-up never imports textual

        if run_app(workspace):
            raise typer.Exit(1)
    elif workspace is not None:
        # `gaptui --workspace X history` means what `gaptui history --workspace X` means.
        os.environ[ENV_WORKSPACE] = str(workspace)


@app.command("tui")
def tui_cmd(workspace: WorkspaceOpt = None) -> None:
    """Open the terminal UI on the workspace (the same as `gaptui` without a command)."""
    from gaptui.tui.app import run_app

    if run_app(workspace):
        raise typer.Exit(1)


def _register_commands() -> None:
    from gaptui import families
    from gaptui.cli import analysis, diff, queue, records, run, slurm, train, tune

    train.register(app)
    run.register(app)
    records.register(app)
    diff.register(app)
    queue.register(app)
    tune.register(app)
    analysis.register(app)
    families.register_commands(app)
    slurm.register(app)


_register_commands()


def literal_help(command: Any) -> Any:
    """``command`` (a Click command or group, with every sub-command) with its help texts escaped for Rich, which
    Typer reads them as: a bracketed phrase written in a help (``[default: 300]``, ``a [tune] table``) is shown as
    written instead of being taken for a style tag and dropped. Returns ``command``."""
    for attr in ("help", "short_help", "epilog"):
        if isinstance(getattr(command, attr, None), str):
            setattr(command, attr, escape(getattr(command, attr)))
    for param in command.params:
        if isinstance(getattr(param, "help", None), str):
            param.help = escape(param.help)
    for sub in getattr(command, "commands", {}).values():
        literal_help(sub)
    return command


def command() -> Any:
    """The ``gaptui`` Click command that :func:`main` runs: the Typer app with every help text kept literal
    (:func:`literal_help`)."""
    return literal_help(typer.main.get_command(app))


def main() -> None:
    """Console entry point: bad input -> one ``error:`` line on stderr and exit status 2."""
    from engine.files import describe_os_error

    try:
        # Click's own errors come back to us (not as its usage box) so that they read like every other error.
        code = command()(standalone_mode=False)
    except GaptuiError as exc:
        for line in str(exc).splitlines() or [""]:  # a check that found several culprits: one line each
            err_console.print(f"[red]error:[/] {escape(line)}", highlight=False, soft_wrap=True)
        sys.exit(exc.exit_code)
    except _click_exception() as exc:
        line = _usage_error_line(exc)
        if line:
            err_console.print(f"[red]error:[/] {escape(line)}", highlight=False, soft_wrap=True)
        sys.exit(exc.exit_code)
    except typer.Abort:
        err_console.print("[yellow]interrupted[/]")
        sys.exit(130)
    except BrokenPipeError:
        # The reader of our output went away (`gaptui history | head`): nothing left to say to anyone.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
    except OSError as exc:
        # One guard for the filesystem (a workspace that is a file, read-only or full disks, missing folders):
        # one line naming the path; the writes that failed were atomic, so nothing the user had is damaged.
        err_console.print(f"[red]error:[/] {escape(describe_os_error(exc))}", highlight=False, soft_wrap=True)
        sys.exit(2)
    except KeyboardInterrupt:
        err_console.print("[yellow]interrupted[/]")
        sys.exit(130)
    if isinstance(code, int) and not isinstance(code, bool):  # typer.Exit(code) without standalone mode
        sys.exit(code)


def _click_exception() -> type[Exception]:
    """Click's base of the errors it shows a user (Typer bundles Click since 0.22; earlier it depends on it)."""
    return next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")


def _usage_error_line(exc: Exception) -> str:
    """One line for a Click usage error (a bad value, a missing or unknown option) naming the command and where
    its help is; ``""`` for a group called without a command, whose help Typer has printed already."""
    if type(exc).__name__ == "NoArgsIsHelpError":
        return ""
    message = " ".join(str(exc.format_message()).split())  # type: ignore[attr-defined]
    message = message[:1].lower() + message[1:].rstrip(".")
    ctx = getattr(exc, "ctx", None)
    if ctx is None:
        return message
    command = "gaptui" + ctx.command_path[len(ctx.find_root().command_path) :]
    return f"{command}: {message} (see `{command} --help`)"


if __name__ == "__main__":
    main()
