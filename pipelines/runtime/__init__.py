"""The adapter runtime: the ``Adapter`` contract, the registry that loads a catalog entry's adapter, the
model cache, compile, context parallel, prompt extension, resumable denoising, and what every
diffusers-based family does the same way. The families (``pipelines.families``) build on it."""
