"""``python -m recordsync`` is the ``recordsync`` command."""

import sys

from recordsync.cli import main

sys.exit(main())
