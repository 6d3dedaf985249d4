"""The project's Python client at its default settings (only the gateways and the key), 120
callers at once on distinct targets while the test kills a gateway mid-call: 60 through
`GatewayClient.solve`, 30 through `AsyncGatewayClient.solve`, 30 through seed 002's
`ClientLoadBalancer(...).solve({...})`. Driven by tests/it/balancing_clients/mid_call.rs.

usage: mid_call.py KEY URL [URL...]

Prints one JSON object on the last line: {"tokens": [...], "errors": [...]}, one token per
caller answered and one error text per caller that was not.
"""

import asyncio
import json
import sys
from concurrent.futures import ThreadPoolExecutor

from captcha_gateway_client import AsyncGatewayClient, ClientLoadBalancer, GatewayClient

SYNC, ASYNC, SEED = 60, 30, 30
PAGE = "https://mid-call.example.com/login"


def main():
    key, urls = sys.argv[1], sys.argv[2:]
    tokens, errors = [], []

    def outcome(call):
        try:
            tokens.append(call())
        except Exception as e:  # noqa: BLE001: every failure is reported, none hidden
            errors.append(f"{type(e).__name__}: {e}")

    client = GatewayClient(urls, key=key)
    balancer = ClientLoadBalancer(urls, key=key)

    def sync_call(i):
        outcome(lambda: client.solve("recaptcha_v2", sitekey=f"6Le-mid-sync-{i}", pageurl=PAGE)["token"])

    def seed_call(i):
        def call():
            answer = balancer.solve({"sitekey": f"6Le-mid-seed-{i}", "pageurl": PAGE})
            if "solution" not in answer:
                raise RuntimeError(f"worker error: {answer}")
            return answer["solution"]

        outcome(call)

    async def async_calls():
        async with AsyncGatewayClient(urls, key=key) as aclient:

            async def one(i):
                try:
                    answer = await aclient.solve(
                        "recaptcha_v2", sitekey=f"6Le-mid-async-{i}", pageurl=PAGE
                    )
                    tokens.append(answer["token"])
                except Exception as e:  # noqa: BLE001
                    errors.append(f"{type(e).__name__}: {e}")

            await asyncio.gather(*(one(i) for i in range(ASYNC)))

    with ThreadPoolExecutor(SYNC + SEED + 1) as pool:
        jobs = [pool.submit(sync_call, i) for i in range(SYNC)]
        jobs += [pool.submit(seed_call, i) for i in range(SEED)]
        jobs.append(pool.submit(asyncio.run, async_calls()))
        for job in jobs:
            job.result()
    client.close()
    balancer.close()
    print(json.dumps({"tokens": tokens, "errors": errors}), flush=True)


if __name__ == "__main__":
    main()
