"""The fields the platform added to records: where they were seen, and the ones promoted to
columns (``sightings``, ``promoted``, ``promotion``)."""
