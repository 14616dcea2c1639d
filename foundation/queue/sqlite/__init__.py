"""The embedded SQLite backend of the queue (``backend.SqliteQueue``): one file, safe for the threads and
processes of one machine."""
