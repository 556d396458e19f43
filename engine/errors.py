"""User-facing errors of the engine.

A :class:`GaptuiError` means the input was wrong (a file, a key, a value); front ends print its message as one
line and exit with status 2. Any other exception is a bug.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterable


class GaptuiError(Exception):
    """Bad input: the message names the culprit and what was expected."""

    exit_code = 2


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """Return ``" (did you mean 'x'?)"`` for the closest choice, or ``""`` when nothing is close."""
    word = str(word)
    close = difflib.get_close_matches(word, list(choices), n=5, cutoff=0.5)
    if not close:
        return ""

    def closeness(choice: str) -> tuple[float, int]:
        # difflib's ratio, then (for ties such as gcm: gcn or sgc) the longer common prefix: typos keep the start
        prefix = len(os.path.commonprefix([word.lower(), choice.lower()]))
        return difflib.SequenceMatcher(None, word, choice).ratio(), prefix

    return f" (did you mean '{max(close, key=closeness)}'?)"


def unknown(kind: str, word: str, choices: Iterable[str]) -> GaptuiError:
    """The error for an unknown name: lists the known ones and suggests the closest."""
    choices = sorted(choices)
    return GaptuiError(f"unknown {kind} '{word}'{did_you_mean(word, choices)}; known: {', '.join(choices)}")
