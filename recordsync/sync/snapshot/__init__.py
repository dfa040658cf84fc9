"""The snapshot: a range of ``records`` read in windows by several workers, every page committed
with its window's cursor.  ``job`` plans a job and runs its workers; ``pending_windows`` is the
plan they share (who reads which window, the cuts and carries); ``chain`` reads one window's
cursor chain.
"""
