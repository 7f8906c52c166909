"""Shared pytest fixtures."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

#: The cores this process may run on (its CPU affinity, e.g. a SLURM or taskset allocation; all of
#: os.cpu_count() where the platform has no affinity).
CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1

# Before torch is imported (as the nepcore CLI does): idle OpenMP threads sleep, not spin.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# inductor compiles its C++ kernels in two worker processes: a cold compile is minutes of mostly
# serial work, and the second process uses a core that would otherwise wait (the compile tests of
# test_model_compile.py took 643 s with one worker, 481 s with two, one run after the other, in a
# serial pytest run)
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", str(min(2, CORES)))
# pytest-xdist (`-n auto`, the README's test command): the workers share the cores, so each worker
# and the commands it starts get their share of OpenMP threads instead of one thread per core each
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _WORKERS > 1:
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, CORES // _WORKERS)))


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist's: unknown to pytest without it
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: one worker per core, at most 4 (each holds torch and, in a compile test, a
    compiled graph: about 2-3 GB; more workers gain little, the compile chain takes minutes)."""
    return max(1, min(4, CORES))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests that take a minute or more (``heavy``, and the compile chains of an
    ``xdist_group``) first, in their order: under pytest-xdist a worker that started one last
    would finish alone, minutes after the other."""
    items.sort(key=lambda item: not any(item.get_closest_marker(name) for name in ("heavy", "xdist_group")))


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The team's reference data folder ``../shared/data`` (relative to the repository root).

    Skips the test where it is absent: a user's clone does not have it.
    """
    path = Path(__file__).resolve().parents[1].parent / "shared" / "data"
    if not path.is_dir():
        pytest.skip("reference data ../shared/data is absent (only present on the team machines)")
    return path


@pytest.fixture
def one_thread():
    """torch on one thread for the test (restored after). Many small calls gain nothing from
    threads; on a loaded 2-core machine libgomp's spinning barriers made such a test take 1 to
    15 s with two."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def labelled_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One converted dataset for the whole test run: 5 train, 2 valid, 3 test EMT-labelled
    Cu-Pd-Ni frames (see helpers.structures.write_labelled_dataset). Read it, never change it."""
    from helpers.structures import write_labelled_dataset

    return write_labelled_dataset(tmp_path_factory.mktemp("labelled_dataset"))


@pytest.fixture(scope="session", autouse=True)
def compile_cache(tmp_path_factory) -> Path:
    """One compile cache for the session's tests and their subprocesses, not the user's.

    A NEPCORE_COMPILE_CACHE set by the caller is kept (warm reruns while developing).
    """
    if "NEPCORE_COMPILE_CACHE" in os.environ:
        yield Path(os.environ["NEPCORE_COMPILE_CACHE"])
        return
    folder = tmp_path_factory.mktemp("inductor")
    os.environ["NEPCORE_COMPILE_CACHE"] = str(folder)
    yield folder
    del os.environ["NEPCORE_COMPILE_CACHE"]
