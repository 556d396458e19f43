"""The properties family's New-experiment form: properties, poolings (or ``module:Name`` import paths),
dimensions, seeds and run options; a filled form is a preset document (see :class:`engine.properties.preset.Preset`)."""

from __future__ import annotations

from typing import Any

from engine.tasks.form import FormField, form_table, precision_field, table_values

#: Form key -> ``[run]`` key of the run options the form shows (the others go in ``run_more``).
RUN_FIELDS = {
    "epochs": "epochs",
    "batch_size": "batch_size",
    "graphs": "graphs",
    "sizes": "sizes",
    "hidden": "hidden",
    "precision": "precision",
    "timeout": "timeout",
    "retries": "retries",
}


def fields() -> tuple[FormField, ...]:
    from engine.properties.definitions import PROPERTY_NAMES
    from engine.properties.preset import StudyOptions
    from engine.properties.scores import DIMENSIONS, POOLING_LABELS
    from engine.properties.strategies import STRATEGIES

    run = StudyOptions()
    section = "Runs"
    return (
        FormField(
            "properties", "properties", "multi", list(PROPERTY_NAMES), choices=PROPERTY_NAMES, section="Properties"
        ),
        FormField(
            "poolings",
            "poolings",
            "multi",
            ["mean"],
            "more: module.path:Name",
            choices=tuple(POOLING_LABELS),
            label_of=lambda name: f"{name} ({POOLING_LABELS[name]})" if name in POOLING_LABELS else str(name),
            free=True,
            section="Poolings",
        ),
        FormField(
            "dimensions", "dimensions", "multi", list(DIMENSIONS), choices=tuple(DIMENSIONS), section="Dimensions"
        ),
        FormField(
            "strategies",
            "strategies",
            "multi",
            ["standard"],
            "training strategies (docs/properties.md)",
            choices=STRATEGIES,
            section="Strategies",
        ),  # fmt: skip
        FormField("seeds", "seeds", "seeds", [0], placeholder="0-4 or 0,3", section=section),
        FormField("epochs", "epochs", "int", None, placeholder=str(run.epochs), section=section),
        FormField("batch_size", "batch size", "int", None, placeholder=str(run.batch_size), section=section),
        FormField("graphs", "graphs", "int", None, "graphs per dataset", placeholder=str(run.graphs), section=section),
        FormField("sizes", "sizes", "int", None, "first K sizes of a property", placeholder="all 11", section=section),
        FormField("hidden", "hidden", "int", None, placeholder=str(run.hidden), section=section),
        precision_field(section),
        FormField("timeout", "timeout (s)", "number", None, placeholder="none", section=section),
        FormField("retries", "retries", "int", None, placeholder="0 (on failure)", section=section),
        FormField(
            "run_more", "more [run] options", "params", {}, "lr=0.001 layers=5 published=DIR ...", section=section
        ),
    )


def preset_from_form(values: dict[str, Any]) -> dict[str, Any]:
    doc: dict[str, Any] = {
        key: list(values.get(key) or []) for key in ("properties", "poolings", "dimensions", "seeds")
    }
    strategies = list(values.get("strategies") or ["standard"])
    if strategies != ["standard"]:  # the default stays out of the file, as before strategies
        doc["strategies"] = strategies
    run = form_table(values, RUN_FIELDS, "run_more")
    if run:
        doc["run"] = run
    return doc


def form_values(raw: dict[str, Any]) -> dict[str, Any]:
    from engine.properties.scores import DIMENSIONS

    values: dict[str, Any] = {key: list(raw.get(key) or []) for key in ("properties", "poolings", "seeds")}
    values["dimensions"] = list(raw.get("dimensions") or DIMENSIONS)
    values["strategies"] = list(raw.get("strategies") or ["standard"])
    return values | table_values(raw.get("run"), RUN_FIELDS, "run_more")
