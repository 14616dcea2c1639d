"""Routers, one module per resource: each a module-level ``router`` whose routes declare their
dependencies (``Depends(context)`` for the app's ``ApiContext``)."""
