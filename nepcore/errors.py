"""The base of every error nepcore reports to a user.

Every error that comes from bad input (a file, a config value, a flag) or from a state the
user can act on (a stale checkpoint, a diverged run) is a :class:`NepcoreError`. The command
line catches it once per command and prints its message, exit status 1; anything else is a
bug and keeps its traceback.
"""


class NepcoreError(Exception):
    """A user-facing error: its message names the file, the frame or the setting at fault."""


class SettingError(NepcoreError, ValueError):
    """A setting (command-line option, config value, argument) out of its range, or a
    combination of settings that cannot work. The command line reports it as a usage error
    (exit status 2), as argparse does for the options it checks itself."""
