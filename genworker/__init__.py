"""The root: the ``genworker`` command tree (``cli``) and the embedded service (``embedded``), the only
code that may import every layer: core, backends, models, settings, the daemon, the API and the client.
"""
