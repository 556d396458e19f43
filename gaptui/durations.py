"""Durations as people read them: one home for the CLI's estimate lines and the terminal app's columns."""

from __future__ import annotations


def format_duration(seconds: float | None) -> str:
    """``42 s``, ``3 min``, ``2 h 05 min``, ``3 d 4 h``."""
    if seconds is None:
        return "–"
    seconds = max(0.0, float(seconds))
    if seconds < 90:
        return f"{seconds:.0f} s"
    minutes = seconds / 60
    if minutes < 90:
        return f"{minutes:.0f} min"
    hours, minutes = divmod(int(minutes), 60)
    if hours < 48:
        return f"{hours} h {minutes:02d} min"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h"
