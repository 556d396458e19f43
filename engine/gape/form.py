"""The gape family's New-experiment form: molecule datasets (each with its pretraining run and downstream options),
positional encodings, seeds and run options; a filled form is a preset document (see
:class:`engine.gape.preset.GapePreset`)."""

from __future__ import annotations

from typing import Any

from engine.tasks.form import FormField, drop_blank, form_table, precision_field, table_values

#: Row order of Table 1 (the PEs a preset may list).
PES = ("none", "lap", "abs-lap", "r-lap", "rwpe", "gape", "gape+rwpe")
#: Parameters of the ``molecules`` source (your own file) shown as their own fields of a dataset row.
MOLECULE_FIELDS = ("path", "smiles", "target")
#: Form key -> ``[datasets.pretrain]`` key of the pretraining options the form shows (others: ``pretrain_more``).
PRETRAIN_FIELDS = {"pretrain_model": "model", "pretrain_noise": "noise", "pretrain_epochs": "epochs"}


def _molecule_sources() -> list[str]:
    from engine.sources import SOURCES
    from engine.sources.base import MoleculeSource

    return [name for name in SOURCES.names() if issubclass(SOURCES.get(name), MoleculeSource)]


def _models() -> list[str]:
    from engine.models import names

    return names()


def fields() -> tuple[FormField, ...]:
    from engine.gape.preset import Pretraining

    pre = Pretraining()
    dataset = (
        FormField("base", "molecules", "choice", "ringmol", "molecule dataset", choices_from=_molecule_sources),
        FormField("params", "parameters", "params", {}, "source parameters, key=value"),
        FormField("path", "path", "path", "", "molecules: your .csv or .sdf file", placeholder="molecules: file"),
        FormField("smiles", "smiles", "text", "", "molecules: the SMILES column", placeholder="smiles"),
        FormField("target", "target", "text", "", "molecules: the target column or property", placeholder="target"),
        FormField("seed", "seed", "int", None, "dataset seed", placeholder="0"),
        FormField("pretrain_model", "pretrain model", "choice", None, "pretraining model", choices_from=_models),
        FormField("pretrain_noise", "pretrain η", "number", None, placeholder=f"{pre.noise:g}"),
        FormField("pretrain_epochs", "pretrain epochs", "int", None, placeholder=str(pre.epochs)),
        FormField("pretrain_more", "more pretraining", "params", {}, "out_dim=32 budget=60000 ..."),
        FormField("run", "downstream options", "params", {}, "layers=12 heads=8 steps=10000 lr=5e-4 ..."),
    )
    return (
        FormField(
            "datasets",
            "molecule datasets",
            "rows",
            [{"base": "ringmol", "params": {"count": 300}}],
            section="Molecule datasets · pretraining run · downstream options",
            fields=dataset,
        ),
        FormField("pes", "positional encodings", "multi", list(PES), choices=PES, section="Positional encodings"),
        FormField("seeds", "seeds", "seeds", [0], placeholder="0-3 or 0,3", section="Runs"),
        precision_field("Runs"),
        FormField("timeout", "timeout (s)", "number", None, placeholder="none", section="Runs"),
        FormField("retries", "retries", "int", None, placeholder="0 (on failure)", section="Runs"),
    )


def preset_from_form(values: dict[str, Any]) -> dict[str, Any]:
    doc: dict[str, Any] = {"pes": list(values.get("pes") or []), "seeds": list(values.get("seeds") or [])}
    policy = drop_blank({k: values.get(k) for k in ("precision", "timeout", "retries")})
    if policy:
        doc["run"] = policy  # the [run] table of every family's preset (engine.tasks.presets): precision and policy
    datasets = []
    for row in values.get("datasets") or []:
        params = {**(row.get("params") or {}), **drop_blank({k: row.get(k) for k in MOLECULE_FIELDS})}
        entry: dict[str, Any] = {"base": row.get("base")}
        if params:
            entry["params"] = params
        entry |= drop_blank({"seed": row.get("seed")})
        pretrain = form_table(row, PRETRAIN_FIELDS, "pretrain_more")
        if pretrain:
            entry["pretrain"] = pretrain
        if row.get("run"):
            entry["run"] = dict(row["run"])
        datasets.append(entry)
    doc["datasets"] = datasets
    return doc


def form_values(raw: dict[str, Any]) -> dict[str, Any]:
    rows = []
    for entry in raw.get("datasets") or []:
        if not isinstance(entry, dict):
            continue
        params = dict(entry.get("params") or {})
        row: dict[str, Any] = {"base": entry.get("base"), "seed": entry.get("seed")}
        if entry.get("base") == "molecules":
            row |= {k: params.pop(k, "") for k in MOLECULE_FIELDS}
        row["params"] = params
        row |= table_values(entry.get("pretrain"), PRETRAIN_FIELDS, "pretrain_more")
        row["run"] = dict(entry.get("run") or {})
        rows.append(row)
    return {
        "pes": list(raw.get("pes") or []),
        "seeds": list(raw.get("seeds") or []),
        "precision": (raw.get("run") or {}).get("precision"),
        # [run] (the schema every family shares) or the top level (older gape presets)
        "timeout": (raw.get("run") or {}).get("timeout", raw.get("timeout")),
        "retries": (raw.get("run") or {}).get("retries", raw.get("retries")),
        "datasets": rows,
    }
