"""ReadOnlyBanner: says why the workspace is open read-only and what still works."""

from __future__ import annotations

from textual.widgets import Static


class ReadOnlyBanner(Static):
    """A one-line warning on every screen while another manager holds the workspace lock."""

    DEFAULT_CSS = """
    ReadOnlyBanner {
        height: auto;
        padding: 0 1;
        background: $warning 30%;
        color: $text;
        text-style: bold;
    }
    """

    def __init__(self, reason: str) -> None:
        super().__init__(
            f"READ-ONLY — {reason}. Browsing works; launching, cancelling and editing are disabled.",
            markup=False,
        )
