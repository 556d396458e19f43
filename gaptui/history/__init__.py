"""Run history: a TinyDB file in the workspace.

One manager (``gaptui run``, the terminal app) holds the workspace lock at a time; short writers (``tag``,
``note``, a foreground ``train``) may write while it runs. Every write is a read-modify-write under a short lock
on the history file alone (``history.lock``), and atomic (temporary file, fsync, rename, fsync of the folder), so
a SIGKILL at any moment leaves either the old or the new file, never a torn one, and no writer loses another's
change. A corrupt file (not JSON, not UTF-8, the wrong shape) is reported in one line and kept as it is.
Read-only opens show a record left ``running`` by a killed ``gaptui train`` or manager as ``interrupted`` once its
worker is gone (:func:`shown`); the next manager records it so.

A record (schema 2) names its task family (``task``) and holds the run's coordinates in ``axes`` (the keys the
family declares, e.g. ``dataset``/``noise``/``model`` for alignment), its ``seed``, full ``spec``, the run hashes
it ``depends`` on, its status, metrics and bookkeeping. A schema-1 file (alignment only, with ``dataset``,
``noise`` and ``model`` at the top level) is upgraded in place the first time it is opened for writing, after a
copy of the old file is kept as ``history.v1.json`` (or ``history.v1.N.json``); read-only opens upgrade the
records in memory and leave the file alone. Records are :class:`gaptui.record.Record` (a ``TypedDict``: the stored
mapping itself, so reading an existing store loses nothing).
"""
