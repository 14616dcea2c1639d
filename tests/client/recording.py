"""A real ``httpx.HTTPTransport`` that also notes when each request left and its answer came back.

It sits in the client's transport seam; every request still goes over a socket to the real server.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import httpx

__all__ = ["Exchange", "RecordingTransport"]


@dataclass(frozen=True)
class Exchange:
    method: str
    url: httpx.URL
    headers: httpx.Headers
    started: float  # time.monotonic() when the request was handed to the socket
    answered: float  # time.monotonic() when the answer's head arrived
    status: int


class RecordingTransport(httpx.HTTPTransport):
    def __init__(self) -> None:
        super().__init__()
        self.exchanges: list[Exchange] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        started = time.monotonic()
        response = super().handle_request(request)
        answered = time.monotonic()
        self.exchanges.append(
            Exchange(request.method, request.url, request.headers, started, answered, response.status_code)
        )
        return response

    def to(self, path_part: str) -> list[Exchange]:
        return [e for e in self.exchanges if path_part in e.url.path]
