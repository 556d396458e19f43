"""The studies' storage: one Optuna SQLite file per study under the workspace, its sampler and pruner, and the
studies of a preset's rows opened (created or resumed) in it."""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from engine.errors import GaptuiError
from engine.files import sqlite_url
from gaptui.tune.settings import Row, TuneSettings
from gaptui.workspace import Workspace

# ---------------------------------------------------------------------------------------------------- storage


def study_path(ws: Workspace, name: str) -> Path:
    return ws.tune / f"{name}.db"


def storage(ws: Workspace, name: str, read_only: bool = False) -> Any:
    """The study's Optuna RDB storage: a SQLite file several slots may ask and tell through at once; ``read_only``
    (``--status``) opens an existing file without writing to it or creating one."""
    import optuna

    path = study_path(ws, name)
    if not read_only:
        path.parent.mkdir(parents=True, exist_ok=True)
    with storage_errors(path):
        return optuna.storages.RDBStorage(
            sqlite_url(path, read_only),
            engine_kwargs={"connect_args": {"timeout": 60}},
            skip_table_creation=read_only,
        )


@contextlib.contextmanager
def storage_errors(path: Path) -> Iterator[None]:
    """A database error of the study's SQLite file (a read-only or full workspace, a file that is not a database)
    as one :class:`GaptuiError` line naming the file, instead of SQLAlchemy's traceback."""
    import optuna
    from sqlalchemy.exc import SQLAlchemyError

    try:
        yield
    except (SQLAlchemyError, optuna.exceptions.StorageInternalError) as exc:
        cause = exc
        while cause.__cause__ is not None or cause.__context__ is not None:  # Optuna wraps SQLAlchemy's error
            cause = cause.__cause__ or cause.__context__  # type: ignore[assignment]
        reason = str(getattr(cause, "orig", None) or cause).strip().splitlines()[0][:200]
        raise GaptuiError(f"{path}: the study's database cannot be used ({reason})") from None


def study_name(settings: TuneSettings, row: Row) -> str:
    return f"{settings.study}:{row.key}"


def sampler_of(settings: TuneSettings, row: Row, asked: int = 0) -> Any:
    """The row's sampler, seeded by the study's seed, the row and how many trials the study already asked: a
    manager started again after a crash draws new values instead of repeating the first ones."""
    import optuna

    seed = int(hashlib.sha256(f"{settings.seed}:{row.key}:{asked}".encode()).hexdigest()[:8], 16)
    if settings.sampler == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if settings.sampler == "grid":
        return optuna.samplers.GridSampler({d.key: list(d.values) for d in settings.space[row.key]}, seed=seed)
    return optuna.samplers.TPESampler(seed=seed)


def pruner_of(settings: TuneSettings) -> Any:
    import optuna

    if settings.pruner == "median":
        return optuna.pruners.MedianPruner(
            n_startup_trials=settings.prune_startup, n_warmup_steps=settings.prune_warmup
        )
    return optuna.pruners.NopPruner()


def open_studies(ws: Workspace, settings: TuneSettings) -> dict[str, Any]:
    """One Optuna study per row, created or loaded; a study asked with other settings is refused."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    store = storage(ws, settings.study)
    direction = "maximize" if settings.metric.higher_is_better else "minimize"
    studies = {}
    for row in settings.rows:
        name = study_name(settings, row)
        study = optuna.create_study(
            storage=store,
            study_name=name,
            direction=direction,
            sampler=sampler_of(settings, row),
            pruner=pruner_of(settings),
            load_if_exists=True,
        )
        asked = settings.fingerprint(row)
        before = study.user_attrs.get("gaptui")
        if before is None:
            study.set_user_attr("gaptui", {**asked, "trials": settings.trials})
        else:
            changed = [k for k in asked if before.get(k) != asked[k]]
            if before.get("trials", 0) > settings.trials:
                changed.append(f"trials lowered from {before['trials']} to {settings.trials}")
            if changed:
                raise GaptuiError(
                    f"{settings.where}: [tune] changed since study '{settings.study}' began ({', '.join(changed)}); "
                    f"keep the settings, or start a new study with --study NAME ({study_path(ws, settings.study)})"
                )
            if before.get("trials") != settings.trials:
                study.set_user_attr("gaptui", {**asked, "trials": settings.trials})
        study.sampler = sampler_of(settings, row, len(study.get_trials(deepcopy=False)))
        studies[row.key] = study
    return studies
