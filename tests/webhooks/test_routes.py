"""``/v1/webhooks`` over a real uvicorn, SQLite queue and key store; the outbound rules at registration."""

from __future__ import annotations

import ssl
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from api.api_keys import Scope, SqliteKeyStore
from api.app import create_app
from api.errors import UrlRefused
from api.webhooks.outbound_transport import GuardedTransport
from api.webhooks.sender import Sender
from api.webhooks.service import Webhooks, open_webhooks
from foundation.core.catalog import Catalog, load_catalog
from foundation.queue.factory import open_queue
from foundation.settings import WebhookSettings
from foundation.stores.factory import open_store
from genworker_client import verify_webhook
from tests.e2e.conftest import free_port, serve_app
from tests.webhooks.conftest import Receiver, hook_settings, run_job

REFUSED = [
    "http://93.184.216.34/hook",  # plain http to a host not allowed
    "ftp://93.184.216.34/hook",
    "https://user:pw@93.184.216.34/hook",
    "https://127.0.0.1/hook",
    "https://10.1.2.3/hook",
    "https://172.16.0.1/hook",
    "https://192.168.0.1/hook",
    "https://100.64.0.1/hook",  # carrier-grade NAT
    "https://0.0.0.0/hook",
    "https://169.254.169.254/latest/meta-data/",  # cloud metadata
    "https://[::1]/hook",
    "https://[fd00:ec2::254]/hook",  # AWS metadata over IPv6
    "https://[::ffff:169.254.169.254]/hook",
    "https://localhost/hook",  # a name that resolves to loopback
    "https://nonexistent.invalid/hook",
]


@pytest.mark.parametrize("url", REFUSED)
def test_outbound_rules_refuse(url: str) -> None:
    transport = GuardedTransport(WebhookSettings())
    try:
        with pytest.raises(UrlRefused):
            transport.check_url(url)
    finally:
        transport.close()


def test_outbound_rules_allow_public_https_and_allowed_hosts() -> None:
    transport = GuardedTransport(WebhookSettings(allowed_hosts=["127.0.0.1:*"]))
    try:
        transport.check_url("https://93.184.216.34/hook")
        transport.check_url("http://127.0.0.1:9/hook")
        with pytest.raises(UrlRefused):
            transport.check_url("http://localhost:9/hook")  # allowed by IP literal only
    finally:
        transport.close()


class Api:
    def __init__(self, data_dir: Path, hooks: dict[str, object]) -> None:
        self.settings = hook_settings(data_dir, **hooks)
        self.queue = open_queue(self.settings.queue)
        self.keys = SqliteKeyStore(data_dir / "keys.db")
        self.webhooks: Webhooks = open_webhooks(self.settings)
        port = free_port()
        app = create_app(
            self.settings,
            queue=self.queue,
            store=open_store(self.settings.store, data_dir=str(data_dir)),
            catalog=load_catalog(),
            keys=self.keys,
            webhooks=self.webhooks,
        )
        self.server, self.thread = serve_app(app, port)
        self.base_url = f"http://127.0.0.1:{port}"
        self.tokens = {
            "alpha": self.keys.create("alpha", [Scope.generations_read, Scope.generations_write])[1],
            "alpha_read": self.keys.create("alpha", [Scope.generations_read])[1],
            "beta": self.keys.create("beta", [Scope.generations_read, Scope.generations_write])[1],
        }

    def client(self, name: str) -> httpx.Client:
        return httpx.Client(base_url=self.base_url, headers={"Authorization": f"Bearer {self.tokens[name]}"})

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=15)
        self.webhooks.close()
        self.queue.close()
        self.keys.close()


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Api]:
    a = Api(tmp_path, {})
    yield a
    a.stop()


def test_registration_refuses_with_a_coded_400(tmp_path: Path) -> None:
    api = Api(tmp_path, {"allowed_hosts": []})
    try:
        with api.client("alpha") as c:
            for url in [
                "https://127.0.0.1/h",
                "https://localhost/h",
                "https://169.254.169.254/",
                "http://127.0.0.1:9/h",
            ]:
                r = c.post("/v1/webhooks", json={"url": url})
                assert r.status_code == 400, r.text
                assert r.json()["error"]["code"] == "invalid_webhook_url" and r.json()["error"]["param"] == "url"
        assert api.webhooks.store.list_endpoints() == []
    finally:
        api.stop()


def test_register_list_deliveries_redeliver(api: Api, receiver: Receiver, catalog: Catalog) -> None:
    with api.client("alpha") as c, api.client("beta") as other, api.client("alpha_read") as reader:
        assert c.post("/v1/webhooks", json={"url": receiver.url, "extra": 1}).status_code == 400
        assert c.post("/v1/webhooks", json={"url": receiver.url, "events": ["generation.nope"]}).status_code == 400
        assert reader.post("/v1/webhooks", json={"url": receiver.url}).status_code == 403
        r = c.post("/v1/webhooks", json={"url": receiver.url, "events": ["generation.succeeded"]})
        assert r.status_code == 201, r.text
        created = r.json()
        secret, endpoint_id = created["secret"], created["id"]
        assert secret.startswith("whsec_") and created["events"] == ["generation.succeeded"]
        listed = reader.get("/v1/webhooks").json()["data"]
        assert [e["id"] for e in listed] == [endpoint_id] and "secret" not in listed[0]
        assert other.get("/v1/webhooks").json()["data"] == []
        assert other.get(f"/v1/webhooks/{endpoint_id}/deliveries").status_code == 404

        record = run_job(api.queue, catalog, "alpha")
        sender = Sender(
            api.queue, api.webhooks.store, api.webhooks.sealer, api.webhooks.transport, api.settings.webhooks
        )
        deadline = time.monotonic() + 10

        def delivered() -> bool:  # attempts run in the sender's pool: wait for the write-back, not the POST
            found = api.webhooks.store.list_deliveries(endpoint_id)
            return bool(found) and found[0].state.value == "delivered"

        while not delivered():
            assert time.monotonic() < deadline
            if not sender.run_once():
                time.sleep(0.02)
        log = reader.get(f"/v1/webhooks/{endpoint_id}/deliveries").json()["data"]
        assert [(d["generation_id"], d["state"], d["attempt_count"]) for d in log] == [(record.id, "delivered", 1)]
        assert log[0]["attempts"][0]["status_code"] == 200 and "body" not in log[0]
        delivery = log[0]["id"]

        assert other.post(f"/v1/webhooks/{endpoint_id}/deliveries/{delivery}/redeliver").status_code == 404
        r = c.post(f"/v1/webhooks/{endpoint_id}/deliveries/{delivery}/redeliver")
        assert r.status_code == 202 and r.json()["state"] == "pending"
        while len(receiver.received) < 2 or not delivered():
            assert time.monotonic() < deadline
            if not sender.run_once():
                time.sleep(0.02)
        sender.close()
        first, again = receiver.received
        assert first.webhook_id == again.webhook_id == delivery and first.body == again.body
        assert verify_webhook(again.headers, again.body, secret)["data"]["id"] == record.id

        assert other.delete(f"/v1/webhooks/{endpoint_id}").status_code == 404
        assert c.delete(f"/v1/webhooks/{endpoint_id}").status_code == 204
        assert reader.get("/v1/webhooks").json()["data"] == []


def _tls_receiver(tmp_path: Path, name: str) -> tuple[Any, ssl.SSLContext, dict[str, str]]:
    """An https server on loopback with a certificate for ``name`` only, the context that trusts it,
    and what it saw (SNI, Host)."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.now(UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=1))
        .not_valid_after(now + timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    seen: dict[str, str] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["content-length"]))
            seen["host"] = self.headers["host"]
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_path, key_path)
    context.sni_callback = lambda sock, sni, ctx: seen.__setitem__("sni", sni or "")  # type: ignore[func-returns-value]
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    return server, ssl.create_default_context(cafile=str(cert_path)), seen


def test_https_goes_to_the_checked_address_with_the_name_verified(tmp_path: Path) -> None:
    server, trust, seen = _tls_receiver(tmp_path, "localhost")
    port = server.server_address[1]
    transport = GuardedTransport(WebhookSettings(allowed_hosts=["localhost:*", "127.0.0.1:*"]), verify=trust)
    try:
        result = transport.post(f"https://localhost:{port}/hook", b"{}", {"webhook-id": "msg_1"})
        assert result.status_code == 204, result.error
        assert seen == {"sni": "localhost", "host": f"localhost:{port}"}  # connected to 127.0.0.1 by address
        wrong = transport.post(f"https://127.0.0.1:{port}/hook", b"{}", {})  # the cert is not for this name
        assert wrong.status_code is None and wrong.error is not None and "CERTIFICATE_VERIFY_FAILED" in wrong.error
    finally:
        transport.close()
        server.shutdown()
        server.server_close()
