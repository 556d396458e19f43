"""SectionScreen: the frame shared by the app's sections (header, read-only banner, body, footer)."""

from __future__ import annotations

from typing import cast

from textual.app import ComposeResult
from textual.screen import Screen
from textual.widgets import Header

from gaptui.tui.context import AppContext
from gaptui.tui.widgets.banner import ReadOnlyBanner
from gaptui.tui.widgets.footer import StableFooter


class SectionScreen(Screen):
    """A mode of the app. Subclasses compose :meth:`compose_body` and react to :meth:`records_changed`.

    :attr:`ready` turns true at the start of the subclass's ``on_mount`` (``is_mounted`` only after it returns),
    so views updated from the run book know whether their widgets exist.
    """

    ready: bool = False

    @property
    def gapp(self) -> AppContext:
        """The app, as the typed interface screens use (:class:`~gaptui.tui.context.AppContext`)."""
        return cast(AppContext, self.app)

    def compose(self) -> ComposeResult:
        yield Header()
        if self.gapp.read_only:
            yield ReadOnlyBanner(self.gapp.read_only)
        yield from self.compose_body()
        yield StableFooter()

    def compose_body(self) -> ComposeResult:
        yield from ()

    def records_changed(self, hashes: set[str]) -> None:
        """Records of these hashes changed in the app's run book (called on the UI thread, mounted or not)."""
