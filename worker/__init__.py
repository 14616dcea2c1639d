"""genworker's worker package: the job contract, catalog, queue, stores, encoder and daemon."""
