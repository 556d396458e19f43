"""``gaptui export --wandb PROJECT``: every finished run logged to Weights & Biases, once.

Per run: config = its spec (nested as it is) plus ``gaptui`` = {run, hash, task, seed}; history = the numeric
fields of its ``epoch`` and ``eval`` events, one row per epoch (step = epoch); summary = the final metrics of its
record; tags = its axes as ``key=value``; group = its table cell (every axis, the seed left out), so W&B's grouped
view averages the seeds of one cell; name = the gaptui run id.

With no API key (no ``WANDB_API_KEY``, no ``wandb login`` entry in ``~/.netrc``) or ``WANDB_MODE=offline`` the runs
are written offline, into ``<dir>/wandb/offline-run-*``, for ``wandb sync`` to upload later; the command says so.

Exactly once: a ledger beside the runs (``<dir>/gaptui-wandb.json``) marks a run ``started`` before its W&B run is
opened and ``done`` once it is finished (the last write). A run marked done is skipped; a run marked started (an
export killed half way) is redone under a fresh W&B id after its half-written offline folder is moved aside, and,
online, its half-logged W&B run deleted. Online, runs of the project that carry a gaptui hash and the summary key
``gaptui_status = done`` count as logged too (an export from another machine). Needs ``pip install 'gaptui[wandb]'``.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import netrc
import os
import re
import shutil
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from engine.errors import GaptuiError
from engine.files import FileLock, atomic_write_text
from engine.user_files import read_user_bytes
from gaptui import analysis
from gaptui.tracking import epoch_metrics, finished_records, record_run_dir

LEDGER = "gaptui-wandb.json"
DONE_KEY = "gaptui_status"
#: W&B's limits on a tag and on a group name.
MAX_TAG = 64
MAX_GROUP = 128


@dataclass(frozen=True)
class WandbSummary:
    """What an export did: runs logged, runs already there (skipped), unreadable records, where, and how."""

    project: str
    logged: list[str]
    skipped: list[str]
    unreadable: list[str] = field(default_factory=list)
    offline: bool = False
    folder: Path | None = None


def has_api_key() -> bool:
    """Whether W&B can log in without asking: ``WANDB_API_KEY``, or a ``wandb login`` entry in ``~/.netrc``."""
    if os.environ.get("WANDB_API_KEY", "").strip():
        return True
    host = urlparse(os.environ.get("WANDB_BASE_URL") or "https://api.wandb.ai").hostname or "api.wandb.ai"
    try:
        return netrc.netrc(os.environ.get("NETRC") or None).authenticators(host) is not None
    except (OSError, netrc.NetrcParseError):
        return False


def wants_offline() -> bool:
    return os.environ.get("WANDB_MODE", "").strip().lower() in ("offline", "dryrun") or not has_api_key()


def cell(record: Mapping[str, Any]) -> str:
    """The table cell of ``record``: its axes (the seed is not one), ``key=value`` joined by ``, ``."""
    text = ", ".join(f"{k}={_plain(v)}" for k, v in sorted((record.get("axes") or {}).items()))
    text = text or analysis.record_task(record)
    if len(text) <= MAX_GROUP:
        return text
    return text[: MAX_GROUP - 13] + "~" + hashlib.sha256(text.encode()).hexdigest()[:12]


def _plain(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def history_rows(run_dir: Path | None) -> list[tuple[int, dict[str, float]]]:
    """``(epoch, {key: value})`` in epoch order: the ``epoch`` and ``eval`` events of one epoch merged."""
    rows: dict[int, dict[str, float]] = {}
    for key, value, _stamp, epoch in epoch_metrics(run_dir) if run_dir is not None else []:
        rows.setdefault(epoch, {})[key] = value
    return sorted(rows.items())


def run_payload(record: Mapping[str, Any]) -> dict[str, Any]:
    """Everything logged for ``record``: config, tags, group, name, history rows and summary."""
    axes = record.get("axes") or {}
    finals = {k: analysis.numeric_value(v) for k, v in (record.get("metrics") or {}).items()}
    return {
        "name": str(record.get("id")),
        "config": {
            **dict(record.get("spec") or {}),
            "gaptui": {
                "run": str(record.get("id")),
                "hash": record["hash"],
                "task": analysis.record_task(record),
                "seed": record.get("seed"),
            },
        },
        "tags": [f"{k}={_plain(v)}"[:MAX_TAG] for k, v in sorted(axes.items())],
        "group": cell(record),
        "history": history_rows(record_run_dir(record)),
        "summary": {k: v for k, v in finals.items() if v is not None},
    }


#: What a W&B run id of the ledger may hold (the ids gaptui writes: ``<run id>-<attempt>``).
_WANDB_ID = re.compile(r"[A-Za-z0-9_.-]{1,128}")
LEDGER_STATUSES = ("started", "done")


class Ledger:
    """``{project path: {run hash: {"id": W&B run id, "status": "started" | "done", "attempt": n}}}``, on disk.

    Every entry is checked when the ledger is read: a hand-edited entry of another shape (an id with ``*`` or
    ``/``, an unknown status, an attempt that is not a count) is one error line naming the file, the project and
    the run, before anything is logged or moved."""

    def __init__(self, folder: Path, path: str) -> None:
        self.file = folder / LEDGER
        self.path = path
        hint = "move it aside to export every run again"
        try:
            data = json.loads(read_user_bytes(self.file, hint)) if self.file.exists() else {}
        except ValueError as exc:
            raise GaptuiError(f"{self.file}: unreadable ({exc}); {hint}") from None
        if not isinstance(data, dict) or not all(isinstance(runs, dict) for runs in data.values()):
            raise GaptuiError(f"{self.file}: not a table of projects, each a table of runs; {hint}")
        for project, runs in data.items():
            for run_hash, entry in runs.items():
                problem = _entry_problem(entry)
                if problem:
                    raise GaptuiError(f"{self.file}: project {project}, run {run_hash}: {problem}; {hint}")
        self.data: dict[str, dict[str, dict[str, Any]]] = data
        self.runs = self.data.setdefault(path, {})

    def mark(self, run_hash: str, wandb_id: str, status: str, attempt: int) -> None:
        self.runs[run_hash] = {"id": wandb_id, "status": status, "attempt": attempt, "at": time.time()}
        self.file.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.file, json.dumps(self.data, indent=1, sort_keys=True) + "\n")


def _entry_problem(entry: Any) -> str:
    """What is wrong with one ledger entry (``""`` when nothing is)."""
    if not isinstance(entry, dict):
        return f"the entry is {type(entry).__name__}, expected a table of id, status and attempt"
    wandb_id, status, attempt = entry.get("id"), entry.get("status"), entry.get("attempt", 1)
    if not isinstance(wandb_id, str) or not _WANDB_ID.fullmatch(wandb_id):
        return f"id {wandb_id!r} is not a W&B run id (letters, digits, '-', '_', '.')"
    if status not in LEDGER_STATUSES:
        return f"status {status!r} is not one of {', '.join(LEDGER_STATUSES)}"
    if not isinstance(attempt, int) or isinstance(attempt, bool) or attempt < 0:
        return f"attempt {attempt!r} is not a count"
    return ""


def _wandb() -> Any:
    try:
        import wandb
    except ImportError:
        raise GaptuiError("--wandb needs Weights & Biases: pip install 'gaptui[wandb]'") from None
    return wandb


def _remote_runs(wandb: Any, path: str) -> dict[str, list[Any]]:
    """Online: the project's runs by gaptui hash (an empty map for a project that does not exist yet)."""
    try:
        runs = list(wandb.Api(timeout=30).runs(path))
    except Exception as exc:  # noqa: BLE001 - W&B raises its own errors and requests' alike
        if "not found" in str(exc).lower() or "404" in str(exc):
            return {}
        raise GaptuiError(f"--wandb {path}: {str(exc).strip().splitlines()[0][:300]}") from None
    by_hash: dict[str, list[Any]] = {}
    for run in runs:
        run_hash = ((run.config or {}).get("gaptui") or {}).get("hash")
        if isinstance(run_hash, str):
            by_hash.setdefault(run_hash, []).append(run)
    return by_hash


def _set_aside(folder: Path, wandb_id: str) -> None:
    """Move the offline folders of a half-logged W&B run out of ``wandb sync``'s way."""
    for old in sorted((folder / "wandb").glob(f"offline-run-*-{glob.escape(wandb_id)}")):
        target = folder / "incomplete" / old.name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(old), str(target))


def check_project(project: str) -> None:
    if not project.strip() or "/" in project:
        raise GaptuiError(f"--wandb '{project}': give the project's name (with --entity for a team), no '/'")


def export_wandb(
    records: Sequence[Any],
    project: str,
    entity: str | None = None,
    folder: Path | None = None,
    task: str | None = None,
) -> WandbSummary:
    """Log every finished run of ``records`` to the W&B ``project`` (offline into ``folder`` without a key)."""
    check_project(project)
    done, unreadable = finished_records(records, task)
    wandb = _wandb()
    offline = wants_offline()
    folder = Path(folder or "wandb-export").resolve()
    path = f"{entity}/{project}" if entity else project
    lock = FileLock(folder / LOCK, f"gaptui export --wandb {path}")
    if not lock.acquire():
        raise GaptuiError(
            f"{folder} is in use by another W&B export ({lock.current_holder()}); run this one once it ends "
            "(it then skips every run that one logged)"
        )
    try:
        with kept_under(folder):
            return _export(wandb, done, unreadable, project, entity, folder, path, offline)
    finally:
        lock.release()


def _export(
    wandb: Any,
    done: Sequence[Any],
    unreadable: list[str],
    project: str,
    entity: str | None,
    folder: Path,
    path: str,
    offline: bool,
) -> WandbSummary:
    ledger = Ledger(folder, path)
    remote = {} if offline or not done else _remote_runs(wandb, path)
    logged, skipped = [], []
    for record in done:
        run_hash = record["hash"]
        entry = ledger.runs.get(run_hash)
        earlier = remote.get(run_hash, [])
        if (entry and entry.get("status") == "done") or any(r.summary.get(DONE_KEY) == "done" for r in earlier):
            skipped.append(str(record.get("id")))
            continue
        attempt = int(entry.get("attempt", 0)) + 1 if entry else 1
        if entry:  # killed half way: set aside what it wrote, then log whole under a fresh id
            _set_aside(folder, str(entry.get("id")))
        for run in earlier:
            run.delete()
        wandb_id = f"{record.get('id')}-{attempt}"  # the gaptui run id: unique in a workspace
        ledger.mark(run_hash, wandb_id, "started", attempt)
        _log_run(wandb, run_payload(record), wandb_id, project, entity, folder, offline)
        ledger.mark(run_hash, wandb_id, "done", attempt)
        logged.append(str(record.get("id")))
    return WandbSummary(path, logged, skipped, unreadable, offline, folder)


#: The lock file of an export folder: one export at a time writes its ledger and offline runs.
LOCK = ".gaptui-wandb.lock"
#: Where W&B keeps files of its own (its service's debug logs, caches, staged artefacts), by environment variable:
#: a folder inside the export folder, so that nothing of an export is written outside the folder the user named.
OWN_FOLDERS = {
    "XDG_CACHE_HOME": ".cache",
    "WANDB_CACHE_DIR": ".cache/wandb",
    "WANDB_DATA_DIR": ".data",
    "WANDB_ARTIFACT_DIR": ".artifacts",
}


@contextlib.contextmanager
def kept_under(folder: Path) -> Iterator[None]:
    """Point W&B's own folders (:data:`OWN_FOLDERS`) inside ``folder`` for the export, then put the environment
    back as it was."""
    before = {key: os.environ.get(key) for key in OWN_FOLDERS}
    os.environ.update({key: str(folder / sub) for key, sub in OWN_FOLDERS.items()})
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _log_run(
    wandb: Any, payload: Mapping[str, Any], wandb_id: str, project: str, entity: str | None, folder: Path, offline: bool
) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    settings = wandb.Settings(
        silent=True,
        console="off",
        disable_git=True,
        save_code=False,
        x_disable_stats=True,
        x_disable_machine_info=True,
        x_save_requirements=False,
    )
    try:
        run = wandb.init(
            project=project,
            entity=entity,
            id=wandb_id,
            name=payload["name"],
            config=payload["config"],
            tags=payload["tags"],
            group=payload["group"],
            dir=str(folder),
            mode="offline" if offline else "online",
            resume="never",
            settings=settings,
        )
    except Exception as exc:  # noqa: BLE001 - wandb.errors.* and network errors alike
        raise GaptuiError(f"--wandb {project}: {str(exc).strip().splitlines()[0][:300]}") from None
    try:
        for epoch, row in payload["history"]:
            run.log(row, step=epoch)
        run.summary.update(dict(payload["summary"]))
        run.summary[DONE_KEY] = "done"
    finally:
        run.finish()
