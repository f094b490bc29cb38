"""Rehearsing the lifecycle on a simulated node: the `sim` commands that build and break one
(GPUs, instances, busy processes, injected faults) and the narrated `demo` that runs every
lifecycle step on one. Beside the operator reports, above the core: the core never asks them
(docs/design.md "Layers")."""
