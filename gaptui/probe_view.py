"""A run's probes as tables: the ``sections`` of ``probes.json`` in its folder (written by a family's probe
command, such as ``gaptui probe``), for ``gaptui show``, the probe command itself and the app's run detail.

Only the file's generic part is read (``sections``: a ``title``, ``columns`` with ``key``, ``name`` and ``unit``,
and ``rows``), so any family's probes print the same way.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich import box
from rich.markup import escape
from rich.table import Table

from engine.files import read_json
from engine.tasks import PROBES


def read_probes(run_dir: str | Path | None) -> dict[str, Any] | None:
    """The probes report of the run folder ``run_dir``, or None (no folder, no file, or not a report)."""
    if not run_dir:
        return None
    report = read_json(Path(run_dir) / PROBES)
    return report if isinstance(report, dict) and isinstance(report.get("sections"), list) else None


def format_cell(value: Any, unit: str) -> str:
    """A cell as printed: shares (``unit == "%"``) in percent with one decimal, other numbers with 3 decimals
    below 10 (one below 100, none above), text as it is; a missing value (None: not defined here) as a dash."""
    if value is None:
        return "—"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if unit == "%":
        return f"{100 * value:.1f}"
    if unit == "int" or isinstance(value, int):
        return f"{value:,}" if isinstance(value, int) else f"{value:.0f}"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.1f}" if abs(value) >= 10 else f"{value:.3f}"


def probe_tables(report: dict[str, Any]) -> list[Table]:
    """One Rich table per section of ``report`` (a column with unit ``%`` is headed ``name (%)``)."""
    tables = []
    for section in report.get("sections") or []:
        columns = [c for c in section.get("columns") or [] if isinstance(c, dict) and "key" in c]
        table = Table(
            title=escape(str(section.get("title", ""))),
            title_justify="left",
            box=box.SIMPLE_HEAD,
            pad_edge=False,
            padding=(0, 0),
        )
        for col in columns:
            unit = col.get("unit", "")
            name = f"{col.get('name', col['key'])}{' (%)' if unit == '%' else ''}"
            # cells keep their width (a header wraps instead): a cut number would mislead
            text = unit == "text"
            table.add_column(
                escape(name), justify="left" if text else "right", no_wrap=text, min_width=8 if text else 6
            )
        for row in section.get("rows") or []:
            row = row if isinstance(row, dict) else {}
            table.add_row(*(escape(format_cell(row.get(c["key"]), c.get("unit", ""))) for c in columns))
        tables.append(table)
    return tables


def probes_heading(report: dict[str, Any]) -> str:
    """One line saying what was probed, when, with which options and how long it took."""
    options = ", ".join(f"{k}={v}" for k, v in (report.get("options") or {}).items())
    seconds = report.get("seconds")
    took = f", {seconds:.1f} s" if isinstance(seconds, (int, float)) else ""
    what = report.get("describe", report.get("run", "?"))
    return f"probes of {what} ({report.get('computed', '?')}; {options}{took})"
