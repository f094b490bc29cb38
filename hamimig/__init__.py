"""hamimig: administer HAMi's dynamic MIG instance lifecycle on a GPU node."""

__version__ = "0.1.0"
