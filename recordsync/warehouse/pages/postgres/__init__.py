"""PostgreSQL's page writing: one ``COPY`` of a page's staged rows (``copy``), in CSV for a
snapshot page msgspec can encode (``copy_csv``), in text otherwise (``copy_text``)."""
