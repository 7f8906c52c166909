"""The base of every error nepcore reports to a user.

Every error that comes from bad input (a file, a config value, a flag) or from a state the
user can act on (a stale checkpoint, a diverged run) is a :class:`NepcoreError`. The command
line catches it once per command and prints its message, exit status 1; anything else is a
bug and keeps its traceback.
"""

from __future__ import annotations

import contextlib
import errno as _errno
import os
from collections.abc import Iterator


class NepcoreError(Exception):
    """A user-facing error: its message names the file, the frame or the setting at fault."""


class SettingError(NepcoreError, ValueError):
    """A setting (command-line option, config value, argument) out of its range, or a
    combination of settings that cannot work. The command line reports it as a usage error
    (exit status 2), as argparse does for the options it checks itself."""


#: Plain words for the reasons a write fails, by errno (the rest use the system's wording).
_WRITE_REASONS = {
    _errno.ENOSPC: "disk full (no space left on device, errno ENOSPC)",
    _errno.EDQUOT: "disk quota exceeded (errno EDQUOT)",
    _errno.EACCES: "permission denied (is the folder read-only?)",
    _errno.EPERM: "operation not permitted (is the folder read-only?)",
    _errno.EROFS: "read-only file system",
    _errno.ENOTDIR: "a part of the path is a file, not a folder",
    _errno.EEXIST: "a part of the path is a file, not a folder",  # mkdir(exist_ok=True) under a file
    _errno.EISDIR: "it is a folder",
}


class OutputError(NepcoreError, OSError):
    """An output file or folder that cannot be written: read-only folder, full disk, ...

    ``str(err)`` is ``"cannot write <path>: <reason>"``; ``errno`` and ``path`` are kept.
    """

    def __init__(self, path: str | os.PathLike, reason: str, errno: int | None = None):
        super().__init__(f"cannot write {path}: {reason}")
        self.path, self.reason, self.errno = str(path), reason, errno

    @classmethod
    def from_os_error(cls, path: str | os.PathLike, err: OSError) -> OutputError:
        """The OutputError for ``err`` raised while writing ``path`` (names ``path``, not a
        temporary file, and says "disk full" for ENOSPC)."""
        reason = _WRITE_REASONS.get(err.errno) or err.strerror or str(err) or type(err).__name__
        return cls(path, reason, err.errno)


@contextlib.contextmanager
def writing(path: str | os.PathLike) -> Iterator[None]:
    """Turn an OSError raised inside the block into an :class:`OutputError` naming ``path``.

    Wrap only the code that creates or writes ``path`` (mkdir, temporary file, write, rename),
    so that a missing *input* is never reported as an output problem.
    """
    try:
        yield
    except OutputError:
        raise
    except OSError as err:
        raise OutputError.from_os_error(path, err) from err
