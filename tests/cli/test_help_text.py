"""Every command's ``--help`` keeps every word of its source text: bracketed phrases (``[default: 300]``, ``a
[tune] table``) are shown as written, not taken by Rich for style tags and dropped."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
import typer
from click.testing import CliRunner

from gaptui.cli.app import app, command

#: What a bracketed phrase of a help text looks like.
BRACKETED = re.compile(r"\[[^\[\]]+\]")
#: Box-drawing characters of Typer's Rich panels, taken out before the words are compared.
BOX = re.compile(r"[│╭╮╰╯─┃━]")


def commands(cmd: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every command and sub-command of ``cmd`` (a Click group), with its path of names."""
    yield path, cmd
    for name, sub in sorted(getattr(cmd, "commands", {}).items()):
        yield from commands(sub, (*path, name))


def words(text: str) -> str:
    return " ".join(BOX.sub(" ", text).split())


def source_phrases(cmd: Any) -> list[str]:
    """The bracketed phrases written in a command's help, short help and options' help."""
    texts = [cmd.help, cmd.short_help, cmd.epilog]
    texts += [getattr(p, "help", None) for p in cmd.params if not getattr(p, "hidden", False)]
    return [words(m) for text in texts if isinstance(text, str) for m in BRACKETED.findall(text.split("\f")[0])]


SOURCE = dict(commands(typer.main.get_command(app)))


def test_the_help_texts_hold_bracketed_phrases_to_check() -> None:
    """The check below has something to find: the phrases that Rich used to eat."""
    phrases = {p for cmd in SOURCE.values() for p in source_phrases(cmd)}
    assert {"[default: 300]", "[tune]", "[default: ./gaptui-runs]"} <= phrases
    assert len(phrases) >= 20


@pytest.mark.parametrize("path", sorted(SOURCE), ids=lambda p: " ".join(p) or "gaptui")
def test_every_bracketed_phrase_of_a_help_is_shown(path: tuple[str, ...]) -> None:
    phrases = source_phrases(SOURCE[path])
    if not phrases:
        pytest.skip("no bracketed phrase in this command's help")
    result = CliRunner().invoke(command(), [*path, "--help"], env={"COLUMNS": "400"}, prog_name="gaptui")
    assert result.exit_code == 0, result.output
    shown = words(result.output)
    missing = [p for p in phrases if p not in shown]
    assert not missing, f"gaptui {' '.join(path)} --help lost {missing}"
    # Escaped twice (by hand, then by the CLI), a bracket would show its backslash.
    assert "\\[" not in result.output, f"gaptui {' '.join(path)} --help shows an escaping backslash"
