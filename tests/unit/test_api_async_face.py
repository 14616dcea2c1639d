"""The API has one face, async (issue 48): its routes await the queue and the key's authorization, never
call a blocking queue on a thread; ``Authenticator`` has one entry point; no router imports another.
Read from the source with ``ast``, so a blocking call added to any route fails here."""

from __future__ import annotations

import ast
import dataclasses
import inspect
from pathlib import Path

from api.auth import Authenticator
from api.context import ApiContext
from api.limits import AsyncRedisLimiter, MemoryLimiter, RedisLimiter

ROOT = Path(__file__).resolve().parents[2]
_CTX = ("ctx", "self.ctx")  # how the API's code names its ``ApiContext``


def _parents(tree: ast.AST) -> dict[ast.AST, ast.AST]:
    return {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


def unawaited_queue_calls(source: str) -> list[str]:
    """Each ``ctx.queue.<call>(...)`` (or ``self.ctx.queue``) in ``source`` that is not awaited."""
    tree = ast.parse(source)
    parents = _parents(tree)
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        owner = node.func.value
        on_queue = isinstance(owner, ast.Attribute) and owner.attr == "queue" and ast.unparse(owner.value) in _CTX
        if on_queue and not isinstance(parents.get(node), ast.Await):
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def test_every_queue_call_of_the_api_is_awaited() -> None:
    calls = {
        str(path.relative_to(ROOT)): found
        for path in sorted((ROOT / "api").rglob("*.py"))
        if (found := unawaited_queue_calls(path.read_text(encoding="utf-8")))
    }
    assert not calls, f"blocking queue calls in the API (await ctx.queue instead): {calls}"


def test_the_check_catches_a_blocking_call() -> None:
    blocking = "def route(ctx):\n    return ctx.queue.get('gen_1')\n"
    awaited = "async def route(ctx):\n    return await ctx.queue.get('gen_1')\n"
    assert unawaited_queue_calls(blocking) == ["line 2: ctx.queue.get('gen_1')"]
    assert unawaited_queue_calls(awaited) == []


def test_the_context_holds_one_queue() -> None:
    fields = {f.name: f.type for f in dataclasses.fields(ApiContext)}
    queues = {name: kind for name, kind in fields.items() if "Queue" in str(kind)}
    assert queues == {"queue": "AsyncApiQueue"}


def test_the_authenticator_has_one_entry_point_and_the_limiters_one_protocol() -> None:
    public = {name for name, _ in inspect.getmembers(Authenticator, inspect.isfunction) if not name.startswith("_")}
    assert public == {"authorize", "still_valid", "close"}  # still_valid spends no rate limit: a stream's check
    assert inspect.iscoroutinefunction(Authenticator.authorize)
    for limiter in (MemoryLimiter, RedisLimiter, AsyncRedisLimiter):
        assert inspect.iscoroutinefunction(limiter.hit) and inspect.iscoroutinefunction(limiter.aclose)


def test_no_router_imports_another() -> None:
    for path in sorted((ROOT / "api" / "routes").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
        siblings = {name for name in imported if name.startswith("api.routes")}
        assert not siblings, f"{path.name} imports a sibling router: {siblings}"
