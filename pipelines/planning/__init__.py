"""GPU planning from the real architecture configs: the memory plan (which sizes fit a device) and the
FLOPs of denoising (MFU)."""
