"""The job-state table: every combination decided, the moves allowed, reasons kept."""

from __future__ import annotations

import itertools
import typing

from sonic_hep.workflows.grid.lifecycle import (MOVES, RESOLVE, STATES, BatchState, BatchStatus, Reported, can_move,
                                                resolve)


def test_table_decides_every_combination():
    pairs = set(itertools.product(typing.get_args(Reported), typing.get_args(BatchState)))
    assert set(RESOLVE) == pairs
    assert {state for state, _ in RESOLVE.values()} <= set(STATES)
    assert set(MOVES) == set(STATES)


def test_reports_win_and_silence_after_the_end_is_a_failure():
    assert resolve(False, "none", BatchStatus("ended")) == ("new", "")
    assert resolve(True, "none", BatchStatus("pending", "slurm: Priority")) == ("pending", "slurm: Priority")
    assert resolve(True, "running", BatchStatus("unknown")) == ("running", "")
    assert resolve(True, "running", BatchStatus("ended", "slurm CANCELLED")) == \
        ("failed", "killed: ended without reporting (slurm CANCELLED)")
    assert resolve(True, "none", BatchStatus("ended", "slurm FAILED")) == \
        ("failed", "ended before the job started (slurm FAILED)")
    assert resolve(True, "done", BatchStatus("ended", "slurm CANCELLED")) == ("done", "")
    assert resolve(True, "failed", BatchStatus("running"), "terminated by SIGTERM") == \
        ("failed", "terminated by SIGTERM")


def test_done_is_final_and_only_failures_go_back():
    assert not any(can_move("done", state) for state in STATES)
    assert can_move("failed", "pending") and can_move("new", "pending")
    assert not can_move("running", "pending")
