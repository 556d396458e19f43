"""Nothing corrupts, nothing is silently overwritten, no worker is orphaned: each class run as a user meets it
(CLI and worker subprocesses, real files)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine.errors import GaptuiError
from engine.events import read_events
from engine.files import FileLock
from gaptui.history.store import History, read_records
from gaptui.scheduler import Scheduler, Slot, new_record
from gaptui.workspace import Workspace
from tests.support import ROOT
from tests.support.cli import TRAIN_ARGS, run_cli
from tests.support.engine import TINY_SPEC
from tests.support.fakes import CPU1, Counting, estimator, smoke_plan
from tests.support.presets import alignment_preset, toy_preset
from tests.support.records import history_of, rec
from tests.support.sources import write_aqsol
from tests.support.waiting import alive, wait_for


def _spec_file(tmp_path: Path, **overrides) -> Path:
    path = tmp_path / "spec.in.json"
    path.write_text(json.dumps({**TINY_SPEC, "datasets_dir": str(tmp_path / "datasets"), **overrides}))
    return path


def _worker(spec: Path, out: Path, **kw) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "engine", "--spec", str(spec), "--out", str(out), "--quiet"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        **kw,
    )


# ------------------------------------------------------------------------------------------ repeated cells


@pytest.mark.e2e
def test_repeated_grid_cells_are_one_run(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    preset = alignment_preset(tmp_path, noise=(0.1, 0.1), models=("GCN", "gcn"), seeds=(0, 0), run={"epochs": 1})
    res = run_cli("run", "--preset", str(preset), "--workspace", str(ws), "--cpu-jobs", "2")
    assert res.returncode == 0, res.stderr
    assert "merged" in res.stderr and "repeats GCN" not in res.stderr  # names canonical before comparing
    records = read_records(Workspace(ws))
    assert len(records) == 1 and records[0]["axes"]["model"] == "gcn" and records[0]["status"] == "done"
    events = read_events(Path(records[0]["run_dir"]) / "events.jsonl")[0]
    assert [e["event"] for e in events].count("start") == 1
    show = run_cli("show", records[0]["id"], "--workspace", str(ws))
    assert show.returncode == 0 and "ambiguous" not in show.stderr


def test_history_refuses_a_second_record_for_an_id(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    record = {"id": "a" * 12, "hash": "a" * 64, "status": "queued", "run_dir": str(ws.runs / ("a" * 12))}
    with History(ws, write=True) as history:
        history.put_many([record, dict(record)])
        assert len(history.records()) == 1
        with pytest.raises(GaptuiError, match="already holds a different run with id a{12}"):
            history.put({**record, "hash": "a" * 12 + "b" * 52})
    # stored relative to the workspace, read back absolute
    assert json.loads(ws.history.read_text())["runs"]["1"]["run_dir"] == "runs/" + "a" * 12
    assert read_records(ws)[0]["run_dir"] == str(ws.runs / ("a" * 12))


@pytest.mark.e2e
def test_one_worker_per_run_folder(tmp_path: Path) -> None:
    out = tmp_path / "run"
    lock = FileLock(out / "worker.lock", "another worker")
    assert lock.acquire()
    try:
        res = _worker(_spec_file(tmp_path), out)
    finally:
        lock.release()
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == [f"error: run folder {out} is in use by " + lock.current_holder()]
    assert not (out / "events.jsonl").exists() and not (out / "spec.json").exists()


# ------------------------------------------------------------------------------------------ corrupt artefacts


@pytest.mark.e2e
def test_corrupt_checkpoint_resumes_from_the_previous_one_and_torn_events_are_skipped(tmp_path: Path) -> None:
    out = tmp_path / "run"
    spec = _spec_file(tmp_path)
    assert _worker(spec, out).returncode == 0
    # Simulate a crash during the last epoch: no result yet, a truncated newest checkpoint, a torn event line.
    (out / "result.json").unlink()
    ckpt = out / "checkpoint.pt"
    ckpt.write_bytes(ckpt.read_bytes()[:100])
    with open(out / "events.jsonl", "a") as fh:
        fh.write('{"v": 1, "event": "epo')
    (out / ".checkpoint.pt.tmp").write_bytes(b"half a checkpoint")
    res = _worker(spec, out)
    assert res.returncode == 0, res.stderr
    warning = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(warning) == 1 and warning[0].startswith(f"warning: checkpoint {ckpt} is corrupt (")
    aside = sorted(p.name for p in out.glob("checkpoint.pt.corrupt-*"))
    assert len(aside) == 2 and aside[1] == aside[0] + ".json"  # the file and its fingerprint, kept
    events = read_events(out / "events.jsonl")[0]
    starts = [e for e in events if e["event"] == "start"]
    assert len(starts) == 2 and starts[1]["resumed_from"]["epoch"] == 1  # the previous checkpoint, not scratch
    assert events[-1]["event"] == "done" and not (out / ".checkpoint.pt.tmp").exists()
    # the torn fragment stays one skipped line: the writer started the next event on a fresh line
    lines = (out / "events.jsonl").read_text().splitlines()
    assert '{"v": 1, "event": "epo' in lines


@pytest.mark.e2e
def test_corrupt_checkpoints_everywhere_restart_from_scratch(tmp_path: Path) -> None:
    out = tmp_path / "run"
    spec = _spec_file(tmp_path)
    assert _worker(spec, out).returncode == 0
    (out / "result.json").unlink()
    for name in ("checkpoint.pt", "checkpoint.prev.pt"):
        (out / name).write_bytes(b"\0" * 10)
    res = _worker(spec, out)
    assert res.returncode == 0, res.stderr
    assert res.stderr.count("is corrupt") == 2 and "Traceback" not in res.stderr
    starts = [e for e in read_events(out / "events.jsonl")[0] if e["event"] == "start"]
    assert starts[-1]["resumed_from"] is None


@pytest.mark.e2e
def test_corrupt_cached_dataset_is_moved_aside_and_rebuilt(workspace: Path) -> None:
    args = ["datasets", "build", "er", "--noise", "0.1", "--train", "10", "--val", "4", "-p", "n=20", "--json"]
    first = json.loads(run_cli(*args, "--workspace", str(workspace)).stdout)
    perm = Path(first["path"]) / "train" / "perm.npy"
    perm.write_bytes(perm.read_bytes()[:-7])
    res = run_cli(*args, "--workspace", str(workspace))
    assert res.returncode == 0, res.stderr
    again = json.loads(res.stdout)
    assert again["built"] is True and again["id"] == first["id"]
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "is corrupt (train/perm.npy:" in lines[0] and "rebuilding" in lines[0]
    aside = list((workspace / "datasets").glob(f"{first['id']}.corrupt-*"))
    assert len(aside) == 1 and (aside[0] / "train" / "perm.npy").exists()  # kept, not deleted


# ------------------------------------------------------------------------------------------ no silent overwrite


@pytest.mark.e2e
def test_export_never_replaces_a_file_without_force(workspace: Path, tmp_path: Path) -> None:
    built = run_cli("datasets", "build", "er", "--noise", "0.1", "--train", "5", "--val", "2", "-p", "n=12", "--json")
    ident = json.loads(run_cli(*built.args[3:], "--workspace", str(workspace)).stdout)["id"]
    out = tmp_path / "mine.npz"
    out.write_bytes(b"precious")
    res = run_cli("datasets", "export", ident, "--out", str(out), "--workspace", str(workspace))
    assert res.returncode == 2 and out.read_bytes() == b"precious"
    assert res.stderr.strip() == f"error: --out {out} exists; choose another file or pass --force to replace it"
    res = run_cli("datasets", "export", ident, "--out", str(out), "--force", "--workspace", str(workspace))
    assert res.returncode == 0 and out.read_bytes() != b"precious"


@pytest.mark.e2e
@pytest.mark.slow  # 15-35 s of real worker processes on 2 cores: run with -m slow
def test_train_refuses_another_runs_folder(workspace: Path) -> None:
    first = run_cli(*TRAIN_ARGS, "--epochs", "1", "--json", "--workspace", str(workspace))
    assert first.returncode == 0, first.stderr
    folder = Path(json.loads(first.stdout)["out"])
    before = (folder / "spec.json").read_bytes()
    res = run_cli(*TRAIN_ARGS, "--epochs", "2", "--out", str(folder), "--workspace", str(workspace))
    assert res.returncode == 2 and (folder / "spec.json").read_bytes() == before
    assert res.stderr.startswith(f"error: run folder {folder} holds another run (")
    res = run_cli(
        *TRAIN_ARGS, "--epochs", "2", "--out", str(folder), "--force", "--json", "--workspace", str(workspace)
    )
    assert res.returncode == 0, res.stderr
    assert json.loads((folder / "spec.json").read_text())["epochs"] == 2


# ------------------------------------------------------------------------------------------ foreground train


@pytest.mark.e2e
@pytest.mark.slow  # 17 s of worker processes; run with -m slow
def test_train_is_recorded_and_its_worker_stops_with_it(workspace: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "gaptui", *TRAIN_ARGS, "--epochs", "3000", "--workspace", str(workspace)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )

    def worker_started() -> bool:
        records = read_records(Workspace(workspace)) if (workspace / "history.json").exists() else []
        return bool(records) and any(e["event"] == "epoch" for e in run_events(records[0]))

    wait_for(worker_started, what="the first epoch")
    record = read_records(Workspace(workspace))[0]
    pid = record["pid"]
    assert record["status"] == "running" and record["preset"] is None and alive(pid)
    proc.send_signal(signal.SIGHUP)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    assert not alive(pid)
    record = read_records(Workspace(workspace))[0]
    assert record["status"] == "cancelled" and run_events(record)[-1]["event"] == "cancelled"

    # killed outright, the CLI cannot forward anything: the worker notices its parent is gone and stops itself
    proc = subprocess.Popen(
        [sys.executable, "-m", "gaptui", *TRAIN_ARGS, "--epochs", "3000", "--workspace", str(workspace)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=ROOT,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    wait_for(lambda: read_records(Workspace(workspace))[0]["status"] == "running", what="the resumed run")
    wait_for(lambda: run_events(read_records(Workspace(workspace))[0])[-1]["event"] == "epoch", what="an epoch")
    pid = read_records(Workspace(workspace))[0]["pid"]
    proc.kill()
    proc.wait()
    wait_for(lambda: not alive(pid), timeout=60, what="the worker's exit")
    assert run_events(read_records(Workspace(workspace))[0])[-1]["event"] == "cancelled"


def run_events(record: dict) -> list[dict]:
    return read_events(Path(record["run_dir"]) / "events.jsonl")[0]


@pytest.mark.e2e
def test_worker_exits_quietly_when_its_reader_goes_away(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "engine", "--spec", str(_spec_file(tmp_path, epochs=4)), "--out", str(tmp_path / "r")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.readline()  # the start event, then the reader goes away
    proc.stdout.close()
    stderr = proc.stderr.read().decode()
    assert proc.wait(timeout=300) == 0, stderr
    assert "BrokenPipe" not in stderr and "Traceback" not in stderr
    assert read_events(tmp_path / "r" / "events.jsonl")[0][-1]["event"] == "done"


# ------------------------------------------------------------------------------------------ recovery


@pytest.mark.e2e
def test_a_worker_that_finished_unwatched_is_filed_done_with_its_own_duration(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "ws")
    from engine.alignment.spec import RunSpec

    spec = RunSpec.from_dict({**TINY_SPEC, "datasets_dir": str(ws.datasets)})
    with History(ws, write=True) as history:
        record = new_record(spec, ws)
        started = time.time()
        history.put({**record, "status": "running", "pid": 2**22 + 7, "started_ts": started})
    assert _worker(_spec_file(tmp_path), Path(record["run_dir"])).returncode == 0
    finished_at = (Path(record["run_dir"]) / "result.json").stat().st_mtime
    time.sleep(0.05)  # the re-check happens strictly later than the worker's end
    with History(ws, write=True) as history:
        scheduler = Scheduler(ws, history, [Slot("cpu#0", {})])
        reattached, interrupted = scheduler.recover()
        filed = history.get(record["id"])
    assert reattached == [] and interrupted == [] and scheduler.refiled == [record["id"]]
    assert filed["status"] == "done" and filed["metrics"]["val_lap_acc"] >= 0
    assert filed["duration"] == pytest.approx(finished_at - started, abs=0.02)


# ------------------------------------------------------------------------------------------ missing metrics


@pytest.mark.e2e
def test_no_validation_pairs_is_refused_before_anything_runs(workspace: Path) -> None:
    args = [a if a != "6" else "0" for a in TRAIN_ARGS]  # --val 0: its run would finish done without a metric
    res = run_cli(*args, "--epochs", "1", "--json", "--workspace", str(workspace))
    assert res.returncode == 2 and res.stderr.startswith("error: --val 0: a dataset needs at least one validation")
    assert "Traceback" not in res.stderr and read_records(Workspace(workspace)) == []


# ------------------------------------------------------------------------------------------ issue 19, caches
# Every cache goes through one fingerprinted store (engine.cache): each fault below gives one warning line naming
# the file, the entry moved aside as <name>.corrupt-<time>, and the cache built again with the same content.


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:-5])


def _garble(path: Path) -> None:
    """Flip the last bytes (array data, not the header): the size stays, the content changes."""
    data = bytearray(path.read_bytes())
    data[-4:] = bytes(b ^ 0xFF for b in data[-4:])
    path.write_bytes(bytes(data))


def _garble_meta(path: Path) -> None:
    """Same size, no longer JSON."""
    path.write_bytes(b"#" + path.read_bytes()[1:])


FAULTS = {  # fault: what it does to (entry folder, the file it hits)
    "truncated": lambda entry, name: _truncate(entry / name),
    "garbled": lambda entry, name: _garble(entry / name),
    "missing": lambda entry, name: (entry / name).unlink(),
    "garbled-meta": lambda entry, name: _garble_meta(entry / "meta.json"),
}


def _alignment_cache(root: Path) -> tuple[Path, dict, bool]:
    from engine.alignment.datasets import SPLITS, DatasetSpec, build_dataset

    ds, built = build_dataset(DatasetSpec("er", 0.1, n_train=6, n_val=2, params={"n": 12, "degree": 3}), root)
    return ds.path, {f"{s}/{k}": v for s in SPLITS for k, v in ds.split(s).arrays().items()}, built


def _property_cache(root: Path) -> tuple[Path, dict, bool]:
    from engine.properties.datasets import ARRAYS, PropertyDatasetSpec, build_property_dataset

    ds, built = build_property_dataset(PropertyDatasetSpec("symmetric", 5, "perturb", 40), root)
    return ds.path, {name: ds.array(name) for name in ARRAYS}, built


def _molecule_cache(root: Path) -> tuple[Path, dict, bool]:
    from engine.gape.data import MoleculeSpec, build_molecules

    data, built = build_molecules(MoleculeSpec("ringmol", {"count": 12}), root)
    return data.path, data.arrays, built


def _pe_cache(root: Path) -> tuple[Path, dict, bool]:
    from engine.gape.data import MoleculeSpec, build_molecules
    from engine.gape.pe import EncodingOptions, encoding, parse_pe

    data, _ = build_molecules(MoleculeSpec("ringmol", {"count": 12}), root)
    parts = root / "pe" / data.id
    before = {p.name: p.stat().st_ino for p in parts.iterdir()} if parts.is_dir() else {}
    values = encoding(data, parse_pe("rwpe"), root, EncodingOptions(rwpe_steps=4)).values
    (path,) = [p for p in parts.iterdir() if "corrupt" not in p.name]
    return path, {"pe": values}, before.get(path.name) != path.stat().st_ino  # a new folder: computed now


CACHES = {  # kind: (build, the file its faults hit)
    "alignment": (_alignment_cache, "train/perm.npy"),
    "properties": (_property_cache, "label.npy"),
    "molecules": (_molecule_cache, "arrays.npz"),
    "pe": (_pe_cache, "pe.npy"),
}


def _same(a: dict, b: dict) -> bool:
    import numpy as np

    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("fault", list(FAULTS))
@pytest.mark.parametrize("kind", list(CACHES))
def test_a_corrupt_cache_is_moved_aside_said_once_and_rebuilt(
    tmp_path: Path, kind: str, fault: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from engine.cache import check_entry

    build, target = CACHES[kind]
    path, original, built = build(tmp_path)
    assert built
    FAULTS[fault](path, target)
    capsys.readouterr()
    again_path, again, built = build(tmp_path)
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]
    named = "meta.json" if fault == "garbled-meta" else target
    assert len(warnings) == 1 and f"({named}: " in warnings[0] and "moved aside" in warnings[0], warnings
    aside = list(path.parent.glob(f"{path.name}.corrupt-*"))
    assert len(aside) == 1 and (aside[0] / "meta.json").exists()  # kept as it was, not deleted
    assert again_path == path and built and _same(again, original)
    assert check_entry(path)[0] is not None
    # Intact now: opened again without a word, not rebuilt.
    assert not build(tmp_path)[2] and "warning" not in capsys.readouterr().err


def _calibrated(tmp_path: Path) -> tuple[list[str], object]:
    from gaptui.workspace import Workspace as Ws

    warned: list[str] = []
    counter = Counting()
    estimator(tmp_path, counter, warned=warned).estimate(smoke_plan(tmp_path), [CPU1], Ws(tmp_path))
    return warned, counter


@pytest.mark.parametrize("fault", list(FAULTS))
def test_a_corrupt_calibration_cache_is_moved_aside_said_once_and_measured_again(tmp_path: Path, fault: str) -> None:
    from engine.cache import check_sealed_json

    def measured(path: Path) -> dict:
        """What the cache holds, without when and under what load it was measured (that differs run to run)."""
        entries = (check_sealed_json(path)[0] or {}).get("entries", {})
        return {key: entry["value"] for key, entry in entries.items()}

    _calibrated(tmp_path)
    path = tmp_path / "calibration.json"
    original = measured(path)
    text = path.read_text()
    if fault == "garbled":  # a measurement altered at the same size: still JSON, no longer what was measured
        first = json.loads(text)["entries"]
        value = next(iter(first.values()))["value"]
        seconds = f"{next(iter(value.values()))!r}"
        path.write_text(text.replace(seconds, seconds[:-1] + str((int(seconds[-1]) + 1) % 10), 1))
    elif fault == "garbled-meta":  # the file's own fingerprint
        digest = json.loads(text)["fingerprint"]["sha256"]
        path.write_text(text.replace(digest, digest[::-1]))
    else:
        FAULTS[fault](tmp_path, path.name)
    warned, counter = _calibrated(tmp_path)
    assert len(counter.keys) == 2 and counter.overheads == 1  # measured again
    assert measured(path) == original
    aside = list(tmp_path.glob("calibration.json.corrupt-*"))
    if fault == "missing":  # nothing cached, nothing to move aside: measured, silently
        assert warned == [] and aside == []
        return
    assert len(warned) == 1 and warned[0].startswith("warning: calibration cache ") and "moved aside" in warned[0]
    assert len(aside) == 1
    warned, counter = _calibrated(tmp_path)
    assert warned == [] and counter.keys == []  # trusted now


@pytest.mark.e2e
def test_cli_export_of_a_garbled_alignment_dataset_rebuilds_it(workspace: Path, tmp_path: Path) -> None:
    import numpy as np

    args = ["datasets", "build", "er", "--noise", "0.1", "--train", "6", "--val", "2", "-p", "n=12", "--json"]
    first = json.loads(run_cli(*args, "--workspace", str(workspace)).stdout)
    perm = Path(first["path"]) / "val" / "perm.npy"
    before = np.load(perm)
    _garble(perm)
    out = tmp_path / "pairs.npz"
    res = run_cli("datasets", "export", first["id"], "--out", str(out), "--workspace", str(workspace))
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("warning: cached dataset ") and "(val/perm.npy: " in lines[0]
    assert np.array_equal(np.load(out)["val_perm"], before)
    assert len(list((workspace / "datasets").glob(f"{first['id']}.corrupt-*"))) == 1


@pytest.mark.e2e
def test_cli_export_of_a_garbled_property_dataset_writes_rows_that_match_their_labels(
    workspace: Path, tmp_path: Path
) -> None:
    import numpy as np

    from engine.properties.datasets import build_property_dataset
    from engine.properties.definitions import get_property
    from engine.properties.published import read_published_train
    from engine.properties.suite import suite_specs

    (spec,) = suite_specs(["symmetric"], ["perturb"], graphs=40, sizes=1)
    ds, _ = build_property_dataset(spec, workspace / "datasets")
    _garble(ds.path / "label.npy")  # labels flipped at the same size: the export would contradict its rows
    out = tmp_path / "published"
    args = ["properties", "export", "--out", str(out), "-p", "symmetric", "-f", "perturb", "--graphs", "40"]
    res = run_cli(*args, "--sizes", "1", "-j", "1", "--json", "--workspace", str(workspace))
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    warnings = [line for line in res.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "(label.npy: checksum mismatch)" in warnings[0]
    published = read_published_train(out, "perturb", "symmetric")
    assert np.array_equal(get_property("symmetric")(published.adjacency), published.labels.astype(bool))
    assert len(list(ds.path.parent.glob(f"{ds.path.name}.corrupt-*"))) == 1


@pytest.mark.e2e
def test_gape_worker_rebuilds_garbled_molecule_and_encoding_caches(tmp_path: Path) -> None:
    import numpy as np

    from engine.gape.data import MoleculeSpec, build_molecules
    from engine.gape.pe import EncodingOptions, encoding, parse_pe

    datasets = tmp_path / "datasets"
    data, _ = build_molecules(MoleculeSpec("ringmol", {"count": 24}), datasets)
    values = encoding(data, parse_pe("rwpe"), datasets, EncodingOptions(rwpe_steps=4)).values
    (part,) = (datasets / "pe" / data.id).iterdir()
    _garble(part / "pe.npy")  # a garbled encoding a run would otherwise train on and finish `done`
    _garble_meta(data.path / "meta.json")
    spec = {"task": "gape", "dataset": {"base": "ringmol", "params": {"count": 24}}, "pe": "rwpe", "rwpe_steps": 4}
    spec |= {"layers": 1, "heads": 2, "budget": 2000, "epochs": 1, "batch_size": 12, "datasets_dir": str(datasets)}
    spec_path = tmp_path / "spec.in.json"
    spec_path.write_text(json.dumps(spec))
    res = _worker(spec_path, tmp_path / "run")
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    warnings = [line for line in res.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 2, res.stderr
    assert "cached molecule dataset" in warnings[0] and "(meta.json: not valid JSON)" in warnings[0]
    assert "cached positional encoding" in warnings[1] and "(pe.npy: checksum mismatch)" in warnings[1]
    assert np.array_equal(np.load(part / "pe.npy"), values)
    assert json.loads((tmp_path / "run" / "result.json").read_text())["status"] == "done"


def _strip_fingerprints(entry: Path) -> None:
    meta = json.loads((entry / "meta.json").read_text())
    del meta["files"]
    (entry / "meta.json").write_text(json.dumps(meta))


@pytest.mark.parametrize("kind", list(CACHES))
def test_a_cache_written_before_fingerprints_is_checked_by_content_or_rebuilt(
    tmp_path: Path, kind: str, capsys: pytest.CaptureFixture[str]
) -> None:
    build, _ = CACHES[kind]
    path, original, _ = build(tmp_path)
    _strip_fingerprints(path)
    capsys.readouterr()
    _, again, built = build(tmp_path)
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]
    assert _same(again, original)
    if kind == "pe":  # an encoding has nothing to check it by: computed again
        assert (
            built and len(warnings) == 1 and "(meta.json: no fingerprints (written by an older gaptui))" in warnings[0]
        )
    else:  # checked by its content, then fingerprinted in place
        assert not built and warnings == [] and "files" in json.loads((path / "meta.json").read_text())


def test_an_old_property_dataset_whose_labels_contradict_its_graphs_is_rebuilt(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, original, _ = _property_cache(tmp_path)
    _garble(path / "label.npy")
    _strip_fingerprints(path)
    capsys.readouterr()
    _, again, built = _property_cache(tmp_path)
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]
    assert built and _same(again, original)
    assert len(warnings) == 1 and re.search(r"\(label.npy: [1-4] labels contradict their graphs\)", warnings[0])


def test_a_manager_removes_the_staging_folders_of_killed_cache_builds(tmp_path: Path) -> None:
    dead = 2**22 + 11  # above the largest pid: no live process owns these
    datasets = tmp_path / "datasets"
    stale = [
        datasets / "properties" / f".tmp-symmetric-perturb-n5-abc-{dead}-1",
        datasets / "molecules" / f".tmp-mol-ringmol-abc-{dead}-1",
        datasets / "pe" / "mol-ringmol-abc" / f".tmp-rwpe-abc-{dead}-1",
    ]
    for folder in stale:
        folder.mkdir(parents=True)
    with History(Workspace(tmp_path), write=True):
        pass
    assert not any(p.exists() for p in stale)


def test_a_truncated_pyg_processed_cache_is_moved_aside_and_processed_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import numpy as np

    from engine.sources import SOURCES, parse_params

    write_aqsol(tmp_path)
    source = SOURCES.get("aqsol")(parse_params(SOURCES.get("aqsol"), {}))
    first = source.load(None, None, np.random.default_rng(0), tmp_path)
    _truncate(tmp_path / "aqsol" / "processed" / "train.pt")
    capsys.readouterr()
    again = source.load(None, None, np.random.default_rng(0), tmp_path)
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "aqsol's processed cache" in warnings[0] and "processing the raw" in warnings[0]
    assert [g.num_nodes for g in again.train] == [g.num_nodes for g in first.train]
    assert len(list((tmp_path / "aqsol").glob("processed.corrupt-*"))) == 1


# issue 19, files, messages and size guards


@pytest.mark.e2e
def test_an_export_onto_a_full_disk_names_the_file_leaves_nothing_and_reruns(tmp_path: Path, small_disk) -> None:

    disk, grow = small_disk
    # runs.json of 400 records is about 150 KB: more than the disk holds
    ws = history_of(tmp_path, [rec("gcn", 0.1, 0.5, seed) for seed in range(400)])
    out = disk / "tables"
    res = run_cli("export", "--out", str(out), "--workspace", ws)
    assert res.returncode == 2, res.stderr
    (line,) = res.stderr.strip().splitlines()
    assert line.startswith(f"error: disk full at {out}/"), line
    assert sorted(p.name for p in out.iterdir()) == []  # no half of the export, no temporary file
    grow("4m")  # space freed
    res = run_cli("export", "--out", str(out), "--workspace", ws)
    assert res.returncode == 0, res.stderr
    assert sorted(p.name for p in out.iterdir()) == [
        ".gaptui-export.json",
        "runs.json",
        "tables.csv",
        "tables.md",
        "tables.tex",
    ]
    assert len(json.loads((out / "runs.json").read_text())) == 400


@pytest.mark.e2e
def test_a_family_module_that_does_not_import_is_one_warning_and_the_others_still_work(tmp_path: Path) -> None:
    (tmp_path / "broken_family.py").write_text("def register(:\n")
    env = {
        "GAPTUI_FAMILIES": "broken_family,tests.support.toy_family",
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path)]),
    }
    res = run_cli("tasks", env=env)
    assert res.returncode == 0, res.stderr
    (line,) = res.stderr.strip().splitlines()
    assert line.startswith("warning: GAPTUI_FAMILIES: could not import 'broken_family' (SyntaxError: "), line
    assert line.endswith("; the other families still work"), line
    for name in ("alignment", "gape", "properties", "toy"):
        assert name in res.stdout
    res = run_cli("table", "--task", "broken", "--workspace", str(tmp_path / "ws"), env=env)
    assert res.returncode == 2
    assert res.stderr.strip().splitlines()[-1].endswith("modules that did not import: broken_family")


def test_a_property_build_that_would_take_weeks_is_refused_with_its_time(monkeypatch: pytest.MonkeyPatch) -> None:
    from engine import memory
    from engine.properties.datasets import PropertyDatasetSpec, check_builds_fit

    monkeypatch.setattr(memory, "machine_memory", lambda: 1 << 60)  # memory fits: time decides
    canonical = PropertyDatasetSpec("reflexive", 16, graphs=10**10).canonical()
    with pytest.raises(
        GaptuiError, match=r"would take about [\d,]+ hours \(at least; 20,000,000,000 graphs on 2 processes\)"
    ):
        check_builds_fit([canonical, canonical], workers=2)
    check_builds_fit([PropertyDatasetSpec("reflexive", 16, graphs=1000).canonical()], workers=2)


# ------------------------------------------ issue 19, done artefacts (2), processes and Slurm (6), timeout (10)

TOY_ENV = {"GAPTUI_FAMILIES": "tests.support.toy_family", "OMP_NUM_THREADS": "1"}


@pytest.mark.e2e
@pytest.mark.slow  # two dependency chains run twice through `gaptui run`: about a minute on 2 cores
def test_a_done_run_whose_result_is_gone_or_garbled_runs_again_and_its_dependants_wait(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    where = ("--workspace", str(ws), "--cpu-jobs", "2", "--gpus", "none")
    assert (
        run_cli(
            "run",
            "--preset",
            str(toy_preset(tmp_path, "toy-1", models=["mean"], seeds=[0], steps=1)),
            *where,
            env=TOY_ENV,
        ).returncode
        == 0
    )
    before = {(r["axes"]["model"], r["axes"]["size"]): r for r in read_records(Workspace(ws))}
    gone, garbled = before["pre", 2], before["pre", 3]
    (Path(gone["run_dir"]) / "result.json").unlink()
    (Path(garbled["run_dir"]) / "result.json").write_text('{"status": "do')

    # runs added to the grid need the pre runs: they wait for their second doing, which says why, one line each
    bigger = str(toy_preset(tmp_path, "toy-2", models=["mean", "median"], seeds=[0], steps=1))
    dry = run_cli("run", "--preset", bigger, *where, "--dry-run", "--no-estimate", env=TOY_ENV)
    assert dry.returncode == 0, dry.stderr
    notes = [
        f"note: run {gone['id']} is recorded done but its result.json is missing: running it again",
        f"note: run {garbled['id']} is recorded done but its result.json is corrupt (not a JSON object): running it "
        "again",
    ]
    assert [line for line in dry.stderr.splitlines() if line.startswith("note:")] == notes
    assert "done 2, failed 0, to run 4" in dry.stdout
    assert {r["status"] for r in read_records(Workspace(ws))} == {"done"}  # the dry run changed nothing
    res = run_cli("run", "--preset", bigger, *where, env=TOY_ENV)
    assert res.returncode == 0, res.stderr
    assert [line for line in res.stderr.splitlines() if line.startswith("note:")] == notes
    after = {(r["axes"]["model"], r["axes"]["size"]): r for r in read_records(Workspace(ws))}
    assert len(after) == 6 and {r["status"] for r in after.values()} == {"done"}  # one record per run
    for size, old in ((2, gone), (3, garbled)):
        pre = after["pre", size]
        assert pre["id"] == old["id"] and pre["metrics"] == old["metrics"]
        (earlier,) = pre["earlier"]  # what the first doing recorded is kept
        assert (
            earlier["status"] == "done" and earlier["metrics"] == old["metrics"] and earlier["why"] in notes[size - 2]
        )
        assert json.loads((Path(pre["run_dir"]) / "result.json").read_text())["status"] == "done"
        redone = [e for e in run_events(pre) if e["event"] == "done"]
        assert len(redone) == 2
        assert run_events(after["median", size])[0]["t"] >= redone[-1]["t"]  # the new dependant waited for it
        assert run_events(after["mean", size]) == run_events(before["mean", size])  # a done dependant is left alone
    again = run_cli("run", "--preset", bigger, *where, "--dry-run", "--no-estimate", env=TOY_ENV)
    assert "note:" not in again.stderr and "done 6, failed 0, to run 0" in again.stdout
    shown = run_cli("show", gone["id"], "--workspace", str(ws), env={**TOY_ENV, "COLUMNS": "250"})
    assert shown.returncode == 0 and "its result.json is missing" in shown.stdout and "earlier" in shown.stdout


def test_a_pretraining_run_whose_checkpoint_is_gone_is_planned_again_for_its_gape_runs(tmp_path: Path) -> None:
    from engine.alignment.preset import BASELINE
    from gaptui import launch
    from gaptui.presets import load_preset
    from gaptui.runner import run_id

    ws = Workspace(tmp_path / "ws")
    preset = load_preset("gape-smoke", ws)
    specs = launch.plan(preset, ws, {}).specs
    pre = next(s for s in specs if s.task == "alignment")
    downstream = [s for s in specs if s.task == "gape"]
    folder = ws.runs / run_id(pre)
    folder.mkdir(parents=True)
    (folder / "result.json").write_text(json.dumps({"status": "done", "run": pre.hash(), "metrics": {}}))
    known = {pre.hash(): "done"}
    grid_plan = launch.plan(preset, ws, known)
    assert grid_plan.redo == {pre.hash(): "its checkpoint.pt is missing"} and grid_plan.to_run[0] == pre
    # the model is not needed when every GAPE run is done already
    everything = {s.hash(): "done" for s in downstream} | known
    for spec in downstream:
        (ws.runs / run_id(spec)).mkdir(parents=True)
        (ws.runs / run_id(spec) / "result.json").write_text(json.dumps({"status": "done", "run": spec.hash()}))
    assert launch.plan(preset, ws, everything).redo == {}
    # a checkpoint whose fingerprint does not match is as good as gone
    (folder / "checkpoint.pt").write_bytes(b"model")
    (folder / "checkpoint.json").write_text(json.dumps({"size": 5, "sha256": "0" * 64}))
    assert launch.plan(preset, ws, known).redo == {
        pre.hash(): "its checkpoint.pt fails its checksum (checksum mismatch)"
    }
    (folder / "checkpoint.json").unlink()
    assert launch.plan(preset, ws, known).redo == {}
    assert pre.model != BASELINE


@pytest.mark.e2e
def test_the_timeout_counts_from_each_runs_start_event_not_the_spawn(tmp_path: Path, toy: None) -> None:
    from gaptui.scheduler import Job
    from tests.support.toy_family import ToySpec

    ws = Workspace(tmp_path / "ws")
    specs = [ToySpec(size=2, seed=seed) for seed in (0, 1)]
    sleeper = subprocess.Popen(["sleep", "60"], start_new_session=True)  # stands in for a worker process
    spawned = time.time() - 100  # long before the timeout of 10 s
    try:
        with History(ws, write=True) as history:
            history.put_many([{**new_record(s, ws), "status": "running"} for s in specs])
            scheduler = Scheduler(ws, history, [Slot("cpu#0", {})], timeout=10)
            pack = tuple(s.hash() for s in specs)
            jobs = []
            for spec in specs:
                folder = tmp_path / f"run{spec.seed}"
                folder.mkdir()
                job = Job(spec, spec.hash(), folder, scheduler.slots[0], sleeper.pid, sleeper, spawned, pack=pack)
                scheduler.running[spec.hash()] = job
                jobs.append(job)

            def started(job: Job, ago: float) -> None:
                with open(job.run_dir / "events.jsonl", "a") as fh:
                    fh.write(json.dumps({"v": 1, "event": "start", "t": time.time() - ago}) + "\n")

            for job in jobs:  # spawned 100 s ago, neither started: no timeout yet
                scheduler._follow(job)
            assert [j.run_started for j in jobs] == [None, None] and jobs[0].stopping is None
            started(jobs[0], 5)  # each run of the pack counts from its own start
            for job in jobs:
                scheduler._follow(job)
            assert jobs[0].run_started is not None and jobs[1].run_started is None and jobs[0].stopping is None
            assert scheduler.timed_out(jobs[0], at=time.time() + 6) and not scheduler.timed_out(jobs[1], at=1e12)
            started(jobs[1], 11)  # past the limit: the process is stopped, its runs recorded timed out
            scheduler._follow(jobs[1])
            assert jobs[1].timed_out and jobs[1].stopping is not None
            sleeper.wait(timeout=30)
            for job in jobs:
                scheduler._follow(job)
            records = [history.get(run_id) for run_id in (r["id"] for r in history.records())]
        assert [(r["status"], r["error"]) for r in records] == [("failed", "timed out after 10 s")] * 2
    finally:
        sleeper.kill()
        sleeper.wait()


@pytest.mark.e2e
def test_a_reattached_run_counts_its_timeout_from_the_start_its_worker_wrote_before(tmp_path: Path, toy: None) -> None:
    from gaptui.scheduler import Job
    from tests.support.toy_family import ToySpec

    ws = Workspace(tmp_path / "ws")
    spec = ToySpec(size=2, seed=0)
    folder = tmp_path / "run"
    folder.mkdir()
    now = time.time()
    events = [{"v": 1, "event": "start", "t": now - 300}, {"v": 1, "event": "start", "t": now - 20}]  # resumed once
    (folder / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    sleeper = subprocess.Popen(["sleep", "60"], start_new_session=True)  # stands in for the worker followed by pid
    try:
        with History(ws, write=True) as history:
            history.put_many([{**new_record(spec, ws), "status": "running"}])
            scheduler = Scheduler(ws, history, [Slot("cpu#0", {})], timeout=3600)
            # Re-attached after a manager restart: no process handle, a new job object.
            job = Job(spec, spec.hash(), folder, scheduler.slots[0], sleeper.pid, None)
            scheduler.running[spec.hash()] = job
            scheduler._follow(job)
            assert job.run_started == pytest.approx(now - 20)  # the current attempt's start, not the first one
            scheduler.timeout = 10
            assert scheduler.timed_out(job) and not scheduler.timed_out(job, at=now - 15)
    finally:
        sleeper.kill()
        sleeper.wait()


def _descendants(pid: int) -> dict[int, str]:
    """The processes below ``pid`` (children, their children...) with their command lines, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    found: dict[int, str] = {}
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            try:
                found[child] = (Path(f"/proc/{child}/cmdline").read_bytes().replace(b"\0", b" ")).decode()
            except OSError:
                continue
            todo.append(child)
    return found


@pytest.mark.e2e
def test_sigkill_of_a_parallel_property_build_leaves_no_process_behind(tmp_path: Path) -> None:
    args = ["properties", "build", "--property", "symmetric", "--sizes", "1", "--graphs", "500000", "-j", "2"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "gaptui", *args, "--json", "--workspace", str(tmp_path / "ws")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=ROOT,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    seen: dict[int, str] = {}
    try:

        def pool_up() -> bool:
            seen.update(_descendants(proc.pid))
            workers = [c for c in seen.values() if "multiprocessing" in c and "resource_tracker" not in c]
            return len(workers) >= 2 and any("resource_tracker" in c for c in seen.values())

        wait_for(pool_up, timeout=120, what="two pool workers and the resource tracker")
        proc.kill()
        proc.wait()
        wait_for(lambda: not any(alive(pid) for pid in seen), timeout=30, what="the end of every descendant")
    finally:
        proc.kill()
        for pid in seen:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.e2e
def test_a_failed_slurm_submission_is_one_error_line_and_leaves_no_run_queued(tmp_path: Path, toy: None) -> None:
    from gaptui import launch
    from gaptui.presets import load_preset

    ws = Workspace(tmp_path / "ws")
    preset = toy_preset(tmp_path, "toy-1", models=["mean"], seeds=[0], steps=1)
    specs = launch.plan(load_preset(str(preset), ws), ws, {}).specs
    mean = specs[-1]
    with History(ws, write=True) as history:  # a run stopped before: it stays as it was
        history.put({**new_record(mean, ws), "status": "cancelled", "error": "stopped by hand"})
    before = read_records(ws)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    sbatch = bin_dir / "sbatch"  # a login node whose controller is down
    sbatch.write_text(
        "#!/bin/sh\necho 'sbatch: error: Batch job submission failed: Unable to contact slurm controller "
        "(connect failure)' >&2\nexit 1\n"
    )
    sbatch.chmod(0o755)
    (bin_dir / "srun").write_text("#!/bin/sh\nexit 1\n")
    (bin_dir / "srun").chmod(0o755)
    env = {**TOY_ENV, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    args = ["run", "--preset", str(preset), "--workspace", str(ws.root), "--backend", "slurm", "--force"]
    res = run_cli(*args, env=env)
    assert res.returncode == 2, res.stderr
    assert res.stderr.strip().splitlines() == [
        "error: Slurm submission failed: sbatch: error: Batch job submission failed: Unable to contact slurm "
        "controller (connect failure) (is slurmctld running? `scontrol ping` tells)"
    ]
    assert read_records(ws) == before  # the record made for the new run is gone, the other one as it was
    assert not any((ws.runs / spec.hash()[:12]).exists() for spec in specs)
    # no sbatch at all: said before anything is written
    empty = tmp_path / "nothing"
    empty.mkdir()
    res = run_cli(*args, "--detach", env={**TOY_ENV, "PATH": str(empty)})
    assert res.returncode == 2 and res.stderr.strip().splitlines() == [
        "error: --backend slurm: sbatch not found on PATH; run on a Slurm login node"
    ]
    assert read_records(ws) == before


def test_the_apps_launch_redoes_a_done_run_without_its_result_and_withdraws_a_failed_submission(
    tmp_path: Path, toy: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gaptui import launch
    from gaptui.presets import load_preset
    from gaptui.tui import manager
    from gaptui.tui.messages import ManagerNotice
    from gaptui.tui.planning import SlotConfig

    ws = Workspace(tmp_path / "ws")
    preset = load_preset(str(toy_preset(tmp_path, "toy-1", models=["mean"], seeds=[0], steps=1)), ws)
    pre = launch.plan(preset, ws, {}).specs[0]
    folder = ws.runs / pre.hash()[:12]
    folder.mkdir(parents=True)  # done, its result.json deleted since
    with History(ws, write=True) as history:
        history.put({**new_record(pre, ws), "status": "done", "metrics": {"val_mae": 0.7}})
    before = read_records(ws)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, script in (
        ("sbatch", "echo 'sbatch: error: invalid partition specified: gpu' >&2; exit 1"),
        ("srun", ""),
    ):
        (bin_dir / name).write_text(f"#!/bin/sh\n{script}\n")
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    from gaptui.backends import slurm

    monkeypatch.setattr(slurm, "check_shared_workspace", lambda ws, force: None)  # pytest's folders are in /tmp
    posted: list = []
    with History(ws, write=True) as history:
        loop = manager.ManagerLoop(ws, history, posted.append)
        loop.scheduler = Scheduler(ws, history, [Slot("cpu#0", {})])
        loop._execute(manager.Launch(preset, SlotConfig(backend="slurm")))
    notices = [(m.text, m.severity) for m in posted if isinstance(m, ManagerNotice)]
    assert notices == [
        (f"run {pre.hash()[:12]} is recorded done but its result.json is missing: running it again", "information"),
        ("Slurm submission failed: sbatch: error: invalid partition specified: gpu", "error"),
    ]
    assert read_records(ws) == before  # nothing reached Slurm: the history is as it was, no run left queued


def test_retrying_a_dependant_in_the_app_redoes_the_done_run_it_reads_when_that_lost_its_result(
    tmp_path: Path, toy: None
) -> None:
    from gaptui import launch
    from gaptui.presets import load_preset
    from gaptui.tui import manager
    from gaptui.tui.messages import ManagerNotice

    ws = Workspace(tmp_path / "ws")
    pre, _, mean, _ = launch.plan(
        load_preset(str(toy_preset(tmp_path, "toy-1", models=["mean"], seeds=[0], steps=1)), ws), ws, {}
    ).specs
    assert mean.after == pre.hash()
    (ws.runs / pre.hash()[:12]).mkdir(parents=True)  # done, its result.json deleted since
    posted: list = []
    with History(ws, write=True) as history:
        history.put({**new_record(pre, ws), "status": "done", "metrics": {"val_mae": 0.7}})
        history.put({**new_record(mean, ws), "status": "failed", "error": f"dependency {pre.hash()[:12]} is not done"})
        loop = manager.ManagerLoop(ws, history, posted.append)
        loop.scheduler = Scheduler(ws, history, [Slot("cpu#0", {})])
        loop._retry((mean.hash(),))
        assert [s.hash() for s in loop.scheduler.queue] == [pre.hash(), mean.hash()]  # the dependant waits for it
        records = history.by_hash()
    assert [m.text for m in posted if isinstance(m, ManagerNotice)] == [
        f"run {pre.hash()[:12]} is recorded done but its result.json is missing: running it again"
    ]
    assert records[pre.hash()]["status"] == "queued" and records[pre.hash()]["earlier"][0]["metrics"] == {
        "val_mae": 0.7
    }


@pytest.mark.e2e
def test_the_worker_trains_a_done_run_again_when_its_model_is_gone(tmp_path: Path) -> None:
    out = tmp_path / "run"
    spec = _spec_file(tmp_path, epochs=1)
    assert _worker(spec, out).returncode == 0
    assert _worker(spec, out).returncode == 0  # done and whole: nothing to do
    assert [e["event"] for e in read_events(out / "events.jsonl")[0]].count("start") == 1
    for name in ("checkpoint.pt", "checkpoint.prev.pt"):  # what a GAPE run embeds with
        (out / name).unlink(missing_ok=True)
    res = _worker(spec, out)
    assert res.returncode == 0, res.stderr
    events = read_events(out / "events.jsonl")[0]
    assert [e["event"] for e in events].count("start") == 2 and events[-1]["event"] == "done"
    assert (out / "checkpoint.pt").exists() and json.loads((out / "result.json").read_text())["status"] == "done"


# ------------------------------------------------------------------------------------ records found in the wild


def _garbled_history(tmp_path: Path) -> tuple[Path, list[str]]:
    """A history of two good alignment runs and four records garbled as a user meets them; returns the workspace
    and the ids of the garbled ones."""

    good = [rec("gcn", 0.1, 0.6, seed=s) for s in (0, 1)] + [rec("gin", 0.1, 0.7, seed=s) for s in (0, 1)]
    no_axes = {k: v for k, v in rec("ghostnet", 0.1, 0.9).items() if k != "axes"}
    listed = {**rec("ghostnet", 0.1, 0.9), "metrics": [0.9]}
    text = {**rec("ghostnet", 0.1, 0.9), "metrics": "0.9"}
    alien = {**rec("ghostnet", 0.1, 0.9), "task": "notinstalled"}
    bad = [no_axes, listed, text, alien]
    runs = {str(i + 1): {**r, "run_dir": f"runs/{r['id']}"} for i, r in enumerate(good + bad)}
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "history.json").write_text(json.dumps({"meta": {"1": {"schema": 2}}, "runs": runs}))
    return ws, [r["id"] for r in bad]


@pytest.mark.e2e
@pytest.mark.parametrize(
    "command",
    [
        ["table"],
        ["table", "--format", "csv"],
        ["stats"],
        ["gap"],
        ["report", "--out", "{tmp}/report"],
        ["figures", "--out", "{tmp}/figures"],
        ["export", "--out", "{tmp}/export"],
    ],
)
def test_garbled_records_are_named_once_left_out_and_left_alone(tmp_path: Path, command: list[str]) -> None:
    ws, bad = _garbled_history(tmp_path)
    before = (ws / "history.json").read_bytes()
    result = run_cli(*[c.format(tmp=tmp_path) for c in command], "-w", str(ws))
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    for run in bad:
        assert sum(run in line for line in warnings) == 1, (run, warnings)
    assert any("not installed" in line for line in warnings)
    assert any("metrics is list" in line for line in warnings)
    assert any("axes lack" in line for line in warnings)
    assert (ws / "history.json").read_bytes() == before
    if command[0] == "table":
        # only the good runs' rows; no blank row, no blank column marked best
        assert "ghostnet" not in result.stdout and "gcn" in result.stdout and "gin" in result.stdout
    if command[0] == "report":
        markdown = (tmp_path / "report" / "report.md").read_text()
        assert "ghostnet" not in markdown and "gin" in markdown


@pytest.mark.e2e
def test_history_and_show_list_garbled_records_without_a_traceback(tmp_path: Path) -> None:
    ws, bad = _garbled_history(tmp_path)
    listed = run_cli("history", "-w", str(ws), env={"COLUMNS": "300"})
    assert listed.returncode == 0 and "Traceback" not in listed.stderr, listed.stderr
    for run in bad:  # shown as it is, or (a field show reads is unusable) named in one error line
        shown = run_cli("show", run, "-w", str(ws))
        assert "Traceback" not in shown.stderr + shown.stdout, shown.stderr
        if shown.returncode != 0:
            lines = shown.stderr.strip().splitlines()
            assert shown.returncode == 2 and len(lines) == 1, lines
            assert lines[0].startswith(f"error: history record {run} left out: "), lines
