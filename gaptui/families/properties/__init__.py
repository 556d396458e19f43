"""The properties family's user-interface side: its CLI commands (:mod:`.commands`)."""
