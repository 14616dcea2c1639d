"""``Client``: the blocking client. ``AsyncClient`` (``client.aio``) mirrors it method for method.

It follows the spec's client rules so callers do not have to: one Idempotency-Key per logical
generation, reused on every retry; the id handed to ``on_created`` before anything else; polls at the
spec's cadence with jitter, never sooner than ``Retry-After``; downloads verified against the record and
retried once with a freshly signed URL when the first one has expired.
"""

from __future__ import annotations

import builtins
import contextlib
import itertools
import os
import random
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx
from tenacity import Retrying

from genworker_client import wire
from genworker_client.cadence import PollCadence
from genworker_client.download import CHUNK_BYTES, URL_REFUSED_STATUSES, ArtifactSink, artifact_paths, needs_fresh_url
from genworker_client.errors import ApiError, TransportFailed, WaitTimeout
from genworker_client.events import STREAM_GIVE_UP_STATUSES, SseParser, StreamEvent, StreamFollower
from genworker_client.images import image_input, mode_for
from genworker_client.ledger import KeyLedger, choose_idempotency_key
from genworker_client.models import Artifact, Generation, GenerationPage, Model
from genworker_client.retry import RetryPolicy

__all__ = ["Client"]

# A stream read waits at most this long for a line: the server sends a heartbeat every 15 s by
# default, so a longer silence is a stalled connection, resumed with Last-Event-ID.
STREAM_READ_TIMEOUT_S = 45.0
STREAM_RECONNECT_S = 0.5  # pause before resuming a stream that ended without its terminal event


class Client:
    """A client for ``{base_url}`` (host + ``/v1``; ``GENWORKER_BASE_URL``), authenticated with
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
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
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
        self._http = httpx.Client(base_url=self.base_url, timeout=timeout_s, transport=transport)

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    # -----------------------------------------------------------------------------------------------
    # Generations

    def create(
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
        body = wire.create_body(
            model, prompt, mode=mode_for(mode, image), variant=variant, resolution=resolution,
            duration_seconds=duration_seconds, ratio=ratio, audio=audio, prompt_extend=prompt_extend, seed=seed,
            negative_prompt=negative_prompt, image=image_input(image) if image is not None else None,
        )  # fmt: skip
        entry = choose_idempotency_key(body, idempotency_key=idempotency_key, name=name, ledger=self._ledger)
        if entry.id is not None:
            # An earlier run created it. Re-sending could create a duplicate once the server has
            # forgotten the key (it keeps keys for a limited time), so read it instead.
            generation = wire.as_replay(self.get(entry.id), entry.idempotency_key)
        else:
            response = self._request("POST", "generations", json=body, idempotency_key=entry.idempotency_key)
            generation = wire.generation_from_response(response, idempotency_key=entry.idempotency_key)
        if on_created is not None:
            on_created(generation)
        if name is not None and self._ledger is not None:
            self._ledger.record_id(name, generation.id)
        return generation

    def get(self, generation_id: str) -> Generation:
        return wire.generation_from_response(self._request("GET", f"generations/{generation_id}"))

    def cancel(self, generation_id: str) -> Generation:
        """Ask for cancellation; the record that comes back may still be ``running`` for up to one step.
        ``ApiError`` with code ``not_cancelable`` when the generation is already terminal."""
        try:
            response = self._request("POST", f"generations/{generation_id}/cancel")
        except ApiError as e:
            # A retry after a lost answer finds the generation canceled by our own first attempt.
            if e.code == "not_cancelable" and e.attempts > 1:
                current = self.get(generation_id)
                if current.status == "canceled":
                    return current
            raise
        return wire.generation_from_response(response)

    def list(self, *, limit: int | None = None, cursor: str | None = None) -> GenerationPage:
        """One page of this project's generations, newest first."""
        params = {k: v for k, v in {"limit": limit, "cursor": cursor}.items() if v is not None}
        return wire.page_from_response(self._request("GET", "generations", params=params))

    def models(self) -> builtins.list[Model]:
        return wire.models_from_response(self._request("GET", "models"))

    def wait(
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
        """Wait until terminal and return the final record (which may be ``failed`` or ``canceled``).

        With ``stream`` (the default) it follows the server's live event stream (``events``), resuming
        with ``Last-Event-ID`` after a dropped connection; ``on_event`` sees every message. When the
        server does not offer the stream (404, 405, 429, a 5xx) or it keeps failing, it polls instead:
        the first poll comes ``first_poll_s`` after the call (or after the ``Retry-After`` of the
        ``Generation`` passed in, when larger), then every ``poll_min_s``..``poll_max_s`` with jitter,
        never sooner than the last answer's ``Retry-After``. ``on_progress`` sees every polled record
        (and, after a stream, the final one). Raises ``WaitTimeout`` (with the last record) when
        ``timeout_s`` passes first.
        """
        cadence = PollCadence(first_poll_s, poll_min_s, poll_max_s)
        last = generation if isinstance(generation, Generation) else None
        generation_id = generation.id if isinstance(generation, Generation) else generation
        if last is not None and last.terminal:
            return last
        deadline = self._clock() + timeout_s
        if stream and self._follow(generation_id, deadline, timeout_s, on_event, last):
            final = self.get(generation_id)
            if on_progress is not None:
                on_progress(final)
            if final.terminal:
                return final
        for poll_index in itertools.count():
            remaining = deadline - self._clock()
            if remaining <= 0:
                raise WaitTimeout(generation_id, timeout_s, last)
            hint = last.retry_after_s if last is not None else None
            self._sleep(min(cadence.delay_s(poll_index, retry_after_s=hint, rng=self._rng), remaining))
            last = self.get(generation_id)
            if on_progress is not None:
                on_progress(last)
            if last.terminal:
                return last
        raise AssertionError("unreachable")

    def events(self, generation_id: str, *, last_event_id: str | None = None) -> Iterator[StreamEvent]:
        """The generation's live events (``status`` and ``progress``), from its start or after
        ``last_event_id``, until the terminal status event. One connection, no retries: ``ApiError``
        for a refusal, ``TransportFailed`` when the connection fails."""
        follower = StreamFollower(last_id=last_event_id)
        with self._open_stream(generation_id, follower, read_timeout_s=None) as response:
            if not response.is_success:
                response.read()
                raise wire.error_from_response(response)
            yield from self._read_stream(response, follower)

    def _follow(
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
            try:
                with self._open_stream(
                    generation_id, follower, read_timeout_s=min(remaining, STREAM_READ_TIMEOUT_S)
                ) as r:
                    if r.status_code in STREAM_GIVE_UP_STATUSES:
                        return False
                    if not r.is_success:
                        r.read()
                        raise wire.error_from_response(r)
                    for event in self._read_stream(r, follower):
                        if on_event is not None:
                            on_event(event)
                        if self._clock() >= deadline and not event.terminal:
                            raise WaitTimeout(generation_id, timeout_s, last, last_status=follower.status)
            except (httpx.TransportError, TransportFailed):
                pass  # a dropped or stalled connection: resume from the last id, or poll
            if follower.terminal is None:
                if not follower.connection_ended():
                    return False
                self._sleep(max(0.0, min(STREAM_RECONNECT_S, deadline - self._clock())))
        return True

    @contextlib.contextmanager
    def _open_stream(
        self, generation_id: str, follower: StreamFollower, *, read_timeout_s: float | None
    ) -> Iterator[httpx.Response]:
        headers = {**wire.api_headers(self._api_key, None), **follower.headers()}
        timeout = httpx.Timeout(self._http.timeout.connect, read=read_timeout_s)
        request = self._http.build_request(
            "GET", f"generations/{generation_id}/events", headers=headers, timeout=timeout
        )
        try:
            response = self._http.send(request, stream=True)
        except wire.RETRYABLE_TRANSPORT_ERRORS as e:
            raise TransportFailed("GET", f"{self.base_url}/generations/{generation_id}/events", 1) from e
        try:
            yield response
        finally:
            response.close()

    def _read_stream(self, response: httpx.Response, follower: StreamFollower) -> Iterator[StreamEvent]:
        parser = SseParser()
        for line in response.iter_lines():
            event = parser.feed(line)
            if event is not None:
                follower.seen(event)
                yield event
                if event.terminal:
                    return

    def download(self, generation: str | Generation, directory: str | os.PathLike[str]) -> builtins.list[Path]:
        """Stream every artifact into ``directory`` and return the paths, in the record's order.

        Each file is checked against the record's ``bytes`` and ``sha256`` (``IntegrityError``). An
        expired or refused URL makes the client re-fetch the generation once per artifact for a fresh one.
        """
        current = generation if isinstance(generation, Generation) else self.get(generation)
        if not current.succeeded:
            raise ValueError(f"generation {current.id} is {current.status}; only succeeded ones have artifacts")
        paths = artifact_paths(current, Path(directory))
        for index, dest in enumerate(paths):
            current = self._download_artifact(current, index, dest)
        return paths

    # -----------------------------------------------------------------------------------------------
    # Transport

    def _retrying(self) -> Retrying:
        """This client's retry loop: its policy, rng and sleep (tenacity, see ``retry.py``)."""
        return self._retry.retrying(rng=self._rng, sleep=self._sleep)

    def _request(
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
        for attempt in self._retrying():
            with attempt:
                tries = attempt.retry_state.attempt_number
                try:
                    response = self._http.request(method, path, json=json, params=params, headers=headers)
                except wire.RETRYABLE_TRANSPORT_ERRORS as e:
                    raise TransportFailed(method, f"{self.base_url}/{path}", tries) from e
                if response.is_success:
                    return response
                error = wire.error_from_response(response)
                error.attempts = tries
                raise error
        raise AssertionError("unreachable")  # the loop returns or raises

    def _download_artifact(self, generation: Generation, index: int, dest: Path) -> Generation:
        """Fetch one artifact; returns the generation whose URLs were used (re-fetched or not)."""
        refreshed = False
        while True:
            artifact = generation.artifacts[index]
            if not needs_fresh_url(artifact) or refreshed:
                refused = self._fetch_to_file(artifact, dest)
                if refused is None:
                    return generation
                if refreshed:
                    raise refused
            generation = self.get(generation.id)
            refreshed = True
            if index >= len(generation.artifacts) or generation.artifacts[index].kind != artifact.kind:
                raise ApiError(200, "invalid_response", f"generation {generation.id} changed its artifacts")

    def _fetch_to_file(self, artifact: Artifact, dest: Path) -> ApiError | None:
        """Stream one signed URL to ``dest``. Returns the refusal when the URL no longer works."""
        if artifact.download_url is None:
            return ApiError(200, "invalid_response", "artifact has no download_url")
        url = self._http.base_url.join(artifact.download_url)
        for attempt in self._retrying():
            with attempt:
                try:
                    with self._http.stream("GET", url) as response:
                        if response.is_success:
                            with ArtifactSink(dest, artifact) as sink:
                                for chunk in response.iter_bytes(CHUNK_BYTES):
                                    sink.write(chunk)
                                sink.commit()
                            return None
                        response.read()
                        error = wire.error_from_response(response)
                except wire.RETRYABLE_TRANSPORT_ERRORS as e:
                    tries = attempt.retry_state.attempt_number
                    raise TransportFailed("GET", str(url.copy_with(query=None)), tries) from e
                if error.status in URL_REFUSED_STATUSES:
                    return error
                error.attempts = attempt.retry_state.attempt_number
                raise error
        raise AssertionError("unreachable")  # the loop returns or raises
