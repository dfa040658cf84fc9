"""Everything that speaks to the platform's API, and nothing else does.

The signed client (``client``), the request signature (``signing``), the shared record rate
budget (``budget``), the retry policy (``retry``), the envelope and error decoding
(``envelope``) and the wire parsing of records, changes and capabilities (``parsing``).  It
knows the core only: never the warehouse, the sync or the service.

No facade: each module is imported by its own name (``from recordsync.platform.<module> import
...``), so that importing one part never loads the rest.
"""
