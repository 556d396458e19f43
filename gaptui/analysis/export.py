"""``gaptui export``: one family's tables (CSV, Markdown, LaTeX) and run records (JSON) into a folder, all files
or none."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from engine.errors import GaptuiError
from engine.files import refuse_foreign, staged_files, written_by
from engine.tasks import DEFAULT_TASK, family
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
    task: str = DEFAULT_TASK,
) -> list[Path]:
    """Write ``tables.csv``, ``tables.md``, ``tables.tex`` (``task``'s tables) and ``runs.json`` into ``out_dir``.

    ``runs.json`` holds the records of ``task`` (all of its records, finished or not).

    The files are written all or none (temporary siblings renamed into place once all are written), so a full
    disk leaves the folder as it was. A file of the same name is replaced only when a previous export wrote it
    (listed in ``.gaptui-export.json``) or when ``force`` is set; otherwise nothing is written and
    :class:`GaptuiError` names the file. Returns the paths written, manifest last.
    """
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise GaptuiError(f"export folder {out_dir} exists and is not a folder")
    if not force:
        refuse_foreign(out_dir, list(EXPORT_FILES), written_by(out_dir, EXPORT_MANIFEST), "gaptui export")
    out_dir.mkdir(parents=True, exist_ok=True)
    records = task_records(records, task)
    tables = build_tables(records, metric, task=task)
    metric_key = tables[0].metric.key if tables else metric or family(task).default_metric
    contents = {
        "tables.csv": render_csv(tables, task),
        "tables.md": render_markdown(tables),
        "tables.tex": render_latex(tables),
        "runs.json": json.dumps(list(records), indent=2, sort_keys=True, default=str) + "\n",
    }
    manifest = {
        "files": list(EXPORT_FILES),
        "task": task,
        "metric": metric_key,
        "runs": len(records),
        "tables": len(tables),
    }
    contents[EXPORT_MANIFEST] = json.dumps(manifest, indent=2) + "\n"
    written = [out_dir / name for name in (*EXPORT_FILES, EXPORT_MANIFEST)]
    with staged_files() as stage:
        for path in written:
            stage(path).write_text(contents[path.name], encoding="utf-8")
    return written
