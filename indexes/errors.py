"""Errors of the index layer: each says what was wrong and what to do."""


class IngestError(Exception):
    """A document (or one of its pages) cannot be ingested; the message is one line for the user."""


class StoreError(Exception):
    """The store cannot serve the request (missing, locked, or built by an incompatible encoder)."""


class UnknownDocumentError(StoreError):
    """The store has no document by the id or name asked for (an HTTP 404, where the others are a 409)."""


class EncoderError(Exception):
    """The page encoder cannot be built (e.g. its weights are missing); aborts the whole ingest."""
