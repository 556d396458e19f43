"""Figures of alignment probes (``gaptui probe --figures DIR``): each measure against the layer, one line per run.

One figure per run (``probe-<run id>.<fmt>``) and, for several runs, one figure comparing them
(``probes-compare.<fmt>``); four panels each: the Dirichlet energy relative to noise, the stability of a node's
state under the pair's noise (beside, thin, the cosine to a node that is not its counterpart), the share of nodes whose
nearest state in G~ is their counterpart, and the AUC of the edge-reconstruction probe.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from engine.files import OutputFolder
from gaptui.figures import FULL_WIDTH, check_format, pyplot, save_figure, style

#: What ``gaptui probe --figures`` wrote into its folder.
MANIFEST = ".gaptui-probes.json"
#: (report key, panel title, y label, scale, reference line and its label)
PANELS = (
    ("energy_ratio", "Dirichlet energy / noise", "ratio (1 = no smoother than noise)", 1.0, (1.0, "noise")),
    (
        "stability",
        "stability under the pair's noise\n(cosine to its counterpart; thin, x: to another node)",
        "cosine",
        1.0,
        None,
    ),
    ("nearest", "nearest state in G~ is the counterpart", "nodes (%)", 100.0, None),
    ("recon_auc", "edge reconstruction (logistic probe)", "AUC", 1.0, (0.5, "chance")),
)


def run_label(report: dict[str, Any]) -> str:
    return f"{report.get('describe', '?')} ({str(report.get('run', ''))[:12]})"


def layer_axis(reports: Sequence[dict[str, Any]]) -> list[str]:
    """The layers of every report on one axis: ``features``, ``input``, the blocks of the deepest model, ``output``
    (models of different depths line up at their input and their output), then any other name in order."""
    names = [str(row.get("layer")) for report in reports for row in report.get("layers") or []]
    blocks = sorted({n for n in names if n.startswith("block ")}, key=lambda n: int(n.split()[1]))
    ordered = [n for n in ("features", "input") if n in names] + blocks + (["output"] if "output" in names else [])
    return ordered + [n for n in dict.fromkeys(names) if n not in ordered]


def draw_probes(reports: Sequence[dict[str, Any]], path: Path) -> Path:
    """The four panels for ``reports`` (one line per run) into ``path``."""
    plt = pyplot()
    fig, axes = plt.subplots(2, 2, figsize=(FULL_WIDTH, 4.8), sharex=True)
    ticks = layer_axis(reports)
    for ax, (key, title, ylabel, scale, line) in zip(axes.flat, PANELS, strict=True):
        for i, report in enumerate(reports):
            rows = [row for row in report.get("layers") or [] if row.get(key) is not None]
            s = style(i)
            xs = [ticks.index(str(row.get("layer"))) for row in rows]
            ax.plot(xs, [row[key] * scale for row in rows], label=run_label(report), **s)
            if key == "stability":
                kept = [
                    (x, row["unmatched"]) for x, row in zip(xs, rows, strict=True) if row.get("unmatched") is not None
                ]
                thin = {**s, "marker": "x", "linewidth": 0.6, "alpha": 0.6}
                ax.plot([x for x, _ in kept], [y for _, y in kept], **thin)
        if line is not None:
            ax.axhline(line[0], color="#777777", linewidth=0.6, linestyle="--")
            ax.annotate(line[1], (0, line[0]), xytext=(2, 2), textcoords="offset points", fontsize=5, color="#555555")
        ax.set_title(title)
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3, linewidth=0.5)
    for ax in axes[1]:
        ax.set_xticks(range(len(ticks)), ticks, rotation=30, ha="right")
        ax.set_xlabel("layer")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(
        handles,
        labels,
        loc="lower center",
        ncols=min(2, len(labels)),
        frameon=False,
        bbox_to_anchor=(0.5, -0.02 - 0.03 * ((len(labels) + 1) // 2)),
    )
    fig.tight_layout()
    return save_figure(fig, path)


def probe_figures(reports: Sequence[dict[str, Any]], out: Path, fmt: str = "png", force: bool = False) -> list[Path]:
    """Draw one figure per report and, for several, the comparison into the folder ``out`` (all or none; a file of
    the same name that this command did not write is refused unless ``force``)."""
    check_format(fmt)
    names = [f"probe-{str(r.get('run', ''))[:12]}.{fmt}" for r in reports]
    if len(reports) > 1:
        names.append(f"probes-compare.{fmt}")
    with OutputFolder(Path(out), MANIFEST, "gaptui probe", force, replaces=lambda name: False) as dest:
        dest.refuse(names)
        for report, name in zip(reports, names, strict=False):
            draw_probes([report], dest.stage(name))
        if len(reports) > 1:
            draw_probes(reports, dest.stage(names[-1]))
        dest.details = {"runs": [r.get("run") for r in reports]}
    return [Path(out) / name for name in names]
