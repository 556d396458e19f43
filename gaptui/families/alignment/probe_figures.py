"""Figures of alignment probes (``gaptui probe --figures DIR``): each measure against the layer, one line per run.

One figure per run (``probe-<run id>.<fmt>``) and, for several runs, one figure comparing them
(``probes-compare.<fmt>``); four panels each: the Dirichlet energy relative to noise, the stability of a node's
state under the pair's noise (beside the cosine to a node that is not its counterpart), the share of nodes whose
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
        "stability under the pair's noise\n(solid: to its counterpart, dotted: to another node)",
        "cosine",
        1.0,
        None,
    ),
    ("nearest", "nearest state in G~ is the counterpart", "nodes (%)", 100.0, None),
    ("recon_auc", "edge reconstruction (logistic probe)", "AUC", 1.0, (0.5, "chance")),
)


def run_label(report: dict[str, Any]) -> str:
    return f"{report.get('describe', '?')} ({str(report.get('run', ''))[:12]})"


def draw_probes(reports: Sequence[dict[str, Any]], path: Path) -> Path:
    """The four panels for ``reports`` (one line per run) into ``path``."""
    plt = pyplot()
    fig, axes = plt.subplots(2, 2, figsize=(FULL_WIDTH, 4.8), sharex=True)
    names = max((r.get("layers") or [] for r in reports), key=len)
    ticks = [str(row.get("layer")) for row in names]
    for ax, (key, title, ylabel, scale, line) in zip(axes.flat, PANELS, strict=True):
        for i, report in enumerate(reports):
            rows = report.get("layers") or []
            s = style(i)
            xs = [x for x, row in enumerate(rows) if row.get(key) is not None]
            ax.plot(xs, [rows[x][key] * scale for x in xs], label=run_label(report), **s)
            if key == "stability":
                other = [x for x in xs if rows[x].get("unmatched") is not None]
                ax.plot(other, [rows[x]["unmatched"] for x in other], color=s["color"], linestyle=":", linewidth=0.8)
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
