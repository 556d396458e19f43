"""`gaptui export --mlflow URI` after a kill and on bad input: a kill at any moment of the export leaves nothing the
next export takes for done, so the next export logs every run exactly once and whole; every bad URI, a server that
does not answer (within seconds, not MLflow's minutes) and a bad --metric are one error line, before anything is
logged; a malformed record is left out, never a crash."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mlflow")

from engine.errors import GaptuiError  # noqa: E402
from gaptui import mlflow_export  # noqa: E402
from gaptui.mlflow_export import export_mlflow  # noqa: E402
from tests.support.cli import run_cli  # noqa: E402
from tests.support.records import history_of
from tests.support.records import record as run_record

#: Every MlflowClient method the export calls: a kill is injected before each call in turn.
CALLS = (
    "search_experiments",
    "get_experiment_by_name",
    "create_experiment",
    "search_runs",
    "list_artifacts",
    "delete_run",
    "create_run",
    "log_batch",
    "log_artifact",
    "set_terminated",
    "set_tag",
)
WRITES = ("log_batch", "log_artifact", "set_terminated", "set_tag")
HTTP_VARS = ("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "MLFLOW_HTTP_REQUEST_TIMEOUT")


FINISHED = "2026-01-01T00:00:00"


def _record(root: Path, n: int, result: bool = True) -> dict[str, Any]:
    folder = root / "runs" / f"r{n}"
    folder.mkdir(parents=True, exist_ok=True)
    events = [{"v": 1, "event": "epoch", "t": float(e), "epoch": e, "train_loss": 1.0 / e} for e in (1, 2, 3)]
    (folder / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    if result:
        (folder / "result.json").write_text(json.dumps({"status": "done", "n": n}))
    spec = {"task": "gape", "model": {"layers": 2, "hidden": 16}, "seed": n}
    metrics = {"val_mae": 0.5 + n / 100}
    return run_record(
        n, "gape", {"pe": "rwpe", "dataset": "zinc"}, n, metrics, spec=spec, finished=FINISHED, run_dir=str(folder)
    )


def _records(root: Path, count: int = 3) -> list[dict[str, Any]]:
    # The last run has no result.json: its MLflow run is complete without an artefact.
    return [_record(root, n, result=n < count - 1) for n in range(count)]


def _reader(uri: str) -> Any:
    from mlflow.tracking import MlflowClient

    with mlflow_export._environ({"MLFLOW_ALLOW_FILE_STORE": "true"}):  # MLflow's own reader of the local store
        return MlflowClient(tracking_uri=uri)


def _check_exported_once(uri: str, records: list[dict[str, Any]]) -> None:
    """Every record is exactly one active MLflow run, and that run is whole."""
    client = _reader(uri)
    experiment = client.get_experiment_by_name("gaptui-gape")
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id])
    assert sorted(r.data.tags["gaptui.hash"] for r in runs) == sorted(r["hash"] for r in records)
    for record in records:
        (run,) = [r for r in runs if r.data.tags["gaptui.hash"] == record["hash"]]
        assert run.info.status == "FINISHED" and run.data.tags["gaptui.status"] == "done"
        assert run.data.tags["gaptui.run"] == record["id"] and run.data.tags["axis.pe"] == "rwpe"
        assert run.data.params["model.hidden"] == "16"
        assert run.data.metrics["final.val_mae"] == pytest.approx(record["metrics"]["val_mae"])
        assert [m.step for m in client.get_metric_history(run.info.run_id, "train_loss")] == [1, 2, 3]
        artefacts = [a.path for a in client.list_artifacts(run.info.run_id)]
        assert artefacts == (["result.json"] if (Path(record["run_dir"]) / "result.json").is_file() else [])


class _Calls:
    """Counts the export's MlflowClient calls (in order, with their run id) and kills it before call ``kill_at``."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, kill_at: int | None = None) -> None:
        from mlflow.tracking import MlflowClient

        self.log: list[tuple[str, Any, tuple, dict]] = []
        self.kill_at = kill_at
        for name in CALLS:
            monkeypatch.setattr(MlflowClient, name, self._wrap(name, getattr(MlflowClient, name)))

    def _wrap(self, name: str, method: Any) -> Any:
        def call(client: Any, *args: Any, **kwargs: Any) -> Any:
            self.log.append((name, args[0] if args else None, args, kwargs))
            if len(self.log) == self.kill_at:
                raise KeyboardInterrupt  # Ctrl-C (or any kill) just before this call
            return method(client, *args, **kwargs)

        return call


def _count_calls(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, records: list[dict[str, Any]]) -> int:
    with monkeypatch.context() as patch:
        calls = _Calls(patch)
        export_mlflow(records, f"file:{tmp_path / 'count'}")
    return len(calls.log)


def _killed(monkeypatch: pytest.MonkeyPatch, records: list[dict[str, Any]], uri: str, at: int) -> None:
    with monkeypatch.context() as patch:
        _Calls(patch, kill_at=at)
        with pytest.raises(KeyboardInterrupt):
            export_mlflow(records, uri)


def _writes_done_tag(name: str, args: tuple, kwargs: dict) -> bool:
    if name == "set_tag":
        return args[1] == "gaptui.status"
    return name == "log_batch" and any(t.key == "gaptui.status" for t in kwargs.get("tags") or ())


def test_the_done_tag_is_the_last_write_of_each_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    records = _records(tmp_path)
    calls = _Calls(monkeypatch)
    summary = export_mlflow(records, f"file:{tmp_path / 'mlruns'}")
    assert summary.logged == [r["id"] for r in records] and summary.skipped == []
    runs = [run_id for name, run_id, _, _ in calls.log if name == "set_terminated"]
    assert len(runs) == len(records)
    for run_id in runs:
        writes = [(name, a, k) for name, r, a, k in calls.log if r == run_id and name in WRITES]
        assert [_writes_done_tag(*w) for w in writes].count(True) == 1
        assert _writes_done_tag(*writes[-1]), [w[0] for w in writes]  # after the artefact and FINISHED
    monkeypatch.undo()
    _check_exported_once(f"file:{tmp_path / 'mlruns'}", records)


def test_a_kill_at_any_moment_is_finished_by_the_next_export(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    records = _records(tmp_path)
    total = _count_calls(monkeypatch, tmp_path, records)
    assert total >= 3 * 6
    for at in range(1, total + 1):
        uri = f"file:{tmp_path / f'kill{at}'}"
        _killed(monkeypatch, records, uri, at)
        summary = export_mlflow(records, uri)
        assert sorted(summary.logged + summary.skipped) == sorted(r["id"] for r in records), at
        _check_exported_once(uri, records)
        again = export_mlflow(records, uri)  # and now it is all there: nothing logged twice
        assert again.logged == [] and len(again.skipped) == len(records), at


def test_a_kill_while_redoing_a_killed_export_is_finished_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    records = _records(tmp_path)
    # The first export is killed just before the second run is marked FINISHED: the first run is complete, the
    # second is half-logged; the export that redoes it is killed in turn at each of its calls.
    first_kill = _count_calls(monkeypatch, tmp_path, records[:1]) + 5
    with monkeypatch.context() as patch:
        calls = _Calls(patch, kill_at=first_kill)
        with pytest.raises(KeyboardInterrupt):
            export_mlflow(records, f"file:{tmp_path / 'probe'}")
        assert calls.log[-1][0] == "set_terminated"
    with monkeypatch.context() as patch:
        calls = _Calls(patch)
        export_mlflow(records, f"file:{tmp_path / 'probe'}")
        assert "delete_run" in [c[0] for c in calls.log]
        redo = len(calls.log)
    for at in range(1, redo + 1):
        uri = f"file:{tmp_path / f'kill{at}'}"
        _killed(monkeypatch, records, uri, first_kill)
        _killed(monkeypatch, records, uri, at)
        export_mlflow(records, uri)
        _check_exported_once(uri, records)


def test_a_run_an_earlier_export_left_incomplete_is_logged_again(tmp_path: Path) -> None:
    records = _records(tmp_path)
    uri = f"file:{tmp_path / 'mlruns'}"
    export_mlflow(records, uri)
    client = _reader(uri)
    experiment = client.get_experiment_by_name("gaptui-gape").experiment_id
    runs = {r.data.tags["gaptui.hash"]: r for r in client.search_runs([experiment])}
    # What the old export left after a kill: the done tag, but RUNNING and without its artefact.
    client.delete_run(runs[records[0]["hash"]].info.run_id)
    stale = client.create_run(experiment, tags={"gaptui.hash": records[0]["hash"], "gaptui.status": "done"})
    # FINISHED with the done tag, but its result.json is missing.
    client.delete_run(runs[records[1]["hash"]].info.run_id)
    bare = client.create_run(experiment, tags={"gaptui.hash": records[1]["hash"], "gaptui.status": "done"})
    client.set_terminated(bare.info.run_id)
    # A duplicate of a complete run (two exports at once) is removed: one run per hash.
    duplicate = client.create_run(experiment, tags={"gaptui.hash": records[2]["hash"], "gaptui.status": "done"})
    client.set_terminated(duplicate.info.run_id)
    summary = export_mlflow(records, uri)
    assert summary.logged == [records[0]["id"], records[1]["id"]] and summary.skipped == [records[2]["id"]]
    _check_exported_once(uri, records)
    for run in (stale, bare, duplicate):
        assert client.get_run(run.info.run_id).info.lifecycle_stage == "deleted"


def test_exported_again_logs_only_what_is_new(tmp_path: Path) -> None:
    records = _records(tmp_path)
    uri = f"file:{tmp_path / 'mlruns'}"
    assert export_mlflow(records[:2], uri).logged == [records[0]["id"], records[1]["id"]]
    client = _reader(uri)
    experiment = client.get_experiment_by_name("gaptui-gape").experiment_id
    before = {r.info.run_id for r in client.search_runs([experiment])}
    summary = export_mlflow(records, uri)
    assert summary.logged == [records[2]["id"]] and summary.skipped == [records[0]["id"], records[1]["id"]]
    assert before < {r.info.run_id for r in client.search_runs([experiment])}
    _check_exported_once(uri, records)


def test_malformed_records_are_left_out_not_a_crash(tmp_path: Path) -> None:
    good = _records(tmp_path, 2)
    bad = [
        {**_record(tmp_path, 10), "metrics": [0.5, 0.6]},
        {**_record(tmp_path, 11), "metrics": "val_mae=0.5"},
        {**_record(tmp_path, 12), "spec": "gape"},
        {**_record(tmp_path, 13), "axes": ["pe", "rwpe"]},
        {**_record(tmp_path, 14), "hash": None},
        {**_record(tmp_path, 15), "hash": "x' OR '1'='1"},
        {**_record(tmp_path, 16), "task": 7},
        {**_record(tmp_path, 17), "run_dir": 3},
    ]
    uri = f"file:{tmp_path / 'mlruns'}"
    summary = export_mlflow([*good, *bad, "not a record"], uri)  # type: ignore[list-item]
    assert summary.logged == [r["id"] for r in good]
    assert summary.unreadable == [r["id"] for r in bad]
    _check_exported_once(uri, good)


def test_a_missing_database_driver_is_one_error_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # With the full MLflow (SQLAlchemy) a postgresql:// store is known, and its driver's absence is an ImportError
    # while the store is built: as MLflow raises it, simulated here since mlflow-skinny has no SQL stores.
    from mlflow.tracking._tracking_service import utils

    def builder(store_uri: str, artifact_uri: str | None = None) -> Any:
        raise ModuleNotFoundError("No module named 'psycopg2'", name="psycopg2")

    monkeypatch.setitem(utils._tracking_store_registry._registry, "postgresql", builder)
    with pytest.raises(GaptuiError) as caught:
        export_mlflow(_records(tmp_path, 1), "postgresql://u@localhost/db")
    assert str(caught.value) == (
        "--mlflow postgresql://u@localhost/db: the driver of the postgresql tracking store is missing "
        "(psycopg2 is not installed); pip install it"
    )


@pytest.fixture
def silent_server() -> Iterator[int]:
    """The port of a local server that accepts connections and never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    accepted: list[socket.socket] = []

    def serve() -> None:
        while True:
            try:
                accepted.append(server.accept()[0])
            except OSError:
                return

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    # Shut down before closing: close alone does not wake a thread blocked in accept() on Linux.
    for sock in accepted:
        sock.close()
    with contextlib.suppress(OSError):
        server.shutdown(socket.SHUT_RDWR)
    server.close()
    thread.join(timeout=5)


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_the_http_limits_hold_for_the_export_only_and_yield_to_the_users(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for var in HTTP_VARS:
        monkeypatch.delenv(var, raising=False)
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    seen: list[dict[str, str | None]] = []

    def search_experiments(client: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append({var: os.environ.get(var) for var in HTTP_VARS})
        raise MlflowException("API request failed: Connection refused")

    monkeypatch.setattr(MlflowClient, "search_experiments", search_experiments)
    uri = f"http://127.0.0.1:{_closed_port()}"
    with pytest.raises(GaptuiError, match="connection refused"):
        export_mlflow([], uri)
    assert seen[-1] == mlflow_export.PREFLIGHT_HTTP
    assert all(var not in os.environ for var in HTTP_VARS)  # set for the export only
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "60")
    with pytest.raises(GaptuiError):
        export_mlflow([], uri)
    assert seen[-1]["MLFLOW_HTTP_REQUEST_TIMEOUT"] == "60"  # the user's own setting wins
    assert os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] == "60"


def _one_error_line(res: Any, *parts: str) -> str:
    assert res.returncode == 2, (res.returncode, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --mlflow"), res.stderr
    assert "Traceback" not in res.stderr and res.stdout == ""
    for part in parts:
        assert part in lines[0], lines[0]
    return lines[0]


def _bad_uris(tmp_path: Path) -> dict[str, tuple[str, str]]:
    a_file = tmp_path / "a-file"
    a_file.write_text("not a store")
    return {
        "empty": ("", "needs a tracking URI"),
        "blank": ("   ", "needs a tracking URI"),
        "unknown scheme": ("foo://x", "unknown tracking URI scheme 'foo'"),
        # mlflow-skinny has no SQL stores; the full MLflow without the driver: see the test above
        "postgresql": ("postgresql://u@localhost:1/db", "postgresql"),
        "mysql": ("mysql://u@localhost:1/db", "mysql"),
        "mssql": ("mssql://u@localhost:1/db", "mssql"),
        "file is a file": (f"file:{a_file}", "is a file, not a folder"),
        "file under a file": (f"file:{a_file}/mlruns", "is a file, not a folder"),
        "file path is a file": (str(a_file), "is a file, not a folder"),
        "refused": (f"http://127.0.0.1:{_closed_port()}", "connection refused"),
    }


#: Each through the CLI too (a subprocess each: a few seconds); the others only in-process.
CLI_CASES = ("empty", "unknown scheme", "postgresql", "mysql", "mssql", "file is a file", "refused")


@pytest.mark.parametrize("case", [*CLI_CASES, "blank", "file under a file", "file path is a file"])
def test_a_bad_uri_is_one_line_error_before_anything_is_written(tmp_path: Path, case: str) -> None:
    uri, says = _bad_uris(tmp_path)[case]
    records = _records(tmp_path, 1)
    before = sorted(tmp_path.rglob("*"))
    with pytest.raises(GaptuiError) as caught:
        export_mlflow(records, uri)
    assert len(str(caught.value).splitlines()) == 1 and says in str(caught.value)
    assert sorted(tmp_path.rglob("*")) == before


@pytest.mark.e2e
@pytest.mark.parametrize("case", CLI_CASES)
def test_a_bad_uri_is_one_error_line_from_the_cli(tmp_path: Path, case: str) -> None:
    uri, says = _bad_uris(tmp_path)[case]
    ws = history_of(tmp_path, _records(tmp_path, 1))
    _one_error_line(run_cli("export", "--mlflow", uri, "--workspace", str(ws), timeout=60), says)


@pytest.mark.e2e
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc refuses new folders on Linux")
def test_an_unwritable_file_store_is_one_error_line(tmp_path: Path) -> None:
    ws = history_of(tmp_path, [])
    if os.geteuid() != 0:  # root writes anywhere but /proc
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        res = run_cli("export", "--mlflow", f"file:{locked}/mlruns", "--workspace", str(ws), timeout=60)
        _one_error_line(res, "is not writable")
    res = run_cli("export", "--mlflow", "file:/proc/gaptui-mlruns", "--workspace", str(ws), timeout=60)
    _one_error_line(res, "/proc")


@pytest.mark.e2e
def test_a_server_that_never_answers_is_given_up_in_seconds(
    tmp_path: Path, silent_server: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    for var in HTTP_VARS:
        monkeypatch.delenv(var, raising=False)  # gaptui's own bound is measured
    ws = history_of(tmp_path, _records(tmp_path, 1))
    start = time.monotonic()  # what the CLI takes to start and fail at once (MLflow imported), on this machine
    _one_error_line(run_cli("export", "--mlflow", "foo://x", "--workspace", str(ws), timeout=60))
    baseline = time.monotonic() - start
    start = time.monotonic()
    res = run_cli("export", "--mlflow", f"http://127.0.0.1:{silent_server}", "--workspace", str(ws), timeout=60)
    waited = time.monotonic() - start - baseline
    _one_error_line(res, "did not answer", "MLFLOW_HTTP_REQUEST_TIMEOUT")
    # 2 tries of 3 s; MLflow's own defaults would wait minutes (the margin is for a loaded machine)
    assert waited < 15, f"gave up after {waited:.1f} s past the CLI's start-up"


@pytest.mark.e2e
def test_a_bad_metric_is_refused_before_anything_is_logged(tmp_path: Path) -> None:
    ws = history_of(tmp_path, _records(tmp_path, 2))
    store = tmp_path / "mlruns"
    res = run_cli("export", "--mlflow", f"file:{store}", "--metric", "val_maee", "--workspace", str(ws), timeout=60)
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert res.stderr.startswith("error: ") and "val_maee" in res.stderr and "Traceback" not in res.stderr
    assert not store.exists()  # no experiment, not even the store's folder
    res = run_cli(
        "export", "--mlflow", f"file:{store}", "--task", "gape", "--metric", "val_mae", "--workspace", str(ws)
    )
    assert res.returncode == 0, res.stderr
    assert "logged 2 run(s)" in res.stdout
