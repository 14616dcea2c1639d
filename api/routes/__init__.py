"""Routers, one module per resource; each exposes a ``build_router(ctx)`` factory."""
