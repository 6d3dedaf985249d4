"""One keyed call through the Python client (clients/python), driven by
tests/it/balancing_clients/keyed.rs: the test breaks the gateway that runs the call (resets its
connection, or shuts it down) and the client must move the call, with its Idempotency-Key, to
the other gateway. Prints the answer's token and the client's view of its backends as JSON.

usage: keyed_retry.py MODE KEY IDEMPOTENCY_KEY SITEKEY URL URL   (MODE: sync or async)
"""

import asyncio
import json
import sys

from captcha_gateway_client import AsyncGatewayClient, GatewayClient

OPTIONS = dict(probe_interval=None, retry_base=0.01, retry_cap=0.05)


def backends(states):
    return [{"address": b.address, "served": b.served, "failures": b.failures} for b in states]


def run_sync(key, idem, sitekey, urls):
    with GatewayClient(urls, key=key, **OPTIONS) as client:
        answer = client.solve(
            "recaptcha_v2",
            idempotency_key=idem,
            sitekey=sitekey,
            pageurl="https://keyed.example.com/",
        )
        return answer["token"], backends(client.backends())


async def run_async(key, idem, sitekey, urls):
    async with AsyncGatewayClient(urls, key=key, **OPTIONS) as client:
        answer = await client.solve(
            "recaptcha_v2",
            idempotency_key=idem,
            sitekey=sitekey,
            pageurl="https://keyed.example.com/",
        )
        return answer["token"], backends(client.backends())


def main():
    mode, key, idem, sitekey, *urls = sys.argv[1:]
    if mode == "sync":
        token, states = run_sync(key, idem, sitekey, urls)
    else:
        token, states = asyncio.run(run_async(key, idem, sitekey, urls))
    print(json.dumps({"token": token, "backends": states}), flush=True)


if __name__ == "__main__":
    main()
