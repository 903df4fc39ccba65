"""Source snapshots: the raw source topic kept in a Delta Lake table (see ``table``).

Only the name of the setting lives here, so that the composition root can read it
without importing ``deltalake``.
"""

URI_ENV = "AMENDS_SNAPSHOT_URI"
