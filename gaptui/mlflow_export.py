"""``gaptui export --mlflow URI``: every finished run logged to an MLflow tracking store, once.

One MLflow experiment per task family (``gaptui-<task>``); per run: params = its spec (nested keys joined by
``.``), metrics per epoch from ``events.jsonl`` (step = epoch) plus the final metrics of its record, tags = its axes
(``axis.<key>``) with ``gaptui.run``, ``gaptui.hash``, ``gaptui.task`` and ``gaptui.seed``, and ``result.json`` as
an artefact. A run whose hash is already logged in its experiment is skipped, so exporting a grown history again
logs only what is new. Works offline with a local ``file:`` store (``pip install 'gaptui[mlflow]'``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.errors import GaptuiError
from engine.events import iter_events
from gaptui import analysis

#: MLflow's limits: a param value's length and entries per ``log_batch`` call.
MAX_PARAM = 500
BATCH = 900


@dataclass(frozen=True)
class MlflowSummary:
    """What an export did: runs logged, runs already there (skipped), and the store."""

    uri: str
    logged: list[str]
    skipped: list[str]


def _flatten(value: Any, prefix: str = "") -> Iterator[tuple[str, str]]:
    if isinstance(value, dict):
        for key in sorted(value):
            yield from _flatten(value[key], f"{prefix}.{key}" if prefix else str(key))
    else:
        text = "" if value is None else str(value)
        yield prefix, text[:MAX_PARAM]


def epoch_metrics(run_dir: Path) -> list[tuple[str, float, int, int]]:
    """``(key, value, timestamp ms, epoch)`` for every numeric field of the ``epoch`` and ``eval`` events."""
    out = []
    for event in iter_events(Path(run_dir) / "events.jsonl"):
        epoch = event.get("epoch")
        if event.get("event") not in ("epoch", "eval") or not isinstance(epoch, int):
            continue
        stamp = int(1000 * float(event.get("t") or 0))
        for key, value in event.items():
            if key in ("v", "t", "epoch", "step", "event", "run") or (number := analysis.numeric_value(value)) is None:
                continue
            out.append((key, number, stamp, epoch))
    return out


def _client(uri: str) -> Any:
    try:
        from mlflow.tracking import MlflowClient
    except ImportError:
        raise GaptuiError("--mlflow needs MLflow: pip install 'gaptui[mlflow]'") from None
    if uri.startswith("file:") or "://" not in uri and not uri.startswith(("sqlite:", "http", "databricks")):
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")  # a local folder, as the user asked
    return MlflowClient(tracking_uri=uri)


def export_mlflow(records: Sequence[dict[str, Any]], uri: str, task: str | None = None) -> MlflowSummary:
    """Log every finished run of ``records`` (of ``task`` only, when given) to the tracking store at ``uri``."""
    from mlflow.entities import Metric, Param, RunTag
    from mlflow.exceptions import MlflowException

    client = _client(uri)
    logged, skipped = [], []
    done = [r for r in records if r.get("status") == "done" and (task is None or analysis.record_task(r) == task)]
    experiments: dict[str, str] = {}
    try:
        for record in done:
            name = f"gaptui-{analysis.record_task(record)}"
            if name not in experiments:
                found = client.get_experiment_by_name(name)
                experiments[name] = found.experiment_id if found else client.create_experiment(name)
            experiment = experiments[name]
            run_hash = str(record.get("hash"))
            earlier = client.search_runs([experiment], filter_string=f"tags.`gaptui.hash` = '{run_hash}'")
            if any(r.data.tags.get("gaptui.status") == "done" for r in earlier):
                skipped.append(str(record.get("id")))
                continue
            for broken in earlier:  # an export stopped half-way: logged again whole
                client.delete_run(broken.info.run_id)
            tags = {
                "gaptui.run": str(record.get("id")),
                "gaptui.hash": run_hash,
                "gaptui.task": analysis.record_task(record),
                "gaptui.seed": str(record.get("seed")),
                **{f"axis.{k}": str(v) for k, v in (record.get("axes") or {}).items()},
            }
            run = client.create_run(experiment, tags=tags, run_name=str(record.get("id")))
            run_id = run.info.run_id
            run_dir = Path(record["run_dir"]) if record.get("run_dir") else None
            params = [Param(k, v) for k, v in _flatten(record.get("spec") or {})]
            metrics = [Metric(k, v, s, e) for k, v, s, e in (epoch_metrics(run_dir) if run_dir else [])]
            last = max((m.step for m in metrics), default=0)
            finals = ((k, analysis.numeric_value(v)) for k, v in (record.get("metrics") or {}).items())
            metrics += [Metric(f"final.{k}", v, 0, last) for k, v in finals if v is not None]
            for start in range(0, max(len(params), len(metrics), 1), BATCH):
                client.log_batch(
                    run_id, metrics=metrics[start : start + BATCH], params=params[start : start + BATCH], tags=[]
                )
            client.log_batch(run_id, tags=[RunTag("gaptui.status", "done")])
            if run_dir is not None and (run_dir / "result.json").is_file():
                client.log_artifact(run_id, str(run_dir / "result.json"))
            client.set_terminated(run_id)
            logged.append(str(record.get("id")))
    except MlflowException as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise GaptuiError(f"--mlflow {uri}: {first}") from None
    return MlflowSummary(uri, logged, skipped)
