"""The probe loops: they go on after a failure that is not the network's, and the asyncio
client's stops once the client is dropped without ``aclose()``."""

import asyncio
import logging
import threading

from captcha_gateway_client import AsyncGatewayClient, GatewayClient

# Nothing listens on port 1: every probe fails to connect, which the balancer records.
NOWHERE = "http://127.0.0.1:1"


def failing_once(record, on_second):
    """``record`` that raises on its first call, and calls ``on_second`` on its second."""
    calls = []

    def wrapped(*args):
        calls.append(args)
        if len(calls) == 1:
            raise RuntimeError("a bug in the balancer")
        if len(calls) == 2:
            on_second()
        return record(*args)

    return wrapped


def test_the_sync_probe_loop_goes_on_after_a_failure_not_of_the_network(caplog):
    client = GatewayClient([NOWHERE], probe_interval=0.01)
    again = threading.Event()
    client._balancer.record = failing_once(client._balancer.record, again.set)
    try:
        assert again.wait(10), "probing stopped after the failure"
    finally:
        client.close()
    assert any("probing goes on" in r.getMessage() for r in caplog.records)


def test_the_async_probe_loop_goes_on_after_a_failure_not_of_the_network(caplog):
    async def main():
        async with AsyncGatewayClient([NOWHERE], probe_interval=0.01) as client:
            again = asyncio.Event()
            client._balancer.record = failing_once(client._balancer.record, again.set)
            await asyncio.wait_for(again.wait(), 10)

    with caplog.at_level(logging.ERROR, logger="captcha_gateway_client"):
        asyncio.run(main())
    assert any("probing goes on" in r.getMessage() for r in caplog.records)


def test_an_async_client_dropped_without_aclose_stops_probing():
    async def main():
        client = AsyncGatewayClient([NOWHERE], probe_interval=0.01)
        client._start_probes()
        task = client._prober
        del client
        # The task ends by itself once the client is gone; nothing cancels it.
        await asyncio.wait_for(task, 10)
        assert task.exception() is None

    asyncio.run(main())
