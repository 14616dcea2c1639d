"""The bottom layer: the vocabulary every other layer shares, importing nothing of ours.

``contract`` (requests, records, statuses and transitions), ``errors`` (codes and the exception tree),
``catalog`` (models.yaml, validated at load), ``resolve`` (request + catalog -> job and price),
``sizes`` (the resolution table), ``media`` (``Media``/``AudioTrack``/``StepCallback``: what a model hands
the encoder).
"""
