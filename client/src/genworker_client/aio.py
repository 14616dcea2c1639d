"""``AsyncClient``: the asyncio twin of ``Client`` (``client.sync``), with the same methods and rules.

Only sending and sleeping differ; bodies, parsing, retry and cadence rules come from the shared pure
modules. Callbacks (``on_created``, ``on_progress``) are plain functions, called inline.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import itertools
import os
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx
from tenacity import AsyncRetrying

from genworker_client import wire
from genworker_client.cadence import PollCadence
from genworker_client.download import CHUNK_BYTES, URL_REFUSED_STATUSES, ArtifactSink, artifact_paths, needs_fresh_url
from genworker_client.errors import ApiError, TransportFailed, WaitTimeout
from genworker_client.events import STREAM_GIVE_UP_STATUSES, SseParser, StreamEvent, StreamFollower
from genworker_client.images import image_input, mode_for
from genworker_client.ledger import KeyLedger, choose_idempotency_key
from genworker_client.models import Artifact, Generation, GenerationPage, Model
from genworker_client.retry import RetryPolicy
from genworker_client.sync import STREAM_READ_TIMEOUT_S, STREAM_RECONNECT_S

__all__ = ["AsyncClient"]


class AsyncClient:
    """An asyncio client for ``{base_url}`` (host + ``/v1``; ``GENWORKER_BASE_URL``), authenticated with
    ``api_key`` (``GENWORKER_API_KEY``).

    ``ledger`` (a ``KeyLedger`` or a path) lets ``create(name=...)`` keep keys across process restarts.
    ``transport``, ``sleep``, ``clock`` and ``rng`` are seams for tests and special setups.
    """

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout_s: float = 30.0,
        retry: RetryPolicy | None = None,
        ledger: KeyLedger | str | os.PathLike[str] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        self.base_url = wire.resolve_base_url(base_url)
        self._api_key = wire.resolve_api_key(api_key)
        self._retry = retry or RetryPolicy()
        self._ledger = ledger if isinstance(ledger, KeyLedger | None) else KeyLedger(ledger)
        self._sleep = sleep
        self._clock = clock
        self._rng = rng or random.Random()
        self._http = httpx.AsyncClient(base_url=self.base_url, timeout=timeout_s, transport=transport)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    # -----------------------------------------------------------------------------------------------
    # Generations

    async def create(
        self,
        model: str,
        prompt: str,
        *,
        mode: str | None = None,
        variant: str = "standard",
        resolution: str | None = None,
        duration_seconds: int | None = None,
        ratio: str | None = None,
        audio: bool | None = None,
        prompt_extend: bool | None = None,
        seed: int | None = None,
        negative_prompt: str | None = None,
        image: str | os.PathLike[str] | None = None,
        idempotency_key: str | None = None,
        name: str | None = None,
        on_created: Callable[[Generation], None] | None = None,
    ) -> Generation:
        """Create one logical generation; retried safely with one Idempotency-Key until it gets an answer.

        The key is ``idempotency_key`` if given; else, with ``name`` and a ledger, the ledger's key for
        that name (written to disk before the request is sent); else a fresh one. It is on the result
        as ``generation.idempotency_key``. ``on_created`` receives the new generation first thing.

        ``image`` (``image_to_video``): a URL the service fetches, or a local file sent inline as a data URI
        (``genworker_client.images``). ``mode`` defaults to ``image_to_video`` with an image, else ``text_to_video``.
        """
        fields = await asyncio.to_thread(image_input, image) if image is not None else None  # may read a file
        body = wire.create_body(
            model, prompt, mode=mode_for(mode, image), variant=variant, resolution=resolution,
            duration_seconds=duration_seconds, ratio=ratio, audio=audio, prompt_extend=prompt_extend, seed=seed,
            negative_prompt=negative_prompt, image=fields,
        )  # fmt: skip
        entry = choose_idempotency_key(body, idempotency_key=idempotency_key, name=name, ledger=self._ledger)
        if entry.id is not None:
            # An earlier run created it. Re-sending could create a duplicate once the server has
            # forgotten the key (it keeps keys for a limited time), so read it instead.
            generation = wire.as_replay(await self.get(entry.id), entry.idempotency_key)
        else:
            response = await self._request("POST", "generations", json=body, idempotency_key=entry.idempotency_key)
            generation = wire.generation_from_response(response, idempotency_key=entry.idempotency_key)
        if on_created is not None:
            on_created(generation)
        if name is not None and self._ledger is not None:
            self._ledger.record_id(name, generation.id)
        return generation

    async def get(self, generation_id: str) -> Generation:
        return wire.generation_from_response(await self._request("GET", f"generations/{generation_id}"))

    async def cancel(self, generation_id: str) -> Generation:
        """Ask for cancellation; the record that comes back may still be ``running`` for up to one step.
        ``ApiError`` with code ``not_cancelable`` when the generation is already terminal."""
        try:
            response = await self._request("POST", f"generations/{generation_id}/cancel")
        except ApiError as e:
            # A retry after a lost answer finds the generation canceled by our own first attempt.
            if e.code == "not_cancelable" and e.attempts > 1:
                current = await self.get(generation_id)
                if current.status == "canceled":
                    return current
            raise
        return wire.generation_from_response(response)

    async def list(self, *, limit: int | None = None, cursor: str | None = None) -> GenerationPage:
        """One page of this project's generations, newest first."""
        params = {k: v for k, v in {"limit": limit, "cursor": cursor}.items() if v is not None}
        return wire.page_from_response(await self._request("GET", "generations", params=params))

    async def models(self) -> builtins.list[Model]:
        return wire.models_from_response(await self._request("GET", "models"))

    async def wait(
        self,
        generation: str | Generation,
        *,
        timeout_s: float,
        on_progress: Callable[[Generation], None] | None = None,
        first_poll_s: float = 5.0,
        poll_min_s: float = 10.0,
        poll_max_s: float = 15.0,
        stream: bool = True,
        on_event: Callable[[StreamEvent], None] | None = None,
    ) -> Generation:
        """Wait until terminal and return the final record: ``Client.wait``, the same stream first and
        polling fallback (``stream``, ``on_event``), the same cadence and timeout."""
        cadence = PollCadence(first_poll_s, poll_min_s, poll_max_s)
        last = generation if isinstance(generation, Generation) else None
        generation_id = generation.id if isinstance(generation, Generation) else generation
        if last is not None and last.terminal:
            return last
        deadline = self._clock() + timeout_s
        if stream and await self._follow(generation_id, deadline, timeout_s, on_event, last):
            final = await self.get(generation_id)
            if on_progress is not None:
                on_progress(final)
            if final.terminal:
                return final
        for poll_index in itertools.count():
            remaining = deadline - self._clock()
            if remaining <= 0:
                raise WaitTimeout(generation_id, timeout_s, last)
            hint = last.retry_after_s if last is not None else None
            await self._sleep(min(cadence.delay_s(poll_index, retry_after_s=hint, rng=self._rng), remaining))
            last = await self.get(generation_id)
            if on_progress is not None:
                on_progress(last)
            if last.terminal:
                return last
        raise AssertionError("unreachable")

    async def events(self, generation_id: str, *, last_event_id: str | None = None) -> AsyncIterator[StreamEvent]:
        """``Client.events``: the live events until the terminal status, over one connection."""
        follower = StreamFollower(last_id=last_event_id)
        async with self._open_stream(generation_id, follower, read_timeout_s=None) as response:
            if not response.is_success:
                await response.aread()
                raise wire.error_from_response(response)
            async for event in self._read_stream(response, follower):
                yield event

    async def _follow(
        self,
        generation_id: str,
        deadline: float,
        timeout_s: float,
        on_event: Callable[[StreamEvent], None] | None,
        last: Generation | None,
    ) -> bool:
        """``wait``'s streaming half: True once the terminal event came, False to poll instead."""
        follower = StreamFollower()
        while follower.terminal is None:
            remaining = deadline - self._clock()
            if remaining <= 0:
                raise WaitTimeout(generation_id, timeout_s, last, last_status=follower.status)
            read_timeout_s = min(remaining, STREAM_READ_TIMEOUT_S)
            try:
                async with self._open_stream(generation_id, follower, read_timeout_s=read_timeout_s) as r:
                    if r.status_code in STREAM_GIVE_UP_STATUSES:
                        return False
                    if not r.is_success:
                        await r.aread()
                        raise wire.error_from_response(r)
                    async for event in self._read_stream(r, follower):
                        if on_event is not None:
                            on_event(event)
                        if self._clock() >= deadline and not event.terminal:
                            raise WaitTimeout(generation_id, timeout_s, last, last_status=follower.status)
            except (httpx.TransportError, TransportFailed):
                pass  # a dropped or stalled connection: resume from the last id, or poll
            if follower.terminal is None:
                if not follower.connection_ended():
                    return False
                await self._sleep(max(0.0, min(STREAM_RECONNECT_S, deadline - self._clock())))
        return True

    @contextlib.asynccontextmanager
    async def _open_stream(
        self, generation_id: str, follower: StreamFollower, *, read_timeout_s: float | None
    ) -> AsyncIterator[httpx.Response]:
        headers = {**wire.api_headers(self._api_key, None), **follower.headers()}
        timeout = httpx.Timeout(self._http.timeout.connect, read=read_timeout_s)
        path = f"generations/{generation_id}/events"
        request = self._http.build_request("GET", path, headers=headers, timeout=timeout)
        try:
            response = await self._http.send(request, stream=True)
        except wire.RETRYABLE_TRANSPORT_ERRORS as e:
            raise TransportFailed("GET", f"{self.base_url}/{path}", 1) from e
        try:
            yield response
        finally:
            await response.aclose()

    async def _read_stream(self, response: httpx.Response, follower: StreamFollower) -> AsyncIterator[StreamEvent]:
        parser = SseParser()
        async for line in response.aiter_lines():
            event = parser.feed(line)
            if event is not None:
                follower.seen(event)
                yield event
                if event.terminal:
                    return

    async def download(self, generation: str | Generation, directory: str | os.PathLike[str]) -> builtins.list[Path]:
        """Stream every artifact into ``directory`` and return the paths, in the record's order.

        Each file is checked against the record's ``bytes`` and ``sha256`` (``IntegrityError``). An
        expired or refused URL makes the client re-fetch the generation once per artifact for a fresh one.
        """
        current = generation if isinstance(generation, Generation) else await self.get(generation)
        if not current.succeeded:
            raise ValueError(f"generation {current.id} is {current.status}; only succeeded ones have artifacts")
        paths = artifact_paths(current, Path(directory))
        for index, dest in enumerate(paths):
            current = await self._download_artifact(current, index, dest)
        return paths

    # -----------------------------------------------------------------------------------------------
    # Transport

    def _retrying(self) -> AsyncRetrying:
        """This client's retry loop: its policy, rng and sleep (tenacity, see ``retry.py``)."""
        return self._retry.async_retrying(rng=self._rng, sleep=self._sleep)

    async def _request(
        self,
        method: str,
        path: str,
        *,
        json: dict[str, Any] | None = None,
        params: dict[str, Any] | None = None,
        idempotency_key: str | None = None,
    ) -> httpx.Response:
        """Send with retries (same headers, same key each time); return a 2xx answer or raise."""
        headers = wire.api_headers(self._api_key, idempotency_key)
        async for attempt in self._retrying():
            with attempt:
                tries = attempt.retry_state.attempt_number
                try:
                    response = await self._http.request(method, path, json=json, params=params, headers=headers)
                except wire.RETRYABLE_TRANSPORT_ERRORS as e:
                    raise TransportFailed(method, f"{self.base_url}/{path}", tries) from e
                if response.is_success:
                    return response
                error = wire.error_from_response(response)
                error.attempts = tries
                raise error
        raise AssertionError("unreachable")  # the loop returns or raises

    async def _download_artifact(self, generation: Generation, index: int, dest: Path) -> Generation:
        """Fetch one artifact; returns the generation whose URLs were used (re-fetched or not)."""
        refreshed = False
        while True:
            artifact = generation.artifacts[index]
            if not needs_fresh_url(artifact) or refreshed:
                refused = await self._fetch_to_file(artifact, dest)
                if refused is None:
                    return generation
                if refreshed:
                    raise refused
            generation = await self.get(generation.id)
            refreshed = True
            if index >= len(generation.artifacts) or generation.artifacts[index].kind != artifact.kind:
                raise ApiError(200, "invalid_response", f"generation {generation.id} changed its artifacts")

    async def _fetch_to_file(self, artifact: Artifact, dest: Path) -> ApiError | None:
        """Stream one signed URL to ``dest``. Returns the refusal when the URL no longer works."""
        if artifact.download_url is None:
            return ApiError(200, "invalid_response", "artifact has no download_url")
        url = self._http.base_url.join(artifact.download_url)
        async for attempt in self._retrying():
            with attempt:
                try:
                    async with self._http.stream("GET", url) as response:
                        if response.is_success:
                            with ArtifactSink(dest, artifact) as sink:
                                async for chunk in response.aiter_bytes(CHUNK_BYTES):
                                    sink.write(chunk)
                                sink.commit()
                            return None
                        await response.aread()
                        error = wire.error_from_response(response)
                except wire.RETRYABLE_TRANSPORT_ERRORS as e:
                    tries = attempt.retry_state.attempt_number
                    raise TransportFailed("GET", str(url.copy_with(query=None)), tries) from e
                if error.status in URL_REFUSED_STATUSES:
                    return error
                error.attempts = attempt.retry_state.attempt_number
                raise error
        raise AssertionError("unreachable")  # the loop returns or raises
