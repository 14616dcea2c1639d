"""The playground's routes over HTTP, as a browser (or an attacker's page) would reach them: the
session cookie, the CSRF checks, the forwarding to the public routes, and the setting that turns it
all on. A real API (uvicorn, SQLite queue and key store, local store) per module; no worker needed."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from pydantic import ValidationError

from api.api_keys import Scope, SqliteKeyStore
from api.playground.page import STATIC_DIR
from api.playground.session import COOKIE_NAME, SessionSigner
from foundation.settings import Settings
from genworker.embedded import EmbeddedPaths, embedded_settings
from tests.e2e.conftest import Stack, assert_error, create_body, start_stack

TOKEN = re.compile(r'<meta name="csrf-token" content="([^"]+)">')


class Browser:
    """A cookie jar plus the page's token: what the page's script has."""

    def __init__(self, stack: Stack) -> None:
        self.origin = stack.base_url
        self.http = httpx.Client(base_url=stack.base_url, timeout=30)
        page = self.http.get("/")
        assert page.status_code == 200, page.text
        self.page = page
        self.token = TOKEN.search(page.text).group(1)  # type: ignore[union-attr]

    def headers(self, **extra: str) -> dict[str, str]:
        return {"X-CSRF-Token": self.token, "Origin": self.origin, "Sec-Fetch-Site": "same-origin", **extra}


@pytest.fixture
def browser(playground: tuple[Stack, str]) -> Iterator[Callable[[], Browser]]:
    """Opens browsers (sessions) on the playground; closes them after the test."""
    opened: list[Browser] = []

    def open_one() -> Browser:
        opened.append(Browser(playground[0]))
        return opened[-1]

    yield open_one
    for b in opened:
        b.http.close()


@pytest.fixture(scope="module")
def playground(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Stack, str]]:
    data = tmp_path_factory.mktemp("playground")
    keys = SqliteKeyStore(data / "keys.db")
    _, key = keys.create("studio", [Scope.generations_read, Scope.generations_write])
    keys.close()
    stack = start_stack(data, api={"playground": True, "playground_api_key": key})
    yield stack, key
    stack.stop()


def test_the_page_sets_a_strict_http_only_session(
    playground: tuple[Stack, str], browser: Callable[[], Browser]
) -> None:
    stack, _ = playground
    page = browser().page
    assert page.headers["content-type"].startswith("text/html")
    assert page.headers["cache-control"] == "no-store"
    assert page.headers["x-frame-options"] == "DENY"
    assert "script-src 'self'" in page.headers["content-security-policy"]
    cookie = page.headers["set-cookie"]
    assert cookie.startswith(f"{COOKIE_NAME}=")
    assert {"HttpOnly", "SameSite=strict", "Path=/"} <= {p.strip() for p in cookie.split(";")}
    assert "Secure" not in cookie
    # Behind a TLS proxy (uvicorn trusts X-Forwarded-Proto from loopback) the cookie is Secure.
    secure = httpx.get(stack.base_url + "/", headers={"X-Forwarded-Proto": "https"})
    assert "Secure" in secure.headers["set-cookie"]


def test_the_page_and_its_assets_never_carry_the_key(
    playground: tuple[Stack, str], browser: Callable[[], Browser]
) -> None:
    key = playground[1]
    b = browser()
    served = [b.page.text]
    for path in sorted(STATIC_DIR.iterdir()):
        r = b.http.get(f"/playground/static/{path.name}")
        assert r.status_code == 200
        served.append(r.text)
    assert len(served) >= 4
    assert not [text for text in served if key in text]
    assert "Authorization" not in served[0]


def test_calls_act_for_the_keys_project_and_never_return_the_key(
    playground: tuple[Stack, str], browser: Callable[[], Browser]
) -> None:
    stack, key = playground
    b = browser()
    quote = b.http.post("/playground/api/quote", headers=b.headers(), json={**create_body(), "input": None})
    assert quote.status_code == 200, quote.text
    created = b.http.post(
        "/playground/api/generations", headers=b.headers(**{"Idempotency-Key": "pg-1"}), json=create_body()
    )
    assert created.status_code == 202, created.text
    assert created.json()["price_hold"] == quote.json()["price_hold"]
    assert created.headers["retry-after"] == "1"
    gid = created.json()["id"]
    record = stack.queue.get(gid)
    assert record is not None and record.project == "studio"
    responses = [quote, created]
    responses.append(b.http.get(f"/playground/api/generations/{gid}", headers=b.headers()))
    responses.append(b.http.get("/playground/api/generations", headers=b.headers()))
    responses.append(b.http.get("/playground/api/models", headers=b.headers()))
    responses.append(b.http.post(f"/playground/api/generations/{gid}/cancel", headers=b.headers()))
    assert [r.status_code for r in responses[2:]] == [200, 200, 200, 200]
    assert [g["id"] for g in responses[3].json()["data"]] == [gid]
    assert responses[5].json()["status"] == "canceled"
    for r in responses:
        assert key not in r.text and key not in str(r.headers)


def test_bad_input_gets_the_public_routes_coded_errors(
    playground: tuple[Stack, str], browser: Callable[[], Browser]
) -> None:
    b = browser()
    bad_seed = create_body(seed=10**20)
    assert_error(
        b.http.post("/playground/api/generations", headers=b.headers(), json=bad_seed),
        400,
        "invalid_parameter",
        "parameters.seed",
    )
    bad_size = {**create_body(resolution="720p"), "input": None}
    assert_error(
        b.http.post("/playground/api/quote", headers=b.headers(), json=bad_size),
        400,
        "invalid_parameter",
        "parameters.resolution",
    )
    assert_error(b.http.post("/playground/api/quote", headers=b.headers(), content=b"{"), 400, "invalid_request")
    assert_error(b.http.get("/playground/api/generations/gen_nope", headers=b.headers()), 404, "not_found", "id")
    # Only the page's routes are reachable: no general proxy onto the API.
    assert_error(b.http.get("/playground/api/generations/..%2F..%2Fmetrics", headers=b.headers()), 404, "not_found")
    assert_error(b.http.get("/playground/api/openapi.json", headers=b.headers()), 404, "not_found")
    assert_error(b.http.delete("/playground/api/models", headers=b.headers()), 405, "method_not_allowed")


@pytest.mark.parametrize(
    ("case", "param"),
    [
        ("no session cookie", "Cookie"),
        ("forged session cookie", "Cookie"),
        ("no token", "X-CSRF-Token"),
        ("wrong token", "X-CSRF-Token"),
        ("another session's token", "X-CSRF-Token"),
        ("foreign Origin", "Origin"),
        ("no Origin on POST", "Origin"),
        ("Sec-Fetch-Site cross-site", "Sec-Fetch-Site"),
        ("Sec-Fetch-Site same-site", "Sec-Fetch-Site"),
        ("rebound Host", "Host"),
    ],
)
def test_cross_site_calls_are_refused(
    playground: tuple[Stack, str], browser: Callable[[], Browser], case: str, param: str
) -> None:
    stack, key = playground
    b = browser()
    headers = b.headers()
    if case == "no session cookie":
        b.http.cookies.clear()
    elif case == "forged session cookie":
        sid, expires, sig = b.http.cookies[COOKIE_NAME].split(".")
        b.http.cookies.clear()
        b.http.cookies.set(COOKIE_NAME, f"{sid}.{int(expires) + 10**6}.{sig}")
    elif case == "no token":
        del headers["X-CSRF-Token"]
    elif case == "wrong token":
        headers["X-CSRF-Token"] = "A" * len(b.token)
    elif case == "another session's token":
        headers["X-CSRF-Token"] = browser().token
    elif case == "foreign Origin":
        headers["Origin"] = "http://attacker.example"
    elif case == "no Origin on POST":
        del headers["Origin"]
    elif case.startswith("Sec-Fetch-Site"):
        headers["Sec-Fetch-Site"] = case.rsplit(maxsplit=1)[-1]
    elif case == "rebound Host":  # DNS rebinding: the attacker's name, this server's address
        headers["Host"] = "attacker.example:8000"
        headers["Origin"] = "http://attacker.example:8000"
    before = len(stack.queue.list_jobs("studio", limit=100)[0])
    r = b.http.post("/playground/api/generations", headers=headers, json=create_body())
    error = assert_error(r, 403, "invalid_request", param)
    assert key not in r.text
    assert error["message"]
    assert len(stack.queue.list_jobs("studio", limit=100)[0]) == before  # nothing was created


def test_a_rebound_host_gets_no_page(playground: tuple[Stack, str]) -> None:
    stack, _ = playground
    r = httpx.get(stack.base_url + "/", headers={"Host": "attacker.example:8000"})
    assert_error(r, 403, "invalid_request", "Host")
    assert "set-cookie" not in r.headers


def test_off_unless_turned_on(tmp_path: Path) -> None:
    """The distributed default: no page, no playground routes, no assets."""
    stack = start_stack(tmp_path / "api")
    try:
        assert stack.settings.api.playground is False
        with httpx.Client(base_url=stack.base_url) as c:
            assert_error(c.get("/"), 404, "not_found")
            assert_error(c.get("/playground/api/models"), 404, "not_found")
            assert_error(c.get("/playground/static/playground.js"), 404, "not_found")
    finally:
        stack.stop()
    with pytest.raises(ValidationError, match="playground_api_key"):
        Settings(api={"playground": True})
    embedded = embedded_settings(
        EmbeddedPaths(tmp_path), host="127.0.0.1", port=8123, models_dir=tmp_path, playground_key="gw_x"
    )
    assert embedded.api.playground and embedded.api.playground_api_key is not None


def test_sessions_expire_renew_and_belong_to_one_key() -> None:
    now = [1_000_000.0]
    signer = SessionSigner("gw_key_one", ttl_s=600, clock=lambda: now[0])
    session, cookie = signer.issue()
    assert signer.read(cookie) == session
    token = signer.csrf_token(session)
    assert signer.token_matches(session, token) and not signer.token_matches(session, token[:-1] + "x")
    assert SessionSigner("gw_key_two", ttl_s=600).read(cookie) is None  # another key: another secret
    now[0] += 599
    renewed, renewed_cookie = signer.issue(renew=session)
    assert renewed.id == session.id and signer.csrf_token(renewed) == token
    now[0] += 2
    assert signer.read(cookie) is None  # expired
    assert signer.read(renewed_cookie) == renewed
    for bad in ("", "a.b", "a.1.x", f"{cookie}.", "é.1.x", "x" * 300):
        assert signer.read(bad) is None


def test_a_non_loopback_bind_refuses_the_playground_unless_a_setting_says_otherwise(tmp_path: Path) -> None:
    """`genworker up --host 0.0.0.0` used to let any client that reached the port act for the dev project
    without a key (the page hands every visitor a session)."""
    with pytest.raises(ValidationError, match="playground_remote"):
        Settings(api={"host": "0.0.0.0", "playground": True, "playground_api_key": "gw_x"})
    for host in ("127.0.0.1", "localhost", "::1"):
        assert Settings(api={"host": host, "playground": True, "playground_api_key": "gw_x"}).api.playground
    remote = Settings(
        api={"host": "0.0.0.0", "playground": True, "playground_api_key": "gw_x", "playground_remote": True}
    )
    assert remote.api.playground_remote
    paths = EmbeddedPaths(tmp_path)
    wide = embedded_settings(paths, host="0.0.0.0", port=8123, models_dir=tmp_path, playground_key="gw_x")
    assert wide.api.playground is False  # `genworker up --host 0.0.0.0`: the API, without the playground


@pytest.fixture(scope="module")
def remote_playground(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Stack, str]]:
    """A playground told it serves beyond loopback: its browsers must sign in with the key."""
    data = tmp_path_factory.mktemp("playground-remote")
    keys = SqliteKeyStore(data / "keys.db")
    _, key = keys.create("studio", [Scope.generations_read, Scope.generations_write])
    keys.close()
    stack = start_stack(data, api={"playground": True, "playground_api_key": key, "playground_remote": True})
    yield stack, key
    stack.stop()


def test_beyond_loopback_a_browser_signs_in_with_the_key_before_it_may_act(
    remote_playground: tuple[Stack, str],
) -> None:
    stack, key = remote_playground
    same_origin = {"Origin": stack.base_url, "Sec-Fetch-Site": "same-origin"}
    with httpx.Client(base_url=stack.base_url, timeout=30) as anyone:
        page = anyone.get("/")
        assert page.status_code == 200 and 'action="/playground/sign-in"' in page.text
        assert "set-cookie" not in page.headers and TOKEN.search(page.text) is None  # no session, no token
        assert_error(anyone.get("/playground/api/models", headers=same_origin), 403, "invalid_request", "Cookie")
        wrong = anyone.post("/playground/sign-in", data={"key": key[:-1] + "x"}, headers=same_origin)
        assert_error(wrong, 403, "invalid_request", "key")
        assert "set-cookie" not in wrong.headers
        elsewhere = {"Origin": "https://attacker.example", "Sec-Fetch-Site": "cross-site"}
        assert anyone.post("/playground/sign-in", data={"key": key}, headers=elsewhere).status_code == 403
    with httpx.Client(base_url=stack.base_url, timeout=30) as browser:
        signed_in = browser.post("/playground/sign-in", data={"key": key}, headers=same_origin)
        assert signed_in.status_code == 303 and signed_in.headers["location"] == "/"
        assert key not in signed_in.text and key not in signed_in.headers.get("set-cookie", "")
        page = browser.get("/")
        token = TOKEN.search(page.text).group(1)  # type: ignore[union-attr]
        models = browser.get("/playground/api/models", headers={"X-CSRF-Token": token, **same_origin})
        assert models.status_code == 200 and models.json()["data"]
