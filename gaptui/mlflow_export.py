"""``gaptui export --mlflow URI``: every finished run logged to an MLflow tracking store, once.

One MLflow experiment per task family (``gaptui-<task>``); per run: params = its spec (nested keys joined by
``.``), metrics per epoch from ``events.jsonl`` (step = epoch) plus the final metrics of its record, tags = its axes
(``axis.<key>``) with ``gaptui.run``, ``gaptui.hash``, ``gaptui.task`` and ``gaptui.seed``, and ``result.json`` as
an artefact. Works offline with a local ``file:`` store (``pip install 'gaptui[mlflow]'``).

Exactly once, whatever the moment of a kill: a run is logged whole (params, metrics, artefact, then FINISHED) and
only then tagged ``gaptui.status=done``, the last write. An MLflow run of a hash counts as exported only when it is
complete (the done tag, FINISHED, and ``result.json`` when the gaptui run has one); anything else found for that
hash (an export killed half-way) is deleted and the run logged again whole. So exporting a grown history again
logs only what is new, and an interrupted export is finished by the next one.

A bad URI is one :class:`GaptuiError` (an ``error:`` line): empty, an unknown scheme, a database scheme whose driver
is not installed, a ``file:`` path that is a file or cannot be written, or an HTTP server that does not answer
within a few seconds (MLflow's own retries would wait minutes: they are bounded for the export, unless the user set
MLflow's ``MLFLOW_HTTP_REQUEST_*`` variables).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.errors import GaptuiError
from engine.typed import ascii_count
from gaptui import analysis
from gaptui.record import flatten
from gaptui.tracking import epoch_metrics, finished_records

#: MLflow's limits: a param value's length and entries per ``log_batch`` call.
MAX_PARAM = 500
BATCH = 900

#: The tag written last: a run of the store carrying it (and FINISHED, with its artefact) is complete.
DONE_TAG = "gaptui.status"
ARTEFACT = "result.json"

#: MLflow's HTTP retry settings while the first request checks that the server answers: a server that accepts
#: connections but never answers is given up after ``(1 + retries) * timeout`` = 6 s, a refused connection at once
#: (MLflow's defaults, 7 retries with backoff and 120 s timeouts, would wait many minutes).
PREFLIGHT_HTTP = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "0",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "3",
}
#: ... and for the rest of the export, the server having answered: a few retries, bounded to about a minute.
EXPORT_HTTP = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "15",
}
#: Tracking stores backed by SQLAlchemy (full ``mlflow`` plus the database's driver, not ``mlflow-skinny``).
DATABASE_SCHEMES = ("postgresql", "mysql", "sqlite", "mssql")


@dataclass(frozen=True)
class MlflowSummary:
    """What an export did: runs logged, runs already there (skipped), records it could not read, and the store."""

    uri: str
    logged: list[str]
    skipped: list[str]
    unreadable: list[str] = field(default_factory=list)


def _flatten(value: Any) -> Iterator[tuple[str, str]]:
    for key, leaf in flatten(value).items():
        text = "" if leaf is None else str(leaf)
        yield key, text[:MAX_PARAM]


@contextmanager
def _environ(values: Mapping[str, str]) -> Iterator[None]:
    """``values`` in the environment for the duration, each only where the user has not set it already."""
    added = [key for key in values if key not in os.environ]
    for key in added:
        os.environ[key] = values[key]
    try:
        yield
    finally:
        for key in added:
            os.environ.pop(key, None)


def _scheme(uri: str) -> str:
    from mlflow.utils.uri import get_uri_scheme

    return get_uri_scheme(uri)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0].strip()[:300] if text else type(exc).__name__


def _check_local_store(uri: str) -> None:
    """A ``file:`` store: a folder, or a path that can be made one (MLflow makes it), else a GaptuiError."""
    from mlflow.utils.file_utils import local_file_uri_to_path

    text = local_file_uri_to_path(uri)
    if not text:
        raise GaptuiError(f"--mlflow {uri}: give the store's folder, e.g. file:./mlruns")
    path = Path(text).absolute()
    existing = next(p for p in (path, *path.parents) if p.exists() or p == p.parent)
    if not existing.is_dir():
        raise GaptuiError(f"--mlflow {uri}: {existing} is a file, not a folder; give a folder for the tracking store")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise GaptuiError(f"--mlflow {uri}: {existing} is not writable")


def _client(uri: str) -> Any:
    """The MLflow client of ``uri``, or a one-line GaptuiError saying why there is none."""
    try:
        from mlflow.exceptions import MlflowException
        from mlflow.tracking import MlflowClient
        from mlflow.tracking.registry import UnsupportedModelRegistryStoreURIException
    except ImportError:
        raise GaptuiError("--mlflow needs MLflow: pip install 'gaptui[mlflow]'") from None
    scheme = _scheme(uri)
    if scheme in ("", "file"):
        _check_local_store(uri)
    try:
        return MlflowClient(tracking_uri=uri)
    except UnsupportedModelRegistryStoreURIException as exc:
        if scheme in DATABASE_SCHEMES:
            raise GaptuiError(
                f"--mlflow {uri}: a {scheme} tracking store needs the full MLflow with SQLAlchemy and the database's "
                "driver (pip install mlflow and the driver), or use a file:PATH store or an http:// server"
            ) from None
        known = ", ".join(s for s in getattr(exc, "supported_uri_schemes", ()) if s) or "file, http, https"
        raise GaptuiError(
            f"--mlflow {uri}: unknown tracking URI scheme '{scheme}'; this MLflow knows {known}, and a folder path"
        ) from None
    except ImportError as exc:  # a database URI whose driver (psycopg2, pymysql, pyodbc...) is missing
        missing = f" ({exc.name} is not installed)" if exc.name else ""
        raise GaptuiError(
            f"--mlflow {uri}: the driver of the {scheme} tracking store is missing{missing}; pip install it"
        ) from None
    except OSError as exc:
        raise GaptuiError(f"--mlflow {uri}: {exc.strerror or exc}: {exc.filename or uri}") from None
    except MlflowException as exc:
        raise GaptuiError(f"--mlflow {uri}: {_first_line(exc)}") from None


def _unanswered(uri: str, exc: BaseException) -> GaptuiError:
    """The error of a tracking server that did not answer the first request."""
    text = str(exc).lower()
    if "refused" in text:
        return GaptuiError(f"--mlflow {uri}: no tracking server answers there (connection refused); is it running?")
    if "timed out" in text or "timeout" in text:
        retries = os.environ.get("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "")
        count = ascii_count(retries)
        tries = "tries" if count is None else f"{1 + count} tries"
        wait = os.environ.get("MLFLOW_HTTP_REQUEST_TIMEOUT", "?")
        return GaptuiError(
            f"--mlflow {uri}: the tracking server did not answer ({tries} of {wait} s); is it the right address? "
            "(set MLFLOW_HTTP_REQUEST_TIMEOUT to wait longer)"
        )
    if "resolve" in text or "name or service not known" in text or "nodename nor servname" in text:
        return GaptuiError(f"--mlflow {uri}: unknown host")
    return GaptuiError(f"--mlflow {uri}: {_first_line(exc)}")


def _connect(uri: str) -> Any:
    """A client of ``uri`` that has answered one request (an HTTP server within a few seconds)."""
    if not uri.strip():
        raise GaptuiError("--mlflow needs a tracking URI, e.g. file:./mlruns or http://localhost:5000")
    with _environ(PREFLIGHT_HTTP):
        client = _client(uri)
        from mlflow.exceptions import MlflowException

        try:
            client.search_experiments(max_results=1)
        except MlflowException as exc:
            raise _unanswered(uri, exc) from None
        except OSError as exc:
            raise GaptuiError(f"--mlflow {uri}: {exc.strerror or exc}: {exc.filename or uri}") from None
    return client


def _complete(client: Any, run: Any, artefact: bool) -> bool:
    """Whether ``run`` of the store is a whole export: done tag, FINISHED, and ``result.json`` when there is one."""
    if run.data.tags.get(DONE_TAG) != "done" or run.info.status != "FINISHED":
        return False
    return not artefact or any(a.path == ARTEFACT for a in client.list_artifacts(run.info.run_id))


def export_mlflow(records: Sequence[dict[str, Any]], uri: str, task: str | None = None) -> MlflowSummary:
    """Log every finished run of ``records`` (of ``task`` only, when given) to the tracking store at ``uri``."""
    done, unreadable = finished_records(records, task)
    logged, skipped = [], []
    with _environ({"MLFLOW_ALLOW_FILE_STORE": "true"}):  # a local folder, as the user asked
        client = _connect(uri)
        from mlflow.exceptions import MlflowException

        experiments: dict[str, str] = {}
        try:
            with _environ(EXPORT_HTTP):
                for record in done:
                    name = f"gaptui-{analysis.record_task(record)}"
                    if name not in experiments:
                        found = client.get_experiment_by_name(name)
                        experiments[name] = found.experiment_id if found else client.create_experiment(name)
                    fresh = _export_run(client, experiments[name], record)
                    (logged if fresh else skipped).append(str(record.get("id")))
        except MlflowException as exc:
            raise GaptuiError(f"--mlflow {uri}: {_first_line(exc)}") from None
    return MlflowSummary(uri, logged, skipped, unreadable)


def _export_run(client: Any, experiment: str, record: Mapping[str, Any]) -> bool:
    """Log ``record`` whole to ``experiment`` unless a complete run of its hash is there (False: skipped)."""
    from mlflow.entities import Metric, Param

    run_hash = record["hash"]
    run_dir = Path(record["run_dir"]) if record.get("run_dir") else None
    artefact = run_dir / ARTEFACT if run_dir is not None and (run_dir / ARTEFACT).is_file() else None
    earlier = client.search_runs([experiment], filter_string=f"tags.`gaptui.hash` = '{run_hash}'")
    earlier = sorted(earlier, key=lambda r: r.info.start_time or 0)  # the first whole export is the one kept
    keep = next((r for r in earlier if _complete(client, r, artefact is not None)), None)
    for other in earlier:  # an export stopped half-way (or a duplicate): deleted, and the run logged again whole
        if other is not keep:
            client.delete_run(other.info.run_id)
    if keep is not None:
        return False
    tags = {
        "gaptui.run": str(record.get("id")),
        "gaptui.hash": run_hash,
        "gaptui.task": analysis.record_task(record),
        "gaptui.seed": str(record.get("seed")),
        **{f"axis.{k}": str(v) for k, v in (record.get("axes") or {}).items()},
    }
    run_id = client.create_run(experiment, tags=tags, run_name=str(record.get("id"))).info.run_id
    params = [Param(k, v) for k, v in _flatten(record.get("spec") or {})]
    metrics = [Metric(k, v, s, e) for k, v, s, e in (epoch_metrics(run_dir) if run_dir else [])]
    last = max((m.step for m in metrics), default=0)
    finals = ((k, analysis.numeric_value(v)) for k, v in (record.get("metrics") or {}).items())
    metrics += [Metric(f"final.{k}", v, 0, last) for k, v in finals if v is not None]
    for start in range(0, max(len(params), len(metrics)), BATCH):
        client.log_batch(run_id, metrics=metrics[start : start + BATCH], params=params[start : start + BATCH], tags=[])
    if artefact is not None:
        client.log_artifact(run_id, str(artefact))
    client.set_terminated(run_id, "FINISHED")
    client.set_tag(run_id, DONE_TAG, "done")  # last: only now is the run complete
    return True
