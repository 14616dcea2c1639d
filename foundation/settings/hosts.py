"""Allow-list entries that name a host and a port (``host_port_entries``), and which bind addresses are
this machine's own (``is_loopback``).

An outbound allow-list (``api.inputs.allow_http_hosts``, ``api.inputs.allow_private_hosts``,
``webhooks.allowed_hosts``) lifts a rule for one service, not for every port of its host: an image
server allowed on ``images.internal:8080`` must not open that host's admin port or its Redis. So every
entry is ``host:port`` (``[v6]:port`` for an IPv6 literal); ``host:*`` allows every port and has to be
written out. A bare host is refused at start with the fix in the message, rather than read one way
or the other.
"""

from __future__ import annotations

import ipaddress
import re

__all__ = ["host_port_entries", "is_loopback"]

_ENTRY = re.compile(r"(?P<host>\[[0-9a-f:.]+\]|[^\[\]:/@\s]+):(?P<port>\*|[0-9]{1,5})")


def host_port_entries(values: list[str], setting: str) -> list[str]:
    """``values`` lower-cased and checked; ``ValueError`` naming ``setting`` for an entry without a port."""
    entries = []
    for value in values:
        entry = value.strip().lower()
        match = _ENTRY.fullmatch(entry)
        if match is None or (match["port"] != "*" and not 0 < int(match["port"]) < 65536):
            raise ValueError(
                f"{setting}: {value!r} must name a host and a port, e.g. images.internal:8080, "
                "127.0.0.1:9000 or [::1]:8443 (host:* for every port of the host)"
            )
        entries.append(entry)
    return entries


def is_loopback(host: str) -> bool:
    """Whether a bind address only this machine can reach: ``localhost`` or a loopback literal.
    ``0.0.0.0``, ``::`` and every other address or name are reachable from elsewhere."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:
        return False
