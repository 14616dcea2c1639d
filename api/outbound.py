"""Outbound HTTP to URLs that clients give us, guarded against SSRF: ``fetch`` and its ``OutboundPolicy``.

The API fetches input images (``input.image_url``) with it; any other sender of requests to client-given
URLs (webhooks) can use the same checks (``check_url``, ``resolve_checked``). The rules:

- **Scheme**: https; plain http only to the ``host:port`` pairs in ``allow_http_hosts``. No credentials in
  the URL.
- **Addresses**: every address the host resolves to must be public: not private, loopback, link-local
  (the cloud metadata address 169.254.169.254 among them), CGNAT (100.64.0.0/10), multicast, reserved,
  unspecified, an IPv6 unique-local one (fd00:ec2::254, AWS's IPv6 metadata address, among them) or an
  IPv4 one hidden in IPv6 (mapped, 6to4, Teredo, NAT64). The ``host:port`` pairs in
  ``allow_private_hosts`` skip this check.
- **Allow-lists name host and port** (``images.internal:8080``, ``[::1]:8443``; ``host:*`` for every port,
  an operator's explicit choice): an allowed image server does not open every other service on its host.
- **Refusals name the rule** (loopback, private, cloud metadata, ...), never an address the host
  resolved to: the message goes back to whoever sent the URL, and an internal name's address is not theirs
  to learn.
- **No rebinding gap**: the connection goes to the very address that was checked (the URL is rewritten to
  the address literal; the ``Host`` header and TLS, SNI and certificate check, keep the name), so a DNS
  answer that changes between the check and the connect cannot move it.
- **Redirects** are not followed unless ``max_redirects`` > 0; each hop then goes through every check above.
- **Time**: one deadline covers connecting, the answer and the whole body. Every socket wait is given
  what is left of it, and a watchdog shuts the socket at the deadline, so a server that drips one byte
  just inside each read's wait cannot hold the fetch open past ``timeout_s`` (it would otherwise start
  a last full-length read just before the deadline). Name resolution is the system resolver's, bounded
  by its own timeouts.
- **Bytes on the wire**: the request asks for ``Accept-Encoding: identity`` and the body is read raw;
  an answer with any other ``Content-Encoding`` is refused unread. A 500 KB gzip body would otherwise be
  inflated in memory before any cap could count it (a compression bomb): every cap here counts bytes
  received, and the image's own pixel cap is the checker's (``foundation.core.images``).
- **Size**: a ``Content-Length`` above ``max_bytes`` is refused unread; a body is counted while streaming
  and the fetch stops at ``max_bytes`` + 1.

Errors: ``UrlNotAllowed`` (the rules refuse the URL, a hop or an address), ``FetchFailed`` (no good answer:
unreachable, timed out, not 2xx, a redirect not followed, an encoding not asked for), ``FetchTooLarge``.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin, urlsplit, urlunsplit

import httpx

from api.errors import FetchFailed, FetchTooLarge, UrlNotAllowed

__all__ = [
    "FetchFailed",
    "FetchTooLarge",
    "Fetched",
    "OutboundPolicy",
    "Target",
    "UrlNotAllowed",
    "Watchdog",
    "address_refusal",
    "allows",
    "check_url",
    "fetch",
    "resolve_checked",
]

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
log = logging.getLogger("genworker.api.outbound")

# Named for a clearer refusal; both are also caught by the range checks (link-local, unique-local).
_METADATA = frozenset({ipaddress.ip_address("169.254.169.254"), ipaddress.ip_address("fd00:ec2::254")})
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_REDIRECTS = frozenset({301, 302, 303, 307, 308})


@dataclass(frozen=True)
class OutboundPolicy:
    # Lower-case ``host:port`` pairs (``[v6]:port`` for an IPv6 literal; ``host:*``: every port), as the
    # settings' validator writes them (``foundation.settings.host_port_entries``).
    allow_http_hosts: frozenset[str] = frozenset()
    allow_private_hosts: frozenset[str] = frozenset()
    timeout_s: float = 10.0
    max_bytes: int = 20_000_000
    max_redirects: int = 0


@dataclass(frozen=True)
class Target:
    """A URL the rules allow, with the addresses its host resolved to (all checked)."""

    url: str
    scheme: str
    host: str
    port: int
    addresses: tuple[str, ...]


@dataclass(frozen=True)
class Fetched:
    url: str  # the last hop's URL
    body: bytes
    content_type: str | None  # as the server declared it (callers sniff the bytes instead)


def address_refusal(address: Address) -> str | None:
    """Why ``address`` may not be reached from here ("loopback", "cloud metadata", ...), or None if public."""
    if address in _METADATA:
        return "cloud metadata"
    if isinstance(address, ipaddress.IPv6Address):
        embedded = address.ipv4_mapped or address.sixtofour or (address.teredo[1] if address.teredo else None)
        if embedded is None and address in _NAT64:
            embedded = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if embedded is not None:
            return address_refusal(embedded)
    for name in ("unspecified", "loopback", "link_local", "multicast", "reserved", "private"):
        if getattr(address, f"is_{name}"):
            return name.replace("_", "-")
    if isinstance(address, ipaddress.IPv6Address) and address.is_site_local:
        return "site-local"
    if not address.is_global:  # CGNAT 100.64.0.0/10, benchmarking and documentation ranges, ...
        return "non-public"
    return None


def allows(entries: frozenset[str], host: str, port: int) -> bool:
    """Whether an allow-list of ``host:port`` pairs names this host on this port (or on every port)."""
    authority = f"[{host}]" if ":" in host else host
    return f"{authority}:{port}" in entries or f"{authority}:*" in entries


def resolve_checked(host: str, port: int, *, allow_private: bool) -> tuple[str, ...]:
    """Every address ``host`` resolves to, each checked (unless ``allow_private``); ``UrlNotAllowed`` if any
    is not public or the name does not resolve. All must pass: a name with one public and one private
    address would otherwise let the connection land on the private one. The refusal names the rule that
    refused, never the address: for a name, one sentence whether it does not resolve or resolves to a private
    address, so a caller cannot map internal names (which exist, and what class of address they have); the
    operator's log has the reason. An address literal is the caller's own: its class is named."""
    literal = _literal(host)
    if literal is not None:
        addresses = [literal]
    else:
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except (socket.gaierror, UnicodeError):
            infos = []
        addresses = list(dict.fromkeys(ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos))
    reasons = [] if allow_private else [r for r in map(address_refusal, addresses) if r is not None]
    if addresses and not reasons:
        return tuple(str(a) for a in addresses)
    if literal is not None:
        raise UrlNotAllowed(f"{host} is {_article(reasons[0])} {reasons[0]} address; only public addresses are reached")
    log.info("outbound host refused", extra={"host": host, "reason": reasons[0] if reasons else "does not resolve"})
    raise UrlNotAllowed(f"the host {host!r} must resolve to public addresses only")


def _literal(host: str) -> Address | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def _article(word: str) -> str:
    return "an" if word[0] in "aeiou" else "a"


def check_url(url: str, policy: OutboundPolicy) -> Target:
    """The URL's target if the rules allow it (scheme, host, every resolved address), else ``UrlNotAllowed``."""
    if not url.isprintable() or " " in url:  # urlsplit drops CR, LF and tab: the stored string would keep them
        raise UrlNotAllowed("the URL must not contain spaces or control characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as e:
        raise UrlNotAllowed(f"not a valid URL: {e}") from None
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    if scheme not in ("https", "http") or not host:
        raise UrlNotAllowed("the URL must be https://host/...")
    port = port or (443 if scheme == "https" else 80)
    if scheme == "http" and not allows(policy.allow_http_hosts, host, port):
        raise UrlNotAllowed(
            f"the URL must be https (plain http only to allowed hosts and ports; {host!r} on port {port} is not one)"
        )
    if parts.username is not None or parts.password is not None:
        raise UrlNotAllowed("the URL must not carry credentials")
    addresses = resolve_checked(host, port, allow_private=allows(policy.allow_private_hosts, host, port))
    return Target(url=url, scheme=scheme, host=host, port=port, addresses=addresses)


def fetch(url: str, policy: OutboundPolicy) -> Fetched:
    """GET ``url`` under ``policy``: the body, or ``UrlNotAllowed`` / ``FetchFailed`` / ``FetchTooLarge``."""
    deadline = time.monotonic() + policy.timeout_s
    with httpx.Client(follow_redirects=False, trust_env=False) as client:
        for _hop in range(policy.max_redirects + 1):
            target = check_url(url, policy)
            response = _open(client, target, deadline)
            try:
                if response.status_code in _REDIRECTS and "location" in response.headers:
                    url = urljoin(url, response.headers["location"])
                    continue
                if not 200 <= response.status_code < 300:
                    raise FetchFailed(f"the server answered HTTP {response.status_code}")
                encoding = response.headers.get("content-encoding", "identity").strip().lower()
                if encoding not in ("", "identity"):
                    raise FetchFailed(f"the answer is encoded ({encoding[:40]}), and the fetch asks for identity")
                body = _read_capped(response, policy.max_bytes, deadline)
                return Fetched(url=target.url, body=body, content_type=response.headers.get("content-type"))
            finally:
                response.close()
    if policy.max_redirects == 0:
        raise FetchFailed("the URL answers with a redirect; redirects are not followed")
    raise FetchFailed(f"the URL redirects more than {policy.max_redirects} times")


def _remaining(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise FetchFailed("the fetch timed out")
    return left


def _open(client: httpx.Client, target: Target, deadline: float) -> httpx.Response:
    """Send the GET to the first checked address that accepts a connection; the answer is not read yet."""
    parts = urlsplit(target.url)
    host_header = parts.netloc.rpartition("@")[2]
    last: Exception | None = None
    for address in target.addresses:
        literal = f"[{address}]" if ":" in address else address
        pinned = urlunsplit((target.scheme, f"{literal}:{target.port}", parts.path or "/", parts.query, ""))
        request = client.build_request(
            "GET",
            pinned,
            headers={"host": host_header, "accept-encoding": "identity"},
            extensions={"sni_hostname": target.host},
            timeout=_remaining(deadline),
        )
        try:
            return client.send(request, stream=True)
        except httpx.ConnectError as e:
            last = e  # the next address, if any
        except httpx.TimeoutException:
            raise FetchFailed("the fetch timed out") from None
        except httpx.HTTPError as e:
            raise FetchFailed(f"the fetch failed: {type(e).__name__}") from None
    # The connect error's text can carry the address that refused: not named (module docstring).
    raise FetchFailed(f"cannot connect to {target.host!r} on port {target.port} ({type(last).__name__})")


def _read_capped(response: httpx.Response, max_bytes: int, deadline: float) -> bytes:
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise FetchTooLarge(f"the answer declares {declared} bytes; the limit is {max_bytes}")
    chunks: list[bytes] = []
    size = 0
    watchdog = Watchdog(deadline)
    watchdog.arm(response.extensions.get("network_stream"))
    try:
        for chunk in response.iter_raw():  # raw: what the wire carried, never inflated here
            size += len(chunk)
            if size > max_bytes:
                raise FetchTooLarge(f"the answer is larger than {max_bytes} bytes")
            chunks.append(chunk)
            _remaining(deadline)
        if watchdog.fired:  # a body that ends with the connection reads the shut socket as its end
            raise FetchFailed("the fetch timed out")
    except httpx.TimeoutException:
        raise FetchFailed("the fetch timed out") from None
    except httpx.HTTPError as e:
        if watchdog.fired:
            raise FetchFailed("the fetch timed out") from None
        raise FetchFailed(f"the answer broke off: {type(e).__name__}") from None
    finally:
        watchdog.cancel()
    return b"".join(chunks)


class Watchdog:
    """Shuts a connection's socket at ``deadline``. A read's own time limit was fixed when the request was
    sent, and a peer that sends a byte just inside it keeps every read alive, so without this one exchange
    could run far past its deadline; the shut socket ends the read in progress at once (as an end of stream or
    an error, which ``fired`` tells from a real one). The socket is ``arm``-ed as soon as it exists: from the
    request's ``trace`` hook when a connection is opened (an answer's very headers can trickle), or from the
    answer's ``network_stream``. A deadline passed before the socket is known shuts it as it arrives."""

    def __init__(self, deadline: float) -> None:
        self.fired = False
        self._socket: socket.socket | None = None
        self._lock = threading.Lock()
        self._timer = threading.Timer(max(0.0, deadline - time.monotonic()), self._fire)
        self._timer.daemon = True
        self._timer.start()

    def trace(self, event: str, info: dict[str, Any]) -> None:
        """httpx's ``trace`` request extension: the new connection's stream, once its TCP connect completes."""
        if event == "connection.connect_tcp.complete":
            self.arm(info.get("return_value"))

    def arm(self, stream: Any) -> None:
        sock = stream.get_extra_info("socket") if stream is not None else None
        with self._lock:
            if sock is None or self._socket is not None:
                return
            self._socket = sock
            fired = self.fired
        if fired:
            self._shut(sock)

    def _fire(self) -> None:
        with self._lock:
            self.fired = True
            sock = self._socket
        if sock is not None:
            self._shut(sock)

    @staticmethod
    def _shut(sock: socket.socket) -> None:
        with contextlib.suppress(OSError):  # already closed: the read is over anyway
            sock.shutdown(socket.SHUT_RDWR)

    def cancel(self) -> None:
        self._timer.cancel()
