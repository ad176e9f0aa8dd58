"""`docrefrag serve`: the HTTP API and web page of docrefrag.server on uvicorn, over one store.

Binds 127.0.0.1 by default; another address is refused without a bearer token (--token or
$DOCREFRAG_TOKEN, which keeps it out of the process list).
"""

from __future__ import annotations

import argparse
import os
import sys

from docrefrag.cli_common import EXIT_OK, check_llm_args


def cmd_serve(args: argparse.Namespace) -> int:
    from docrefrag.server.security import check_binding

    token = args.token or os.environ.get("DOCREFRAG_TOKEN") or None
    check_binding(args.host, token)
    check_llm_args(args)
    if not 0 < args.port < 65536:
        raise ValueError(f"--port must be in 1..65535, got {args.port}")
    if args.workers is not None and args.workers < 1:
        raise ValueError(f"--workers must be >= 1, got {args.workers}")
    import uvicorn

    from docrefrag.api import default_store
    from docrefrag.graph.context import AskConfig
    from docrefrag.server import create_app

    store = args.store or default_store()
    config = AskConfig.from_file(args.config) if args.config else None
    app = create_app(store, token=token, max_upload_mb=args.max_upload_mb, llm=args.llm, config=config,
                     qdrant_url=args.qdrant_url, workers=args.workers, llm_timeout=args.llm_timeout,
                     llm_retries=args.llm_retries)
    host = f"[{args.host}]" if ":" in args.host else args.host
    print(f"docrefrag: serving the store {store} at http://{host}:{args.port}/ (API: /docs"
          f"{'; bearer token required' if token else ''}); Ctrl-C stops", file=sys.stderr)
    uvicorn.run(app, host=args.host, port=args.port, log_level="info" if args.verbose else "warning")
    return EXIT_OK
