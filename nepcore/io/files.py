"""Lists of input files: glob patterns -> paths, the one rule for ``nepcore convert`` and the workflow."""

from __future__ import annotations

import glob
from collections.abc import Sequence

from nepcore.errors import NepcoreError


class NoFileMatchesError(NepcoreError, ValueError):
    """A glob pattern that matches no file (``pattern`` names it)."""

    def __init__(self, pattern: str) -> None:
        super().__init__(f"{pattern!r} matches no file")
        self.pattern = pattern


def expand_patterns(patterns: Sequence[str]) -> list[str]:
    """The paths that ``patterns`` name, each once.

    A pattern with glob characters (``*?[``) gives its matches, sorted; one that matches nothing
    is an error. A pattern without them is kept as it is, so a missing file is reported by
    whoever opens it (the reader, or Snakemake as a missing input). Patterns keep the order
    given; a path named twice (by two patterns, or a pattern and a plain name) is kept at its
    first place only.

    Args:
        patterns: file names or glob patterns.

    Returns:
        The paths, in order, without repeats.

    Raises:
        NoFileMatchesError: a glob pattern matches no file.
    """
    paths: list[str] = []
    seen: set[str] = set()
    for pattern in patterns:
        if glob.has_magic(pattern):
            matches = sorted(glob.glob(pattern))
            if not matches:
                raise NoFileMatchesError(pattern)
        else:
            matches = [pattern]
        for path in matches:
            if path not in seen:
                seen.add(path)
                paths.append(path)
    return paths
