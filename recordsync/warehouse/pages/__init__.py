"""Writing a page: its rows, history and quarantine with the cursor that covers them, in one
transaction (``commits``), staged once (``staging``, ``writer``) and sent the way each backend
takes it best (``postgres/``, ``mariadb``, ``sqlite``), under the revision guard (``upsert``)."""
