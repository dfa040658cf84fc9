"""The commands an operator runs once (backfill, verify, status, report, demo, migrate and the
``merchant`` controls), and what they share: one merchant's parts (``merchant_command``),
holding the lease or handing the work to the holder (``handover``), the progress display and
the consoles.  Nothing here is the daemon's: a command reaches a running daemon only through
the warehouse.
"""
