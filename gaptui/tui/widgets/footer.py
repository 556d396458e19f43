"""StableFooter: Textual's Footer, rebuilt only when the bindings it shows change.

Textual's Footer recomposes (a widget per key) on every bindings signal: every screen switch and focus change.
Switching sections is the most frequent action of the app, and that rebuild was a third of its cost.
"""

from __future__ import annotations

from typing import Any

from textual.screen import Screen
from textual.widgets import Footer


class StableFooter(Footer):
    """Skips the rebuild when the active bindings (keys, actions, descriptions, enabled state) are unchanged."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._shown: tuple[Any, ...] | None = None

    def bindings_changed(self, screen: Screen) -> None:
        """Rebuild only when the shown bindings differ from the last ones."""
        shown = tuple(
            (key, active.binding.action, active.binding.description, active.binding.show, active.enabled)
            for key, active in screen.active_bindings.items()
        )
        focused = screen.app.app_focus  # without focus Footer defers the rebuild: remember nothing then
        if focused and shown == self._shown:
            return
        self._shown = shown if focused else None
        super().bindings_changed(screen)
