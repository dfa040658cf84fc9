"""The sync: what to read from the platform and what to commit with which cursor.

``SyncEngine`` runs the anchor, the snapshot windows and the change tail as one code path for
the daemon (``run``) and the one-shot range backfill (``backfill``); see ``engine`` for the
shape (spec, Records endpoints, "Rebuild without gaps") and the module beside it for each
part: ``anchor``, ``snapshot``, ``tail``, ``drift_check``, ``catalogue`` (the game catalogue)
and the job runner ``jobs``.  The
pure decisions live apart (``plan``, ``drift``), as do the retry of failed steps
(``resilience``) and the progress reports (``events``).  The sync reaches the platform client
and the warehouse only through the Protocols in ``ports``.

No facade: each module is imported by its own name (``from recordsync.sync.<module> import
...``), so that importing one part never loads the rest.
"""
