"""Pod sources and the HAMi allocation annotation codec."""
