"""``gaptui report``: the whole study in one Markdown file and the same as self-contained HTML.

Per task family present in the history: its ranking tables with their marks (``†`` = not significantly different
from the best), the statistics of :mod:`gaptui.analysis.statistics`, every figure the family declares
(:mod:`gaptui.figures`, under ``figures/`` with relative links), the comparison with the family's reference table
where it declares one, and the reproducibility record (gaptui's version and git commit, the package versions,
devices, presets and seeds the runs came from, and the run ids).

The folder is the report's own: ``.gaptui-report.json`` lists what the report wrote, so running it again on a grown
history replaces those files, removes figures that no longer exist, and refuses to replace any other file of the
same name unless ``force``. Everything is written through :class:`engine.files.OutputFolder`: staged in a hidden
folder first, so a refusal or a full disk leaves the folder as it was, and moved in under a manifest that already
claims the files, so a kill at any moment leaves a folder the rerun completes without ``--force``.
"""

from __future__ import annotations

import base64
import re
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from engine.errors import GaptuiError
from engine.files import OutputFolder
from engine.tasks import family
from gaptui import analysis, figures
from gaptui.analysis import statistics

MANIFEST = ".gaptui-report.json"
FIGURES = "figures"
#: The staging folders of reports before :class:`engine.files.OutputFolder` (``tempfile.mkdtemp`` names), which a
#: killed report could leave behind; removed where a report's manifest shows the folder is a report's.
LEGACY_STAGING = (".report-????????",)


def _demote(markdown_text: str) -> str:
    """Headings one level down, so a renderer's sections nest under the report's."""
    return re.sub(r"(?m)^(#+) ", r"#\1 ", markdown_text)


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    from engine.provenance import code_version

    out = {"gaptui": code_version()}
    for name in ("torch", "torch_geometric", "numpy", "scipy", "matplotlib"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            continue
    return out


def _generator() -> list[str]:
    versions = _versions()
    code = versions.pop("gaptui")
    packages = ", ".join(f"{k} {v}" for k, v in versions.items())
    return [f"- gaptui code of this report: {code}", f"- packages of this report: {packages}"]


def _repro_section(records: Sequence[dict[str, Any]]) -> list[str]:
    """Where the runs came from: presets, seeds, devices, packages and projects, counted over the runs."""
    done = [r for r in records if r.get("status") == "done"]
    presets = Counter(str(r.get("preset") or "(single run)") for r in done)
    seeds = sorted({r.get("seed") for r in done}, key=str)
    devices: Counter[str] = Counter()
    packages: dict[str, Counter[str]] = defaultdict(Counter)
    projects: Counter[str] = Counter()
    for r in done:
        repro = r.get("repro") or {}
        devices[str(repro.get("device_name") or repro.get("device") or "unknown")] += 1
        for name, value in (repro.get("versions") or {}).items():
            packages[name][str(value)] += 1
        project = repro.get("project") or {}
        if project.get("commit"):
            projects[project["commit"][:12] + (" (dirty)" if project.get("dirty") else "")] += 1

    def counted(c: Counter[str]) -> str:
        return ", ".join(f"{k} ({n})" for k, n in sorted(c.items())) or "not recorded"

    # Runs recorded before gaptui named its code carry the release alone: said so, not taken for one version.
    code = Counter(
        {v if "(" in v else f"{v} (code not recorded)": n for v, n in packages.pop("gaptui", Counter()).items()}
    )
    lines = [
        f"- finished runs: {len(done)} of {len(records)} recorded",
        f"- gaptui code (runs): {counted(code)}",
        f"- presets (runs): {counted(presets)}",
        f"- seeds: {', '.join(map(str, seeds)) or 'none'}",
        f"- devices (runs): {counted(devices)}",
        f"- project commits (runs): {counted(projects)}",
    ]
    lines += [f"- {name} (runs): {counted(values)}" for name, values in sorted(packages.items())]
    ids = ", ".join(sorted(str(r.get("id")) for r in done))
    lines += ["", "<details><summary>run ids</summary>", "", ids or "none", "", "</details>"]
    return lines


def _reference_section(task: str, tables: list[analysis.RankingTable], ws: Any) -> list[str]:
    refs = family(task).references
    name = refs.default if refs is not None else ""
    if not name:
        return []
    from gaptui.analysis import reference as ref

    chosen = ref.load_reference(name, ws, task)
    try:
        ref.check_metric(chosen, tables[0].metric if tables else None)
    except GaptuiError as exc:
        return [f"Reference `{name}`: not compared ({exc})."]
    comparisons = [c for t in tables if (c := ref.compare(t, chosen)) is not None]
    if not comparisons:
        covered = chosen.table or ", ".join(g for g in chosen.groups if g) or f"the {task} table"
        return [f"Reference `{name}` covers none of these tables ({covered})."]
    return [f"Compared with reference `{name}`:", "", _demote(ref.render_markdown(comparisons)).rstrip()]


def family_section(
    task: str,
    records: Sequence[dict[str, Any]],
    staging: Path,
    ws: Any = None,
    fmt: str = "png",
    tuned: bool = False,
) -> list[str]:
    """The Markdown lines of one family's part of the report; its figures are drawn into ``staging``. Tables,
    statistics and figures leave out the runs of ``gaptui tune`` trials (its final runs shown with ``tuned``); a
    "Tuning" part summarises the family's studies."""
    from gaptui.tune.report import report_lines
    from gaptui.tune.results import table_view

    fam = family(task)
    tuning_lines = report_lines(records, task, ws, staging, fmt)
    records = table_view(records, tuned)
    mine = analysis.task_records(records, task)
    tables = analysis.build_tables(mine, task=task)
    out = [f"# {task}: {fam.title}", ""]
    if not tables:
        return [*out, "No finished runs report the family's metric yet.", "", *tuning_lines]
    out += ["## Ranking tables", "", _demote(analysis.render_markdown(tables)).rstrip(), ""]
    plain = [t for t in tables if not t.derived]
    if plain:
        result = statistics.table_statistics(tables)
        out += ["## Statistics", "", *analysis.protocol_lines(plain), statistics.render_markdown(result).rstrip(), ""]
    drawn = figures.draw_figures(mine, staging, task, fmt)
    if drawn:
        out += ["## Figures", "", *analysis.protocol_lines(plain)]
        out += [f"![{p.stem}]({FIGURES}/{p.name})" + "\n" for p in drawn]
    if ref := _reference_section(task, tables, ws):
        out += ["## Reference", "", *ref, ""]
    if fam.report:  # the family's own parts (its module is imported here only)
        import importlib

        out += importlib.import_module(fam.report).report_sections(mine, records)
    out += tuning_lines
    out += ["## Reproducibility", "", *_repro_section(mine), ""]
    return out


def render_html(markdown_text: str, folder: Path) -> str:
    """The report as one HTML file: Markdown converted, every figure embedded as a data URI."""
    try:
        import markdown
    except ImportError:
        raise GaptuiError("the HTML report needs markdown: pip install 'gaptui[figures]'") from None
    body = markdown.markdown(markdown_text, extensions=["tables", "fenced_code", "md_in_html"])
    kinds = {".png": "image/png", ".svg": "image/svg+xml", ".pdf": "application/pdf"}

    def inline(match: re.Match[str]) -> str:
        path = folder / match.group(1)
        data = base64.b64encode(path.read_bytes()).decode()
        return f'src="data:{kinds.get(path.suffix, "application/octet-stream")};base64,{data}"'

    body = re.sub(r'src="(' + FIGURES + r'/[^"]+)"', inline, body)
    style = (
        "body{font-family:sans-serif;max-width:60em;margin:2em auto;padding:0 1em;line-height:1.4}"
        "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:.2em .5em;text-align:right}"
        "img{max-width:100%}code{background:#f4f4f4}"
    )
    return f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>gaptui report</title><style>{style}</style>' \
        f"</head><body>\n{body}\n</body></html>\n"  # fmt: skip


def write_report(
    records: Sequence[dict[str, Any]], out: Path, ws: Any = None, force: bool = False, tuned: bool = False
) -> list[Path]:
    """Write ``report.md``, ``report.html`` and ``figures/`` into ``out`` (see the module docstring)."""
    out = Path(out)
    tasks = [
        t
        for t in analysis.record_tasks(records)
        if any(r.get("status") == "done" for r in analysis.task_records(records, t))
    ]
    with OutputFolder(out, MANIFEST, "gaptui report", force, leftovers=LEGACY_STAGING) as dest:
        drawn = dest.stage_folder(FIGURES)
        lines = ["# gaptui report", "", *_generator(), ""]
        for task in tasks:
            lines += family_section(task, records, drawn, ws, tuned=tuned)
        if not tasks:
            lines += ["The history holds no finished runs yet.", ""]
        markdown_text = "\n".join(lines).rstrip() + "\n"
        dest.stage("report.md").write_text(markdown_text, encoding="utf-8")
        html = render_html(markdown_text, drawn.parent)
        dest.stage("report.html").write_text(html, encoding="utf-8")
    return [out / n for n in dest.names]
