"""The HTTP paths of both clients against real local HTTP servers: what each call sends (the
gateway key, the idempotency key and its scope) and when a call that may have started is sent
to another gateway (a connection lost after sending, a proxy's 502) or not.

Each server is a ``ThreadingHTTPServer`` on a free loopback port, scripted per request: answer
with JSON, drop the connection after reading the request (a gateway killed mid-call), or answer
a proxy's 502 page. The full behaviour against real gateways (one Redis, a killed instance, the
provider task resumed, not paid twice) is tested by the project's Rust suite
(``tests/it/balancing_clients``)."""

import asyncio
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from captcha_gateway_client import (
    AsyncGatewayClient,
    ClientLoadBalancer,
    ExhaustedError,
    GatewayClient,
    TransportError,
)

KEY = "k" * 32
ANSWER = {"token": "tok-1", "kind": "recaptcha_v2", "source": "solve"}


class Fleet:
    """Gateways that share one script: the n-th request overall gets ``script[n]`` (the last
    entry repeats). Records every request as (server index, method, path, headers, body)."""

    def __init__(self, count, script):
        self.script = script
        self.requests = []
        self.lock = threading.Lock()
        self.servers = [self._server(i) for i in range(count)]
        for server in self.servers:
            threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()

    @property
    def urls(self):
        return [f"http://127.0.0.1:{s.server_address[1]}" for s in self.servers]

    def _server(self, index):
        fleet = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _handle(self):
                length = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                if self.path == "/health":
                    return self._reply(200, {"status": "ok", "load_pct": 0})
                with fleet.lock:
                    n = len(fleet.requests)
                    fleet.requests.append(
                        (index, self.command, self.path, dict(self.headers), body)
                    )
                    step = fleet.script[min(n, len(fleet.script) - 1)]
                if step == "drop":
                    # Killed mid-call: the request was read, no answer comes.
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return None
                if step == "502":
                    page = b"<html><body>502 Bad Gateway</body></html>"
                    self.send_response(502)
                    self.send_header("content-type", "text/html")
                    self.send_header("content-length", str(len(page)))
                    self.end_headers()
                    return self.wfile.write(page)
                return self._reply(200, step)

            def _reply(self, status, data):
                raw = json.dumps(data).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            do_GET = _handle
            do_POST = _handle

        return ThreadingHTTPServer(("127.0.0.1", 0), Handler)

    def close(self):
        for server in self.servers:
            server.shutdown()
            server.server_close()


@pytest.fixture
def fleet_of():
    made = []

    def make(count, script):
        fleet = Fleet(count, script)
        made.append(fleet)
        return fleet

    yield make
    for fleet in made:
        fleet.close()


def options(**extra):
    return dict(key=KEY, probe_interval=None, retry_base=0.0, retry_cap=0.0, **extra)


def header(request, name):
    return {k.lower(): v for k, v in request[3].items()}.get(name.lower())


def test_a_solve_carries_the_gateway_key_and_a_generated_request_scoped_idempotency_key(fleet_of):
    fleet = fleet_of(1, [ANSWER])
    with GatewayClient(fleet.urls, **options()) as client:
        assert client.solve("recaptcha_v2", sitekey="6Le", pageurl="https://a.example/")["token"]
        client.solve("recaptcha_v2", sitekey="6Le", pageurl="https://a.example/")
    first, second = fleet.requests
    assert first[1:3] == ("POST", "/v1/solve")
    assert first[4] == {"kind": "recaptcha_v2", "sitekey": "6Le", "pageurl": "https://a.example/"}
    assert header(first, "authorization") == f"Bearer {KEY}"
    assert header(first, "idempotency-key").startswith("cgc-")
    assert header(first, "idempotency-scope") == "request"
    assert header(first, "idempotency-key") != header(second, "idempotency-key"), "one per call"


def test_a_solve_whose_gateway_died_mid_call_goes_to_another_under_the_same_key(fleet_of):
    fleet = fleet_of(2, ["drop", ANSWER])
    with GatewayClient(fleet.urls, **options()) as client:
        answer = client.solve("recaptcha_v2", sitekey="6Le", pageurl="https://a.example/")
        states = {b.address: b for b in client.backends()}
    assert answer == ANSWER
    dropped, resent = fleet.requests
    assert dropped[0] != resent[0], "sent to the other gateway"
    assert header(dropped, "idempotency-key") == header(resent, "idempotency-key")
    assert header(resent, "idempotency-scope") == "request"
    assert states[fleet.urls[resent[0]]].served == 1


def test_a_proxys_502_page_is_sent_again_under_the_same_key(fleet_of):
    fleet = fleet_of(2, ["502", ANSWER])
    with GatewayClient(fleet.urls, **options()) as client:
        assert client.solve("turnstile", sitekey="0x4", pageurl="https://a.example/") == ANSWER
    bad, resent = fleet.requests
    assert header(bad, "idempotency-key") == header(resent, "idempotency-key")


def test_the_callers_own_key_wins_and_is_not_request_scoped(fleet_of):
    fleet = fleet_of(2, ["drop", ANSWER])
    with GatewayClient(fleet.urls, **options()) as client:
        client.solve("recaptcha_v2", idempotency_key="order-17", sitekey="6Le", pageurl="https://a/")
    for request in fleet.requests:
        assert header(request, "idempotency-key") == "order-17"
        assert header(request, "idempotency-scope") is None
    assert len(fleet.requests) == 2


def test_with_generated_keys_off_a_call_that_may_have_started_is_not_sent_again(fleet_of):
    fleet = fleet_of(2, ["drop", ANSWER])
    with GatewayClient(fleet.urls, **options(generated_idempotency_keys=False)) as client:
        with pytest.raises(TransportError) as raised:
            client.solve("recaptcha_v2", sitekey="6Le", pageurl="https://a.example/")
    assert raised.value.sent
    assert len(fleet.requests) == 1
    assert header(fleet.requests[0], "idempotency-key") is None


def test_a_submit_carries_a_generated_key_that_outlives_its_request(fleet_of):
    fleet = fleet_of(1, [{"task_id": "42"}])
    with GatewayClient(fleet.urls, **options()) as client:
        task_id, address = client.submit("recaptcha_v2", sitekey="6Le", pageurl="https://a/")
    assert (task_id, address) == ("42", fleet.urls[0])
    request = fleet.requests[0]
    assert request[1:3] == ("POST", "/v1/tasks")
    assert header(request, "idempotency-key").startswith("cgc-")
    assert header(request, "idempotency-scope") is None


def test_the_seed_balancer_resends_a_solve_its_worker_dropped(fleet_of):
    answer = {"solution": "tok-2", "captcha_id": "9"}
    fleet = fleet_of(2, ["drop", answer])
    with ClientLoadBalancer(fleet.urls, **options()) as lb:
        assert lb.solve({"sitekey": "6Le", "pageurl": "https://a/", "method": "userrecaptcha"}) == answer
    dropped, resent = fleet.requests
    assert dropped[2] == resent[2] == "/solve"
    assert header(dropped, "idempotency-key") == header(resent, "idempotency-key")
    assert header(resent, "idempotency-scope") == "request"


def test_every_attempt_dropped_ends_in_exhausted_naming_the_last_error(fleet_of):
    fleet = fleet_of(2, ["drop"])
    with GatewayClient(fleet.urls, **options(max_attempts=2)) as client:
        with pytest.raises(ExhaustedError) as raised:
            client.solve("recaptcha_v2", sitekey="6Le", pageurl="https://a/")
    assert isinstance(raised.value.last, TransportError)
    assert len(fleet.requests) == 2
    assert len({header(r, "idempotency-key") for r in fleet.requests}) == 1


def test_the_async_client_resends_a_dropped_solve_under_the_same_key(fleet_of):
    fleet = fleet_of(2, ["drop", ANSWER])

    async def run():
        async with AsyncGatewayClient(fleet.urls, **options()) as client:
            return await client.solve("recaptcha_v2", sitekey="6Le", pageurl="https://a/")

    assert asyncio.run(run()) == ANSWER
    dropped, resent = fleet.requests
    assert dropped[0] != resent[0]
    assert header(dropped, "idempotency-key") == header(resent, "idempotency-key")
    assert header(resent, "idempotency-scope") == "request"


def test_generated_keys_must_be_a_bool():
    from captcha_gateway_client import ConfigError

    with pytest.raises(ConfigError, match="generated_idempotency_keys"):
        GatewayClient(["http://127.0.0.1:1"], generated_idempotency_keys="yes")
