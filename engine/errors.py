"""User-facing errors of the engine.

A :class:`GaptuiError` means the input was wrong (a file, a key, a value); front ends print its message as one
line and exit with status 2. Any other exception is a bug.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class GaptuiError(Exception):
    """Bad input: the message names the culprit and what was expected."""

    exit_code = 2


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """Return ``" (did you mean 'x'?)"`` for the closest choice, or ``""`` when nothing is close."""
    close = difflib.get_close_matches(str(word), list(choices), n=1, cutoff=0.5)
    return f" (did you mean '{close[0]}'?)" if close else ""


def unknown(kind: str, word: str, choices: Iterable[str]) -> GaptuiError:
    """The error for an unknown name: lists the known ones and suggests the closest."""
    choices = sorted(choices)
    return GaptuiError(f"unknown {kind} '{word}'{did_you_mean(word, choices)}; known: {', '.join(choices)}")
