"""The user-interface side of the brec family: its commands and its parts of the report."""
