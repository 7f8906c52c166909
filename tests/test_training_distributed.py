"""Leaving the process group: the order of the collective calls (no processes needed)."""

from __future__ import annotations

import pytest

import nepcore.training.distributed as distributed_module
from nepcore.training.distributed import Distributed


@pytest.fixture
def calls(monkeypatch) -> list[str]:
    """Record the calls close() makes, in order, with an initialised fake process group."""
    seen: list[str] = []
    monkeypatch.setattr(distributed_module.dist, "is_initialized", lambda: True)
    monkeypatch.setattr(distributed_module.dist, "barrier", lambda: seen.append("barrier"))
    monkeypatch.setattr(distributed_module.dist, "destroy_process_group", lambda: seen.append("destroy"))
    monkeypatch.setattr(distributed_module.gc, "collect", lambda: seen.append("collect") or 0)
    return seen


def test_a_finished_process_waits_for_the_others_before_leaving(calls):
    Distributed(rank=1, world=2).close(finished=True)
    assert calls == ["collect", "barrier", "destroy"]


def test_a_failed_process_leaves_without_waiting(calls):
    # the other processes may never reach a barrier: waiting there would hang the job
    Distributed(rank=0, world=2).close(finished=False)
    assert calls == ["collect", "destroy"]


def test_one_process_has_no_group_to_leave(calls):
    Distributed().close(finished=True)
    assert calls == []
