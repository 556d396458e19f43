"""The brec family's New-experiment form: models (a model entry may add positional inputs), categories, the exact
WL rows, seeds and the RPC options; a filled form is a preset document (:mod:`engine.brec.preset`)."""

from __future__ import annotations

from typing import Any

from engine.brec.data import CATEGORY_KEYS
from engine.brec.wl import WL_ROWS
from engine.tasks.form import FormField, form_table, precision_field, table_values

#: Form key -> ``[run]`` key of the options the form shows (the others go in ``run_more``).
RUN_FIELDS = {
    key: key
    for key in ("pairs", "relabellings", "epochs", "batch_size", "lr", "statistic", "precision", "timeout", "retries")
}
#: The zoo's entries with positional inputs offered beside the models (others can be typed).
POSITIONAL_ENTRIES = ("graphgps+rwpe:16", "graphgps+lap:8")


def _models() -> list[str]:
    from engine.models import names

    return [*names(), *POSITIONAL_ENTRIES]


def fields() -> tuple[FormField, ...]:
    from engine.brec.rpc import STATISTICS

    models = ["gcn", "gin", "graphgps+rwpe:16"]
    return (
        FormField(
            "models",
            "models",
            "multi",
            models,
            "model, or model+rwpe:K",
            choices_from=_models,
            free=True,
            section="Models",
        ),  # fmt: skip
        FormField("wl", "exact rows", "multi", list(WL_ROWS), choices=WL_ROWS, section="Exact rows"),
        FormField("categories", "categories", "multi", list(CATEGORY_KEYS), choices=CATEGORY_KEYS, section="Pairs"),
        FormField(
            "pairs", "pairs each", "int", None, "the first N pairs of each category", placeholder="all", section="Pairs"
        ),  # fmt: skip
        FormField(
            "relabellings", "relabellings", "int", None, "q copies of each graph", placeholder="32", section="RPC"
        ),  # fmt: skip
        FormField(
            "epochs", "epochs/pair", "int", None, "passes over a pair's copies", placeholder="20", section="RPC"
        ),  # fmt: skip
        FormField("batch_size", "batch graphs", "int", None, placeholder="16", section="RPC"),
        FormField("lr", "learning rate", "number", None, placeholder="1e-4", section="RPC"),
        FormField(
            "statistic",
            "T² statistic",
            "choice",
            None,
            "reference: BREC's code; hotelling: q x it",
            choices=STATISTICS,
            placeholder="reference",
            section="RPC",
        ),  # fmt: skip
        FormField("seeds", "seeds", "seeds", [0, 1, 2], placeholder="0-9 or 0,3", section="Runs"),
        precision_field("Runs"),
        FormField("timeout", "timeout (s)", "number", None, placeholder="none", section="Runs"),
        FormField("retries", "retries", "int", None, placeholder="0 (on failure)", section="Runs"),
        FormField(
            "run_more", "more [run] options", "params", {}, "out_dim=16 budget=60000 alpha=0.05 ...", section="Runs"
        ),  # fmt: skip
    )


def preset_from_form(values: dict[str, Any]) -> dict[str, Any]:
    doc: dict[str, Any] = {key: list(values.get(key) or []) for key in ("models", "categories", "wl", "seeds")}
    run = form_table(values, RUN_FIELDS, "run_more")
    if run:
        doc["run"] = run
    return doc


def form_values(raw: dict[str, Any]) -> dict[str, Any]:
    return {
        "models": list(raw.get("models") or []),
        "categories": list(raw.get("categories", CATEGORY_KEYS)),
        "wl": list(raw.get("wl", WL_ROWS)),
        "seeds": list(raw.get("seeds") or []),
    } | table_values(raw.get("run"), RUN_FIELDS, "run_more")
