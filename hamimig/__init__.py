"""hamimig: administer HAMi's dynamic MIG instance lifecycle on a GPU node."""

import time

__version__ = "0.1.0"

PROCESS_STARTED: float = time.time()
"""When this process started (epoch seconds), as near as Python can tell.

Taken here because this package is imported before anything else a command does. A pod list piped
to stdin carries no time of its own; the process start is the latest moment the writer can have
produced it, and the earliest honest stamp we can give it without knowing more.
"""
