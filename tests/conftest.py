"""Shared pytest fixtures."""

from __future__ import annotations

import os
from pathlib import Path

# Before torch is imported (as the nepcore CLI does): idle OpenMP threads sleep, not spin.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# inductor compiles its C++ kernels in two worker processes: the tests run one at a time, so on
# the 2-core CI machine the second core is otherwise idle during a cold compile (the compile
# tests of test_model_compile.py took 643 s with one worker, 481 s with two, one run after the other)
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", str(min(2, os.cpu_count() or 1)))

import pytest


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
