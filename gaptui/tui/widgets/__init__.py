"""Widgets of the TUI, one concept per module."""
