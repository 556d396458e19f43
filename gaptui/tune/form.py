"""A ``[tune]`` table as the New-experiment form edits it: the space as one line of text and back."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.errors import GaptuiError
from engine.typed import ascii_count

# ---------------------------------------------------------------------------------------------------- the form


def space_text(space: Mapping[str, Any]) -> str:
    """A ``[tune.space]`` table as the one line the New-experiment form shows: ``lr = { log = [...] }, ...``."""
    from gaptui.presets import toml_literal

    return ", ".join(f"{key} = {toml_literal(value)}" for key, value in space.items())


def parse_space_text(text: str, where: str = "tune space") -> dict[str, Any]:
    """The inverse of :func:`space_text`: ``key = value`` pairs separated by commas, TOML values."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]

    if not text.strip():
        return {}
    try:
        return dict(tomllib.loads(f"space = {{ {text} }}")["space"])
    except tomllib.TOMLDecodeError as exc:
        raise GaptuiError(
            f"{where} '{text}': expected key = value pairs separated by commas, e.g. "
            f"lr = {{ log = [1e-4, 1e-2] }}, layers = [3, 4, 5] ({exc})"
        ) from None


def tune_table(base: Mapping[str, Any] | None, trials: str, space: str) -> dict[str, Any] | None:
    """The ``[tune]`` table a form's two tune fields give (None: both blank, no tuning), the other keys of the
    loaded preset's table (``at``, ``sampler``...) kept."""
    if not trials.strip() and not space.strip():
        return None
    text = trials.strip()
    count = ascii_count(text)
    if count is None or count < 1:
        raise GaptuiError(f"tune trials '{trials}': expected a count of trials per row >= 1")
    table = {k: v for k, v in dict(base or {}).items() if k not in ("trials", "space")}
    return {"trials": count, **table, "space": parse_space_text(space)}
