"""The lifecycle core: requests, states, facts, planning, execution, recovery. The CLI reaches
hardware, files and pods only through it, or through the reports above it (hamimig/reports)."""
