"""Ranking tables and gaps over finished runs (paper Table D.3, section 5, Table 1), plus their renderers.

Everything here is a pure function of run records (:class:`gaptui.record.Record`, as the history stores them); the
only I/O is :func:`export_all`. One module per concept: :mod:`.lookup` (families, metrics and groups of the
records; option checks), :mod:`.cells` (one cell, one protocol: the rows split by protocol, ``--by``, the protocol
line), :mod:`.tables` (cells, marks, ranking and derived tables), :mod:`.gap` (gap and optimal
column), :mod:`.render` (Rich, text, Markdown, CSV, LaTeX, JSON, gap table and plot), :mod:`.export` (``gaptui
export``), :mod:`.significance` (the per-cell tests behind the tie mark) and :mod:`.statistics` (``gaptui stats``:
per-cell tests, ranks, Friedman, Nemenyi, rank consistency; imported on its own, ``from gaptui.analysis import
statistics``, as it needs scipy); every public name of the others is importable from ``gaptui.analysis``.

What a table is made of comes from the run's task family (:mod:`engine.tasks`): its
:class:`~engine.tasks.TableLayout` says which axis makes one table per value (alignment: dataset), which axis gives
the rows (model) and which the columns (noise); its declared :class:`~engine.tasks.Metric` gives the direction
(never guessed from a name), the unit and the display name. Records are grouped once, so building every table of
a 2,000-run history is a single pass.

Statistics
    A cell is one (group, row, column). Its value is the **median** over seeds of one metric and its spread the
    **sample standard deviation** (``ddof=1``; 0 for a single run). Only ``status == "done"`` records with a finite
    numeric value of the metric count. A cell holds runs of one protocol (:mod:`.cells`: every hashed option but
    the seed): where the runs of a cell differ in protocol, the table's rows are split by what differs, and each
    row label says its values (``gin (epochs 20)``), so two protocols are never averaged, nor one replaced by the
    other. When one seed of a protocol was run more than once, the run that finished last stands for that seed.

Units
    Metrics declared with unit ``%`` are shares in [0, 1] and are shown in percent with one decimal, like
    Table D.3 ("97.6 ± 0.4"). Other metrics (losses, MAE) are shown as they are, with three decimals.
    Machine-readable outputs (CSV, JSON) keep the metric's own units (shares for accuracies).

Marks (per column, paper colours: red = best and within 1 %, blue = within 3 %)
    The best cell has the best median among rows that are not baselines (alignment: the Laplacian baseline is
    shown but is never marked and never counts as the best). Ties all get ``best``. Another cell is ``within1``
    when its median is at most 1 **absolute percentage point** from the best (shares, e.g. 96.6 vs 97.6),
    ``within3`` when at most 3 points. For metrics that are not shares percentage points mean nothing, so the
    thresholds are relative: within 1 % (3 %) of the best value. Comparisons use the unrounded medians with a
    1e-9 tolerance. Without colour the marks read as suffixes: ``**`` best, ``*`` within 1, ``+`` within 3.

Gap (paper section 5)
    In each column, gap(row) = median(row) − median(worst non-baseline row), measured in the better direction
    (so it is >= 0 for losses too); the spread is best − worst. The optimal column maximises the spread; ties go
    to the first column (the lower noise level for alignment). It is computed and shown only where the family
    says what it means (:attr:`engine.tasks.TaskFamily.optimal`: alignment's optimal noise, the property
    study's optimal property and Table 2's optimal dimension; GAPE declares none).
"""

from __future__ import annotations

from gaptui.analysis.export import EXPORT_FILES, EXPORT_MANIFEST, export_all
from gaptui.analysis.gap import GapAnalysis, gap_analysis
from gaptui.analysis.lookup import (
    FORMATS,
    check_format,
    check_group,
    check_metric,
    check_task,
    display_scale,
    done_groups,
    format_number,
    infer_task,
    known_metrics,
    numeric_value,
    record_tasks,
    view_task,
)
from gaptui.analysis.render import (
    csv_columns,
    draw_gap_plot,
    latex_escape,
    legend,
    legend_parts,
    optimal_line,
    protocol_line,
    protocol_lines,
    render_csv,
    render_gap_plot,
    render_gap_rich,
    render_latex,
    render_markdown,
    render_rich,
    render_text,
    table_title,
    tables_json,
)
from gaptui.analysis.tables import (
    BEST,
    CELL_FIELDS,
    EMPTY,
    MARKERS,
    RICH_STYLES,
    SIGNIFICANCE,
    TIED_MARKER,
    WITHIN_1,
    WITHIN_1_POINTS,
    WITHIN_3,
    WITHIN_3_POINTS,
    Cell,
    RankingTable,
    build_tables,
)
from gaptui.record import axis_value, record_task, task_records

__all__ = [
    "BEST",
    "CELL_FIELDS",
    "Cell",
    "EMPTY",
    "EXPORT_FILES",
    "EXPORT_MANIFEST",
    "FORMATS",
    "GapAnalysis",
    "MARKERS",
    "RICH_STYLES",
    "RankingTable",
    "SIGNIFICANCE",
    "TIED_MARKER",
    "WITHIN_1",
    "WITHIN_1_POINTS",
    "WITHIN_3",
    "WITHIN_3_POINTS",
    "axis_value",
    "build_tables",
    "check_format",
    "check_group",
    "check_metric",
    "check_task",
    "csv_columns",
    "display_scale",
    "done_groups",
    "draw_gap_plot",
    "export_all",
    "format_number",
    "gap_analysis",
    "infer_task",
    "known_metrics",
    "latex_escape",
    "legend",
    "legend_parts",
    "numeric_value",
    "optimal_line",
    "protocol_line",
    "protocol_lines",
    "record_task",
    "record_tasks",
    "render_csv",
    "render_gap_plot",
    "render_gap_rich",
    "render_latex",
    "render_markdown",
    "render_rich",
    "render_text",
    "table_title",
    "tables_json",
    "task_records",
    "view_task",
]
