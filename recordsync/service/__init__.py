"""What makes a process out of the parts: the commands' bodies, the daemon's lease terms, the
health and metrics server, the progress display, signals and logging setup.

It builds the platform client, the warehouse and the sync engine from the settings and runs
them; the CLI only parses and calls in here.
"""

__all__: list[str] = []
