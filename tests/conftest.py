"""Shared pytest fixtures."""

from __future__ import annotations

from pathlib import Path

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
