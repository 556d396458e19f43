"""Screens of the TUI: one per section (new experiment, runs, history, ranking) plus dialogs."""
