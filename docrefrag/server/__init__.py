"""`docrefrag serve`: an HTTP API (FastAPI) and one web page over a store, in one process that holds
the store, so that a search or an ask sent during an ingest waits for it instead of failing.

    from docrefrag.server import create_app
    app = create_app("my-store", token=None)   # uvicorn.run(app, host="127.0.0.1", port=8000)

app.py builds the app; worker.py is the store's one thread; uploads.py and jobs.py take uploads in and
ingest them in the background; documents.py and asking.py are the routes; page_images.py serves page
renders with regions boxed; security.py holds the token check and the redaction of secrets.
"""

from docrefrag.server.app import create_app

__all__ = ["create_app"]
