"""The real ``Transport``: one POST per attempt through the project's outbound guard (``api.outbound``).

The guard's ``check_url`` applies the rules before every attempt (and at registration): https only,
except hosts in ``webhooks.allowed_hosts``; every address the host resolves to must be public (not
private, loopback, link-local with the cloud metadata address, CGNAT, unique-local, multicast, reserved,
unspecified, or an IPv4 one hidden in IPv6), except for those same allowed hosts. The POST then goes to
an address that was checked (the URL rewritten to the address literal; ``Host``, SNI and the
certificate check keep the name), so a DNS answer that changes in between cannot move it. Redirects
are not followed (a 3xx is a failed attempt: there is no second hop). One deadline,
``webhooks.timeout_s``, covers connecting and the answer, held by a watchdog that shuts the socket at it (a
receiver that trickles its answer a byte at a time keeps every single read inside its own limit).

The answer is read raw and never decoded: the POST asks for ``Accept-Encoding: identity``, the body is
read with ``iter_raw`` (a gzip or brotli answer stays compressed bytes nobody inflates), and reading stops
once ``webhooks.max_response_bytes`` were received, counted as they came off the wire (one network read,
64 KiB at most, may pass the cap). Nobody needs the answer's body: only its status is kept.
"""

from __future__ import annotations

import ssl
import time
from urllib.parse import urlsplit, urlunsplit

import httpx

from api.errors import UrlNotAllowed, UrlRefused
from api.outbound import OutboundPolicy, Target, Watchdog, check_url
from api.webhooks.transport import PostResult
from foundation.settings import Settings, WebhookSettings

__all__ = ["GuardedTransport", "open_transport", "policy_for"]


def policy_for(settings: WebhookSettings) -> OutboundPolicy:
    allowed = frozenset(h.lower() for h in settings.allowed_hosts)
    return OutboundPolicy(
        allow_http_hosts=allowed,
        allow_private_hosts=allowed,
        timeout_s=settings.timeout_s,
        max_bytes=settings.max_response_bytes,
        max_redirects=0,
    )


class GuardedTransport:
    """``verify``: the TLS trust (default: the system's CAs); tests pass a context trusting their own CA."""

    def __init__(self, settings: WebhookSettings, *, verify: ssl.SSLContext | bool = True) -> None:
        self.settings = settings
        self.policy = policy_for(settings)
        self._client = httpx.Client(follow_redirects=False, trust_env=False, verify=verify)

    def _target(self, url: str) -> Target:
        try:
            return check_url(url, self.policy)
        except UrlNotAllowed as e:  # the guard's error, translated at this seam
            raise UrlRefused(str(e)) from None

    def check_url(self, url: str) -> None:
        self._target(url)

    def post(self, url: str, body: bytes, headers: dict[str, str]) -> PostResult:
        started = time.monotonic()
        try:
            target = self._target(url)
        except UrlRefused as e:
            return PostResult(None, str(e), refused=True)
        deadline = started + self.settings.timeout_s
        watchdog = Watchdog(deadline)  # one deadline for the whole exchange, a trickling peer included
        try:
            response = self._send(target, body, headers, deadline, watchdog)
            watchdog.arm(response.extensions.get("network_stream"))  # a pooled connection: no connect traced
            try:
                self._drain(response, deadline)
            finally:
                response.close()
        except httpx.TimeoutException as e:
            return PostResult(None, f"{type(e).__name__}: {e}"[:300], duration_ms=_ms(started), timed_out=True)
        except httpx.HTTPError as e:
            if watchdog.fired:
                late = f"no answer within {self.settings.timeout_s:g} s"
                return PostResult(None, late, duration_ms=_ms(started), timed_out=True)
            return PostResult(None, f"{type(e).__name__}: {e}"[:300], duration_ms=_ms(started))
        finally:
            watchdog.cancel()
        error = None if 200 <= response.status_code < 300 else f"HTTP {response.status_code}"
        return PostResult(response.status_code, error, duration_ms=_ms(started))

    def _send(
        self, target: Target, body: bytes, headers: dict[str, str], deadline: float, watchdog: Watchdog
    ) -> httpx.Response:
        """POST to the first checked address that accepts a connection; the answer is not read yet."""
        parts = urlsplit(target.url)
        last: httpx.ConnectError | None = None
        for address in target.addresses:
            literal = f"[{address}]" if ":" in address else address
            pinned = urlunsplit((target.scheme, f"{literal}:{target.port}", parts.path or "/", parts.query, ""))
            request = self._client.build_request(
                "POST",
                pinned,
                content=body,
                # identity: an answer we would have to inflate is one we refuse to ask for.
                headers={**headers, "host": parts.netloc.rpartition("@")[2], "accept-encoding": "identity"},
                extensions={"sni_hostname": target.host, "trace": watchdog.trace},
                timeout=max(0.001, deadline - time.monotonic()),
            )
            try:
                return self._client.send(request, stream=True)
            except httpx.ConnectError as e:
                last = e  # the next checked address, if any
        assert last is not None  # check_url returns at least one address
        raise last

    def _drain(self, response: httpx.Response, deadline: float) -> int:
        """Receive at most ``max_response_bytes`` of the answer, raw, within the deadline; the count."""
        received = 0
        if self.settings.max_response_bytes == 0:
            return received
        # iter_raw, not iter_bytes: the bytes as they came off the wire, whatever Content-Encoding says.
        try:
            for chunk in response.iter_raw():
                received += len(chunk)
                if received >= self.settings.max_response_bytes or time.monotonic() > deadline:
                    break
        except httpx.HTTPError:
            if time.monotonic() < deadline:
                raise
            # The watchdog shut a body that trickled past the deadline: the status had come in time.
        return received

    def close(self) -> None:
        self._client.close()


def _ms(started: float) -> int:
    return int((time.monotonic() - started) * 1000)


def open_transport(settings: Settings) -> GuardedTransport:
    return GuardedTransport(settings.webhooks)
