"""Artifact stores: one protocol (``base.ArtifactStore``), two backends (S3-compatible, local dir)."""
