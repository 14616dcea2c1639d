"""The outbound guard's address and URL rules, and its allow-lists of host and port (no network: address
literals and ``localhost``)."""

from __future__ import annotations

import ipaddress

import pytest
from pydantic import ValidationError

from api.errors import UrlNotAllowed
from api.outbound import OutboundPolicy, address_refusal, check_url
from foundation.settings import InputSettings, WebhookSettings

POLICY = OutboundPolicy()


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("127.0.0.1", "loopback"),
        ("::1", "loopback"),
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("192.168.1.1", "private"),
        ("169.254.169.254", "cloud metadata"),
        ("fd00:ec2::254", "cloud metadata"),
        ("169.254.10.10", "link-local"),
        ("fe80::1", "link-local"),
        ("100.64.0.1", "non-public"),  # CGNAT
        ("100.100.100.200", "non-public"),  # a metadata address inside CGNAT
        ("224.0.0.1", "multicast"),
        ("240.0.0.1", "reserved"),
        ("0.0.0.0", "unspecified"),
        ("fc00::1", "private"),
        ("::ffff:127.0.0.1", "loopback"),  # IPv4-mapped
        ("2002:7f00:1::", "loopback"),  # 6to4 of 127.0.0.1
        ("64:ff9b::a9fe:a9fe", "cloud metadata"),  # NAT64 of 169.254.169.254
        ("198.18.0.1", "private"),  # benchmarking
    ],
)
def test_non_public_addresses_are_refused_with_their_reason(address: str, reason: str) -> None:
    assert address_refusal(ipaddress.ip_address(address)) == reason


@pytest.mark.parametrize("address", ["8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "93.184.216.34"])
def test_public_addresses_pass(address: str) -> None:
    assert address_refusal(ipaddress.ip_address(address)) is None


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("ftp://example.com/a.png", "https"),
        ("file:///etc/passwd", "https"),
        ("http://8.8.8.8/a.png", "https"),  # plain http to a host not allowed
        ("https://user:pw@8.8.8.8/a.png", "credentials"),
        ("https://127.0.0.1/a.png", "loopback"),
        ("https://localhost/a.png", "public addresses only"),  # a name resolving to loopback
        ("https://169.254.169.254/latest/meta-data/", "cloud metadata"),
        ("https://[fd00:ec2::254]/latest/meta-data/", "cloud metadata"),
        ("https://10.0.0.1/a.png", "private"),
        ("https://[::1]:8443/a.png", "loopback"),
        ("https://no-such-host.invalid/a.png", "public addresses only"),
        ("https://8.8.8.8:99999/a.png", "valid URL"),
        ("https://8.8.8.8/a.png\r\nX-Injected: 1", "control characters"),
        ("https://8.8.8.8/a b.png", "spaces"),
    ],
)
def test_urls_the_rules_refuse(url: str, why: str) -> None:
    with pytest.raises(UrlNotAllowed, match=why):
        check_url(url, POLICY)


def test_allow_lists_lift_their_rule_only() -> None:
    http_only = OutboundPolicy(allow_http_hosts=frozenset({"127.0.0.1:8000"}))
    with pytest.raises(UrlNotAllowed, match="loopback"):
        check_url("http://127.0.0.1:8000/a.png", http_only)
    both = OutboundPolicy(
        allow_http_hosts=frozenset({"127.0.0.1:8000"}), allow_private_hosts=frozenset({"127.0.0.1:8000"})
    )
    target = check_url("http://127.0.0.1:8000/a.png", both)
    assert (target.host, target.port, target.addresses) == ("127.0.0.1", 8000, ("127.0.0.1",))
    assert check_url("https://8.8.8.8/a.png", POLICY).addresses == ("8.8.8.8",)


@pytest.mark.parametrize(
    ("entries", "url", "allowed"),
    [
        ({"127.0.0.1:8000"}, "http://127.0.0.1:8000/a.png", True),
        ({"127.0.0.1:8000"}, "http://127.0.0.1:6379/a.png", False),  # the host's other services stay shut
        ({"127.0.0.1:8000"}, "http://127.0.0.1/a.png", False),  # port 80 is a port like any other
        ({"127.0.0.1:80"}, "http://127.0.0.1/a.png", True),
        ({"127.0.0.1:*"}, "http://127.0.0.1:6379/a.png", True),  # every port, written out
        ({"[::1]:8443"}, "http://[::1]:8443/a.png", True),
        ({"[::1]:8443"}, "http://[::1]:8444/a.png", False),
        ({"localhost:8000"}, "http://127.0.0.1:8000/a.png", False),  # names are matched as written
    ],
)
def test_allow_lists_name_a_host_and_a_port(entries: set[str], url: str, allowed: bool) -> None:
    policy = OutboundPolicy(allow_http_hosts=frozenset(entries), allow_private_hosts=frozenset(entries))
    if allowed:
        check_url(url, policy)
    else:
        with pytest.raises(UrlNotAllowed, match=r"not one|loopback"):
            check_url(url, policy)


@pytest.mark.parametrize(
    ("url", "rule"),
    [
        ("https://localhost/a.png", "public addresses only"),  # a name: what it resolves to is not the sender's
        ("https://localhost:8443/a.png", "public addresses only"),
        ("http://localhost:8000/a.png", "https"),
    ],
)
def test_refusals_name_the_rule_never_a_resolved_address(url: str, rule: str) -> None:
    with pytest.raises(UrlNotAllowed) as refused:
        check_url(url, OutboundPolicy())
    message = str(refused.value)
    assert rule in message
    for address in ("127.0.0.1", "::1"):
        assert address not in message, message


@pytest.mark.parametrize(
    "entry", ["127.0.0.1", "images.internal", "[::1]", "host:0", "host:70000", "host:", ":80", "::1:80"]
)
def test_an_allow_list_entry_without_a_port_is_refused_at_start(entry: str) -> None:
    with pytest.raises(ValidationError, match="must name a host and a port"):
        InputSettings(allow_private_hosts=[entry])
    with pytest.raises(ValidationError, match=r"webhooks\.allowed_hosts"):
        WebhookSettings(allowed_hosts=[entry])
    assert InputSettings(allow_http_hosts=["Images.Internal:8080", "[::1]:*"]).allow_http_hosts == [
        "images.internal:8080",
        "[::1]:*",
    ]


def test_every_redirect_hop_is_checked_not_only_the_first() -> None:
    """Two loopback servers: a chain that stays on the allowed one for two hops, then leaves it. The third hop is
    refused before any connection to it; with both allowed, the same chain ends at the second server's body."""
    from api.outbound import fetch
    from tests.fixtures.image_server import Route, serve_images

    with serve_images({"/final": Route(b"elsewhere")}) as other:
        routes = {
            "/start": Route(status=302, headers={"Location": "/next"}),
            "/next": Route(status=302, headers={"Location": other.url("/final")}),
        }
        with serve_images(routes) as first:
            allowed = frozenset({f"127.0.0.1:{first.port}"})
            policy = OutboundPolicy(allow_http_hosts=allowed, allow_private_hosts=allowed, max_redirects=3)
            with pytest.raises(UrlNotAllowed, match=f"port {other.port} is not one"):
                fetch(first.url("/start"), policy)
            assert first.hits == ["/start", "/next"] and other.hits == []

            both = allowed | {f"127.0.0.1:{other.port}"}
            fetched = fetch(first.url("/start"), OutboundPolicy(both, both, max_redirects=3))
            assert (fetched.body, fetched.url) == (b"elsewhere", other.url("/final"))


def test_an_internal_name_that_resolves_reads_as_one_that_does_not() -> None:
    """Whether a name exists inside the network, and what class of address it has, is not told to the caller."""
    refusals = []
    for host in ("localhost", "no-such-host.invalid"):
        with pytest.raises(UrlNotAllowed) as refused:
            check_url(f"https://{host}/a.png", POLICY)
        refusals.append(str(refused.value).replace(host, "HOST"))
    assert refusals[0] == refusals[1] == "the host 'HOST' must resolve to public addresses only"
