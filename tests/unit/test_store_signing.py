"""Local store keys and HMAC-signed URLs (no server needed)."""

from __future__ import annotations

import hashlib
import hmac
from pathlib import Path
from urllib.parse import parse_qsl, unquote, urlsplit

import pytest
from hypothesis import given
from hypothesis import strategies as st

from foundation.stores.errors import InvalidKey
from foundation.stores.local import ARTIFACTS_PATH, LocalStore, check_key

SECRET = b"unit-test-secret-0123456789abcdef"


@pytest.fixture
def store(tmp_path: Path) -> LocalStore:
    return LocalStore(tmp_path / "root", SECRET, "https://api.example.test/", 900)


def test_signed_url_shape_and_signature(store: LocalStore) -> None:
    signed = store.sign_url("generations/gen 1/2/video.mp4", ttl_s=60)
    url = urlsplit(signed.url)
    assert (url.scheme, url.netloc) == ("https", "api.example.test")
    assert unquote(url.path) == f"{ARTIFACTS_PATH}/generations/gen 1/2/video.mp4"
    query = dict(parse_qsl(url.query))
    assert int(query["expires"]) == int(signed.expires_at.timestamp())
    expected = hmac.new(SECRET, f"generations/gen 1/2/video.mp4\n{query['expires']}".encode(), hashlib.sha256)
    assert query["sig"] == expected.hexdigest()


def test_verify(store: LocalStore) -> None:
    sig = store.signature("a/b.mp4", 1000)
    assert store.verify("a/b.mp4", "1000", sig, now=999)
    assert store.verify("a/b.mp4", 1000, sig, now=1000)  # valid through its last second
    assert not store.verify("a/b.mp4", "1000", sig, now=1001)  # expired
    assert not store.verify("a/c.mp4", "1000", sig, now=999)  # another key
    assert not store.verify("a/b.mp4", "1001", sig, now=999)  # expiry moved
    assert not store.verify("a/b.mp4", "1000", sig[:-1] + ("0" if sig[-1] != "0" else "1"), now=999)
    assert not store.verify("a/b.mp4", "soon", sig, now=999)
    assert not store.verify("a/b.mp4", "1000", "", now=999)
    assert not store.verify("a/\ud800.mp4", "1000", sig, now=999)  # not a key at all: False, no crash
    assert not store.verify("a/b.mp4", "1000", "é" * 64, now=999)  # non-ASCII signature: False, no crash
    other = LocalStore(store.root, b"another-secret-0123456789abcdef", "http://x", 900)
    assert not other.verify("a/b.mp4", "1000", sig, now=999)


@pytest.mark.parametrize(
    "key", ["", "/abs", "../up", "a/../b", "a/./b", "a//b", "a/", "a\\b", "a\x00b", "a\nb", "a\ud800b", "x" * 1025]
)
def test_check_key_refuses(key: str) -> None:
    with pytest.raises(InvalidKey):
        check_key(key)


segment = st.text(
    st.characters(codec="utf-8", min_codepoint=0x20, exclude_characters="/\\\x7f"), min_size=1, max_size=12
).filter(lambda s: s not in (".", ".."))


@given(st.lists(segment, min_size=1, max_size=5))
def test_accepted_keys_stay_under_the_root(tmp_path_factory: pytest.TempPathFactory, segments: list[str]) -> None:
    store = LocalStore(tmp_path_factory.getbasetemp() / "prop-root", SECRET, "http://x", 60)
    key = "/".join(segments)
    assert store.path_for(key).resolve().is_relative_to(store.root)


def test_short_secret_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="16 bytes"):
        LocalStore(tmp_path, b"short", "http://x", 60)
