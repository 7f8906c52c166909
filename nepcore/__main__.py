"""``python -m nepcore`` is the same as the ``nepcore`` command."""

import sys

from nepcore.cli import main

sys.exit(main())
