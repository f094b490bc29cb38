"""The hardware seam: what the lifecycle needs from NVML, and nothing more."""
