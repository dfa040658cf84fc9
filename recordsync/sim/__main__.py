"""``python -m recordsync.sim``: serve a simulator until SIGTERM or Ctrl-C.

Only here, in a process of its own, is the GIL's switch interval shortened: the handler threads
render pages in pure Python while holding the GIL, and a thread that has just received a
request waits for it before it can stamp the arrival.  Python's default 5 ms switch interval
lets that wait reach tens of milliseconds with a few pages in flight, arrival jitter that a real
platform's front door would not add to what the rate limit counts; 1 ms keeps it to a few.
"""

import sys

from recordsync.sim.cli import main

sys.setswitchinterval(0.001)
raise SystemExit(main())
