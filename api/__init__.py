"""The HTTP tier: the public contract over the queue, the artifact store and the catalog.

It imports ``foundation`` (core, queue, stores, settings); never the daemon and never a model
(``pipelines``): the API runs no model and talks to workers only through the queue.
"""
