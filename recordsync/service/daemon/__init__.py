"""``recordsync run``: the daemon (``run``), the merchants it holds (``merchant_syncs``), the work
commands hand to it (``requested_work``) and its metric and log adapters.  Nothing here is a
command's: the daemon answers a command only through the warehouse.
"""
