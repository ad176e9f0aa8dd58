"""Errors of the index layer: each says what was wrong and what to do."""


class IngestError(Exception):
    """A document (or one of its pages) cannot be ingested; the message is one line for the user."""


class StoreError(Exception):
    """The store cannot serve the request (missing, locked, or built by an incompatible encoder)."""
