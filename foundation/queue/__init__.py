"""Job queue: one protocol (``base.JobQueue``), two backends (Redis Streams, SQLite)."""
