"""``gaptui export``: one family's tables (CSV, Markdown, LaTeX) and run records (JSON) into a folder, all files
or none (:class:`engine.files.OutputFolder`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from engine.files import OutputFolder
from engine.tasks import family
from gaptui.analysis.lookup import infer_task
from gaptui.analysis.render import render_csv, render_latex, render_markdown
from gaptui.analysis.tables import build_tables
from gaptui.record import Record, task_records

EXPORT_FILES = ("tables.csv", "tables.md", "tables.tex", "runs.json")
EXPORT_MANIFEST = ".gaptui-export.json"


def export_all(
    records: Sequence[Record],
    out_dir: Path,
    metric: str | None = None,
    force: bool = False,
    task: str | None = None,
) -> list[Path]:
    """Write ``tables.csv``, ``tables.md``, ``tables.tex`` (``task``'s tables) and ``runs.json`` into ``out_dir``.

    ``runs.json`` holds the records of ``task`` (all of its records, finished or not). ``task`` None: the one
    family the records hold runs of (:func:`~gaptui.analysis.lookup.infer_task`; records of several families are
    an error, and no records give empty files).

    The files are written all or none (:class:`engine.files.OutputFolder`: staged in a hidden folder, moved in
    under a manifest that already claims them), so a full disk leaves the folder as it was and a kill leaves files
    the rerun replaces. A file of the same name is replaced only when a previous export wrote it (listed in
    ``.gaptui-export.json``) or when ``force`` is set; otherwise nothing is written and :class:`GaptuiError` names
    the file. Returns the paths written, manifest last.
    """
    out_dir = Path(out_dir)
    folder = OutputFolder(out_dir, EXPORT_MANIFEST, "gaptui export", force)
    folder.refuse(EXPORT_FILES)  # before any work
    records = list(records)
    task = infer_task(records, task)  # None: there are no records
    records = task_records(records, task) if task else []
    tables = build_tables(records, metric, task=task)
    metric_key = tables[0].metric.key if tables else metric or (family(task).default_metric if task else None)
    contents = {
        "tables.csv": render_csv(tables, task),
        "tables.md": render_markdown(tables),
        "tables.tex": render_latex(tables),
        "runs.json": json.dumps(list(records), indent=2, sort_keys=True, default=str) + "\n",
    }
    with folder as dest:
        for name in EXPORT_FILES:
            dest.stage(name).write_text(contents[name], encoding="utf-8")
        dest.details.update(task=task, metric=metric_key, runs=len(records), tables=len(tables))
    return [out_dir / name for name in (*dest.names, EXPORT_MANIFEST)]
