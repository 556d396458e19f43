"""A run's duration is summed over its parts: each attempt it resumed from, plus the last one."""

from __future__ import annotations

import json
import os
from pathlib import Path

from gaptui.durations import earlier_parts_seconds, run_seconds


def _attempt(start: float, end: float, resumed: bool, last: str) -> list[dict]:
    """Events of one attempt: its start, an epoch a second before its end, and its final event."""
    resumed_from = {"epoch": 14, "batch": 0, "step": 140} if resumed else None
    return [
        {"v": 1, "event": "start", "t": start, "resumed_from": resumed_from},
        {"v": 1, "event": "epoch", "epoch": 1, "t": end - 1.0, "seconds": 2.0},
        {"v": 1, "event": last, "t": end},
    ]


def _run_dir(tmp_path: Path, events: list[dict], result_at: float | None) -> Path:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    if result_at is not None:
        (run_dir / "result.json").write_text(json.dumps({"status": "done"}))
        os.utime(run_dir / "result.json", (result_at, result_at))
    return run_dir


def test_a_run_resumed_twice_counts_all_three_parts(tmp_path: Path) -> None:
    # 27 min until a cancel, 5 min until an interruption (killed: no final event), then 585 s to the end
    events = (
        _attempt(1000.0, 1000.0 + 27 * 60, False, "cancelled")
        + _attempt(3000.0, 3300.0, True, "epoch")
        + _attempt(5000.0, 5585.0, True, "done")
    )
    run_dir = _run_dir(tmp_path, events, result_at=5585.0)
    assert earlier_parts_seconds(events, since=4998.0) == 27 * 60 + 300
    seconds = run_seconds(run_dir, 4998.0, False, {"status": "done"}, None)
    assert seconds == 587.0 + 27 * 60 + 300  # the last part from its worker's spawn, two seconds before its start


def test_a_fresh_start_counts_only_itself_and_a_pack_run_its_own_epochs(tmp_path: Path) -> None:
    events = _attempt(1000.0, 1500.0, False, "cancelled") + _attempt(2000.0, 2100.0, False, "done")
    run_dir = _run_dir(tmp_path, events, result_at=2100.0)
    assert earlier_parts_seconds(events, since=2000.0) == 0.0  # started afresh: the earlier part is not its work
    assert run_seconds(run_dir, 2000.0, False, {"status": "done"}, None) == 100.0
    resumed = _attempt(1000.0, 1500.0, False, "cancelled") + _attempt(2000.0, 2100.0, True, "done")
    (run_dir / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in resumed))
    # a run of a pack: its own epochs of this attempt (2 s), plus the part it resumed from
    assert run_seconds(run_dir, 2000.0, True, {"status": "done"}, None) == 2.0 + 500.0


def test_an_attempt_that_stopped_before_its_start_event_resumes_nothing(tmp_path: Path) -> None:
    events = [*_attempt(1000.0, 1500.0, False, "cancelled"), {"v": 1, "event": "error", "t": 2001.0}]
    assert earlier_parts_seconds(events, since=2000.0) == 0.0
    run_dir = _run_dir(tmp_path, events, result_at=None)
    assert run_seconds(run_dir, 2000.0, False, {}, None) == 1.0


def test_the_next_attempt_preparing_is_not_counted_in_the_part_before_it(tmp_path: Path) -> None:
    # a worker says it prepares (reads its data, builds its model) before its start event: that is the next part's
    preparing = [{"v": 1, "event": "progress", "t": t, "phase": "preparing"} for t in (2990.0, 2999.0)]
    events = _attempt(1000.0, 1100.0, False, "cancelled") + preparing + _attempt(3000.0, 3050.0, True, "cancelled")
    assert earlier_parts_seconds(events, since=2985.0) == 100.0
