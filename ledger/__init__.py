"""Evidence ledger: signed, append-only evidence and content-addressed artifacts for backend qualification."""

__version__ = "0.1.0"
__all__ = ["__version__"]
