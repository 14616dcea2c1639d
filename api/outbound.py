"""Outbound HTTP to URLs that clients give us, guarded against SSRF: ``fetch`` and its ``OutboundPolicy``.

The API fetches input images (``input.image_url``) with it; any other sender of requests to client-given
URLs (webhooks) can use the same checks (``check_url``, ``resolve_checked``). The rules:

- **Scheme**: https; plain http only to hosts in ``allow_http_hosts``. No credentials in the URL.
- **Addresses**: every address the host resolves to must be public: not private, loopback, link-local
  (the cloud metadata address 169.254.169.254 among them), CGNAT (100.64.0.0/10), multicast, reserved,
  unspecified, an IPv6 unique-local one (fd00:ec2::254, AWS's IPv6 metadata address, among them) or an
  IPv4 one hidden in IPv6 (mapped, 6to4, Teredo, NAT64). Hosts in ``allow_private_hosts`` skip this check.
- **No rebinding gap**: the connection goes to the very address that was checked (the URL is rewritten to
  the address literal; the ``Host`` header and TLS, SNI and certificate check, keep the name), so a DNS
  answer that changes between the check and the connect cannot move it.
- **Redirects** are not followed unless ``max_redirects`` > 0; each hop then goes through every check above.
- **Time**: one deadline covers resolving, connecting, the answer and the whole body, so a server that
  drips one byte a second cannot hold the fetch open past ``timeout_s``.
- **Size**: a ``Content-Length`` above ``max_bytes`` is refused unread; a body is counted while streaming
  and the fetch stops at ``max_bytes`` + 1.

Errors: ``UrlNotAllowed`` (the rules refuse the URL, a hop or an address), ``FetchFailed`` (no good answer:
unreachable, timed out, not 2xx, a redirect not followed), ``FetchTooLarge``.
"""

from __future__ import annotations

import ipaddress
import socket
import time
from dataclasses import dataclass
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
    "address_refusal",
    "check_url",
    "fetch",
    "resolve_checked",
]

Address = ipaddress.IPv4Address | ipaddress.IPv6Address

# Named for a clearer refusal; both are also caught by the range checks (link-local, unique-local).
_METADATA = frozenset({ipaddress.ip_address("169.254.169.254"), ipaddress.ip_address("fd00:ec2::254")})
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_REDIRECTS = frozenset({301, 302, 303, 307, 308})


@dataclass(frozen=True)
class OutboundPolicy:
    allow_http_hosts: frozenset[str] = frozenset()  # lower-case names or address literals
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


def resolve_checked(host: str, port: int, *, allow_private: bool) -> tuple[str, ...]:
    """Every address ``host`` resolves to, each checked (unless ``allow_private``); ``UrlNotAllowed`` if any
    is not public or the name does not resolve. All must pass: a name with one public and one private
    address would otherwise let the connection land on the private one."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as e:
        raise UrlNotAllowed(f"the host {host!r} does not resolve: {e}") from None
    addresses = list(dict.fromkeys(ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos))
    if not addresses:
        raise UrlNotAllowed(f"the host {host!r} does not resolve")
    if not allow_private:
        for address in addresses:
            reason = address_refusal(address)
            if reason is not None:
                raise UrlNotAllowed(f"the host {host!r} resolves to {address}, a {reason} address")
    return tuple(str(a) for a in addresses)


def check_url(url: str, policy: OutboundPolicy) -> Target:
    """The URL's target if the rules allow it (scheme, host, every resolved address), else ``UrlNotAllowed``."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as e:
        raise UrlNotAllowed(f"not a valid URL: {e}") from None
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    if scheme not in ("https", "http") or not host:
        raise UrlNotAllowed("the URL must be https://host/...")
    if scheme == "http" and host not in policy.allow_http_hosts:
        raise UrlNotAllowed(f"the URL must be https (plain http only to allowed hosts; {host!r} is not one)")
    if parts.username is not None or parts.password is not None:
        raise UrlNotAllowed("the URL must not carry credentials")
    port = port or (443 if scheme == "https" else 80)
    addresses = resolve_checked(host, port, allow_private=host in policy.allow_private_hosts)
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
            headers={"host": host_header},
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
    raise FetchFailed(f"cannot connect to {target.host}: {last}")


def _read_capped(response: httpx.Response, max_bytes: int, deadline: float) -> bytes:
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise FetchTooLarge(f"the answer declares {declared} bytes; the limit is {max_bytes}")
    chunks: list[bytes] = []
    size = 0
    try:
        for chunk in response.iter_bytes():
            size += len(chunk)
            if size > max_bytes:
                raise FetchTooLarge(f"the answer is larger than {max_bytes} bytes")
            chunks.append(chunk)
            _remaining(deadline)
    except httpx.TimeoutException:
        raise FetchFailed("the fetch timed out") from None
    except httpx.HTTPError as e:
        raise FetchFailed(f"the answer broke off: {type(e).__name__}") from None
    return b"".join(chunks)
