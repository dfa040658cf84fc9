"""``python -m recordsync.sim``: serve a simulator until SIGTERM or Ctrl-C."""

from recordsync.sim.cli import main

raise SystemExit(main())
