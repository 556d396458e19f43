"""RankingScreen: one ranking table at a time (alignment: Table D.3 per dataset), its gap plot, export of the
table, and the comparison with a reference (the family's paper, e.g. alignment's Table D.3, or a user's file, as
``gaptui table --reference``; every family that has one).

A task picker switches family: its layout, metrics and directions come from the family (:mod:`engine.tasks`).
Until one is picked, the screen shows the family of the history's runs (:func:`gaptui.analysis.view_task`: the
first present in registry order, else the first registered family).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.content import Content
from textual.widgets import Label, Select, Static

from engine.errors import GaptuiError
from engine.files import atomic_write_text
from engine.tasks import FAMILIES, family
from gaptui import analysis
from gaptui.analysis import reference
from gaptui.analysis.cells import by_keys
from gaptui.record import usable_records
from gaptui.tui.messages import ManagerNotice
from gaptui.tui.screens.confirm import Choice, ChoiceScreen, confirm
from gaptui.tui.screens.section import SectionScreen
from gaptui.tui.widgets.gap_plot import GapPlot
from gaptui.tui.widgets.ranking_grid import RankingGrid
from gaptui.tune.results import table_view

#: Seconds between checks whether finished runs changed the tables (rebuilt only when they did).
REFRESH_SECONDS = 1.0
#: Export formats: choice key -> (file extension, renderer of a list of tables).
EXPORTS = {
    "md": ("md", analysis.render_markdown),
    "csv": ("csv", analysis.render_csv),
    "latex": ("tex", analysis.render_latex),
}


def export_path(exports: Path, group: str, metric: str, fmt: str) -> Path:
    """``<workspace>/exports/<group>-<metric>.<ext>``, the group label (a dataset) made safe for a file name."""
    slug = re.sub(r"[^\w.=-]+", "_", group).strip("_") or "table"
    return exports / f"{slug}-{metric}.{EXPORTS[fmt][0]}"


class RankingScreen(SectionScreen):
    """Marks as in the paper: best bold red (``**``), within 1 point red (``*``), within 3 points blue (``+``)."""

    TITLE = "Ranking"
    BINDINGS: ClassVar[list[Binding]] = [
        Binding("e", "export", "Export table"),
        Binding("f", "figures", "Export figures"),
        Binding("right_square_bracket", "dataset(1)", "Next table"),
        Binding("left_square_bracket", "dataset(-1)", "Previous table"),
        Binding("m", "next_metric", "Next metric"),
        Binding("r", "next_reference", "Next reference"),
        Binding("t", "next_task", "Next task"),
        Binding("b", "next_by", "Split rows by"),
    ]
    DEFAULT_CSS = """
    RankingScreen #ranking-bar { height: 1; padding: 0 1; }
    RankingScreen #ranking-bar Label { padding: 0 1 0 0; }
    RankingScreen #ranking-bar Select { width: 1fr; max-width: 40; margin-right: 2; }
    RankingScreen #ranking-bar #ranking-task { max-width: 18; }
    RankingScreen #ranking-title { padding: 0 1; text-style: bold; }
    RankingScreen #ranking-legend { padding: 0 1; color: $text-muted; height: auto; }
    RankingScreen #ranking-compare { padding: 0 1; height: auto; }
    """

    def __init__(self) -> None:
        super().__init__()
        #: The family shown: the history's (:func:`gaptui.analysis.view_task`, from the screen's composition and
        #: at each rebuild) until the user picks one; the first registered family until then.
        self.task_name = FAMILIES.names()[0]
        self.task_picked = False
        self.metric = family(self.task_name).default_metric
        self.dataset: str | None = None
        self.tables: list[analysis.RankingTable] = []
        #: Name of the reference compared with (None: plain ranking table).
        self.reference: str | None = None
        #: The key the rows are split by as well (``gaptui table --by``; None: only where protocols differ).
        self.by: str | None = None
        self._dirty = True

    def compose_body(self) -> ComposeResult:
        # The pickers' first values are the ones they report once mounted: the family shown must be chosen by then.
        self.task_name = analysis.view_task(table_view(usable_records(self.gapp.book)))
        self.metric = family(self.task_name).default_metric
        with Horizontal(id="ranking-bar"):
            yield Label("task")
            yield Select(
                [(self.task_name, self.task_name)],
                value=self.task_name,
                id="ranking-task",
                compact=True,
                allow_blank=False,
            )
            yield Label("table")
            yield Select([], prompt="no finished runs", id="ranking-dataset", compact=True, allow_blank=True)
            yield Label("metric")
            yield Select(
                [(m, m) for m in analysis.known_metrics([], self.task_name)],
                value=self.metric,
                id="ranking-metric",
                compact=True,
                allow_blank=False,
            )
            yield Label("reference")
            yield Select(
                [(name, name) for name in reference.reference_names(self.gapp.ws, self.task_name)],
                prompt="none",
                id="ranking-reference",
                compact=True,
                allow_blank=True,
            )
        yield Static("", id="ranking-title", markup=False)
        yield RankingGrid(id="ranking-table")
        yield Static("", id="ranking-compare")
        yield Static("", id="ranking-legend")
        yield GapPlot(id="gap-plot")

    def on_mount(self) -> None:
        self.ready = True
        self.rebuild()
        self.set_interval(REFRESH_SECONDS, self._refresh_if_dirty)

    def on_screen_resume(self) -> None:
        self._refresh_if_dirty()

    def records_changed(self, hashes: set[str]) -> None:
        self._dirty = True

    def _refresh_if_dirty(self) -> None:
        if self._dirty and self.is_current:
            self.rebuild()

    @property
    def table(self) -> analysis.RankingTable | None:
        """The table of the chosen dataset, or None without finished runs."""
        return next((t for t in self.tables if t.group == self.dataset), None)

    # -------------------------------------------------------------------------------------- contents

    def rebuild(self) -> None:
        """Recompute every table from the app's records and show the chosen dataset."""
        self._dirty = False
        # hand-garbled records and tuning trials are left out, as in `gaptui table`
        records = table_view(usable_records(self.gapp.book))
        if not self.task_picked:
            self.task_name = analysis.view_task(records)
        tasks = list(dict.fromkeys([*analysis.record_tasks(records), self.task_name]))
        metrics = analysis.known_metrics(records, self.task_name)
        if self.metric not in metrics:
            self.metric = family(self.task_name).default_metric
        if self.by is not None and self.by not in by_keys(family(self.task_name)):
            self.by = None
        by = (self.by,) if self.by else ()
        self.tables = analysis.build_tables(records, self.metric, task=self.task_name, by=by)
        metric_select = self.query_one("#ranking-metric", Select)
        with self.prevent(Select.Changed):
            task_select = self.query_one("#ranking-task", Select)
            task_select.set_options([(t, t) for t in tasks])
            task_select.value = self.task_name
            metric_select.set_options([(m, m) for m in metrics])
            metric_select.value = self.metric
            names = reference.reference_names(self.gapp.ws, self.task_name)
            if self.reference not in names:
                self.reference = None
            reference_select = self.query_one("#ranking-reference", Select)
            reference_select.set_options([(name, name) for name in names])
            if self.reference is None:
                reference_select.clear()
            else:
                reference_select.value = self.reference
            labels = [t.group for t in self.tables]
            if self.dataset not in labels:
                self.dataset = labels[0] if labels else None
            dataset_select = self.query_one("#ranking-dataset", Select)
            dataset_select.set_options([(Content(label), label) for label in labels])
            if self.dataset is not None:
                dataset_select.value = self.dataset
        self._show()

    def _comparison(self, table: analysis.RankingTable) -> reference.Comparison | str:
        """The comparison of ``table`` with the chosen reference, or why there is none (one line)."""
        assert self.reference is not None
        try:
            chosen = reference.load_reference(self.reference, self.gapp.ws, table.task)
            comparison = reference.compare(table, chosen)
        except GaptuiError as exc:
            return f"reference: {exc}"
        return reference.not_covered(table, chosen) if comparison is None else comparison

    def _show(self) -> None:
        table = self.table
        grid = self.query_one(RankingGrid)
        compare = self.query_one("#ranking-compare", Static)
        comparable = table is not None and self.reference is not None
        comparison = self._comparison(table) if comparable else None
        # With a comparison, it replaces the grid (it holds our medians and marks too).
        grid.display = not isinstance(comparison, reference.Comparison)
        compare.display = comparison is not None
        if isinstance(comparison, reference.Comparison):
            compare.update(reference.render_rich(comparison))
        elif comparison is not None:
            compare.update(Text(comparison, style="yellow"))
        grid.show(table)
        title = self.query_one("#ranking-title", Static)
        legend = self.query_one("#ranking-legend", Static)
        if table is None:
            title.update("no finished run yet: launch a grid in New experiment (F2)")
            legend.update("")
            self.query_one(GapPlot).draw(None)
            return
        gap = analysis.gap_analysis(table)
        title.update(analysis.table_title(table))
        # The legend of `render_rich`, in the colours of the marks, then the table's protocol.
        text = Text(" ").join(
            Text(words, style=analysis.RICH_STYLES[mark]) for mark, words in analysis.legend_parts(table)
        )
        if line := analysis.protocol_line(table):
            text.append("\n" + line)
        legend.update(text)
        self.query_one(GapPlot).draw(gap)

    @on(Select.Changed, "#ranking-dataset")
    def _dataset_chosen(self, event: Select.Changed) -> None:
        if event.value is not Select.NULL and event.value != self.dataset:
            self.dataset = str(event.value)
            self._show()

    @on(Select.Changed, "#ranking-task")
    def _task_chosen(self, event: Select.Changed) -> None:
        if event.value is not Select.NULL and event.value != self.task_name:
            self.task_name, self.task_picked = str(event.value), True
            self.rebuild()

    def action_next_task(self) -> None:
        tasks = list(dict.fromkeys([*analysis.record_tasks(self.gapp.book), self.task_name]))
        self.task_name, self.task_picked = tasks[(tasks.index(self.task_name) + 1) % len(tasks)], True
        self.rebuild()

    @on(Select.Changed, "#ranking-metric")
    def _metric_chosen(self, event: Select.Changed) -> None:
        if event.value is not Select.NULL and event.value != self.metric:
            self.metric = str(event.value)
            self.rebuild()

    def action_dataset(self, step: int) -> None:
        labels = [t.group for t in self.tables]
        if labels:
            index = labels.index(self.dataset) if self.dataset in labels else 0
            self.dataset = labels[(index + step) % len(labels)]
            with self.prevent(Select.Changed):
                self.query_one("#ranking-dataset", Select).value = self.dataset
            self._show()

    @on(Select.Changed, "#ranking-reference")
    def _reference_chosen(self, event: Select.Changed) -> None:
        chosen = None if event.value is Select.NULL else str(event.value)
        if chosen != self.reference:
            self.reference = chosen
            self._show()

    def action_next_reference(self) -> None:
        """Cycle none -> each reference -> none."""
        names: list[str | None] = [None, *reference.reference_names(self.gapp.ws, self.task_name)]
        self.reference = names[(names.index(self.reference) + 1) % len(names)] if self.reference in names else None
        with self.prevent(Select.Changed):
            select = self.query_one("#ranking-reference", Select)
            select.set_options([(name, name) for name in names if name is not None])
            if self.reference is None:
                select.clear()
            else:
                select.value = self.reference
        self._show()

    def action_next_by(self) -> None:
        """Cycle the key the rows are split by as well: none -> each setting and outer axis of the family -> none."""
        keys: list[str | None] = [None, *by_keys(family(self.task_name))]
        self.by = keys[(keys.index(self.by) + 1) % len(keys)] if self.by in keys else None
        self.notify(f"rows split by {self.by}" if self.by else "rows split only where protocols differ", timeout=2)
        self.rebuild()

    def action_next_metric(self) -> None:
        metrics = analysis.known_metrics(self.gapp.book, self.task_name)
        self.metric = metrics[(metrics.index(self.metric) + 1) % len(metrics)] if self.metric in metrics else metrics[0]
        self.rebuild()

    # -------------------------------------------------------------------------------------- export

    def action_export(self) -> None:
        table = self.table
        if table is None:
            self.notify("nothing to export: no finished run yet", severity="warning")
            return
        exports = self.gapp.ws.exports
        question = (
            f"Export the {table.group or table.task} table ({table.metric.key}) to {exports}/ as Markdown, CSV or "
            "LaTeX "
            "(rendered by the same code as `gaptui table`)?"
        )
        choices = [
            Choice("md", "Markdown", "m", "primary"),
            Choice("csv", "CSV", "c", "primary"),
            Choice("latex", "LaTeX", "l", "primary"),
        ]
        self.app.push_screen(
            ChoiceScreen(question, choices, title="Export table"), lambda fmt: self._export(table, fmt)
        )

    def action_figures(self) -> None:
        """Draw the task's figures (those of ``gaptui figures``) into ``<workspace>/exports/figures/``."""
        if self.table is None:
            self.notify("no figures to draw: no finished run yet", severity="warning")
            return
        folder = self.gapp.ws.exports / "figures"
        records, task, metric = table_view(usable_records(self.gapp.book)), self.task_name, self.metric

        def draw() -> None:
            from gaptui.figures import figure_files

            # the workspace's own folder: earlier gaptui versions left figures there without a manifest
            written = figure_files(records, folder, task, "png", metric, force=True)
            self.app.post_message(ManagerNotice(f"wrote {len(written)} {task} figures to {folder}/"))

        self.notify(f"drawing the {task} figures into {folder}/ ...")
        self.gapp.run_task(draw, name=f"figures {task}", group="export")

    def _export(self, table: analysis.RankingTable, fmt: str | None) -> None:
        if fmt not in EXPORTS:
            return
        path = export_path(self.gapp.ws.exports, table.group or table.task, table.metric.key, fmt)
        if not path.exists():
            self._write(table, fmt, path)
            return

        def answer(choice: str | None) -> None:
            if choice == "yes":
                self._write(table, fmt, path)

        self.app.push_screen(confirm(f"{path} exists. Overwrite it?", "Export table"), answer)

    def _write(self, table: analysis.RankingTable, fmt: str, path: Path) -> None:
        render = EXPORTS[fmt][1]

        def write() -> None:
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(path, render([table]))
            self.app.post_message(ManagerNotice(f"wrote {path}"))

        self.gapp.run_task(write, name=f"export {path.name}", group="export")
