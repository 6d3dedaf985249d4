"""The Python balancing client (clients/python) against three gateways, driven by
tests/it/balancing_clients/python.rs through stdin/stdout:

    script: round 0, then prints "KILL" and waits for a line  (the test kills gateway 2)
    script: rounds 1 and 2, waits for its ejection, prints "RESTART", waits for a line
    script: waits for its re-admission, round 3, prints the result as JSON on the last line

usage: balancing.py MODE KEY URL URL URL   (MODE: sync, async or seed)

Every call must succeed; the script exits non-zero (with the failure on stderr) otherwise.
"""

import asyncio
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from captcha_gateway_client import (
    AsyncGatewayClient,
    ClientLoadBalancer,
    EjectionPolicy,
    GatewayClient,
)

CALLS_PER_ROUND = 30
WAIT_S = 60.0
OPTIONS = dict(
    ejection=EjectionPolicy(consecutive_failures=3, base_ejection=0.3, max_ejection=2.0),
    probe_interval=0.05,
)


def target(mode, rnd, i):
    return {"sitekey": f"6Le-py-{mode}-{rnd}-{i}", "pageurl": "https://example.com/login"}


def step(word):
    print(word, flush=True)
    if sys.stdin.readline().strip() != "GO":
        sys.exit(f"expected GO after {word}")


def state(backends, address):
    return next(b for b in backends if b.address == address)


def run_sync(mode, key, urls):
    victim = urls[1].rstrip("/")
    if mode == "seed":
        lb = ClientLoadBalancer(urls, key=key, **OPTIONS)
        client = lb.client

        def call(rnd, i):
            answer = lb.solve(target(mode, rnd, i))
            assert "solution" in answer, f"round {rnd} call {i}: {answer}"
            return answer["solution"]
    else:
        client = GatewayClient(urls, key=key, **OPTIONS)

        def call(rnd, i):
            return client.solve("recaptcha_v2", **target(mode, rnd, i))["token"]

    pool = ThreadPoolExecutor(CALLS_PER_ROUND)

    def round_(rnd):
        return list(pool.map(lambda i: call(rnd, i), range(CALLS_PER_ROUND)))

    tokens = round_(0)
    assert all(b.served > 0 for b in client.backends()), client.backends()
    step("KILL")
    tokens += round_(1)
    assert client.wait_until(lambda bs: state(bs, victim).ejections > 0, WAIT_S), client.backends()
    tokens += round_(2)
    step("RESTART")
    restarted = time.monotonic()
    assert client.wait_until(
        lambda bs: state(bs, victim).readmissions > 0, WAIT_S
    ), client.backends()
    readmit_s = time.monotonic() - restarted
    served = state(client.backends(), victim).served
    tokens += round_(3)
    after = state(client.backends(), victim)
    assert after.served > served, after
    if mode == "sync":
        tokens += tasks_sync(client)
    result = report(tokens, client.backends(), readmit_s)
    pool.shutdown()
    client.close()
    return result


async def run_async(key, urls):
    victim = urls[1].rstrip("/")
    async with AsyncGatewayClient(urls, key=key, **OPTIONS) as client:

        async def round_(rnd):
            answers = await asyncio.gather(
                *(
                    client.solve("recaptcha_v2", **target("async", rnd, i))
                    for i in range(CALLS_PER_ROUND)
                )
            )
            return [a["token"] for a in answers]

        tokens = await round_(0)
        assert all(b.served > 0 for b in client.backends()), client.backends()
        await asyncio.get_running_loop().run_in_executor(None, step, "KILL")
        tokens += await round_(1)
        assert await client.wait_until(lambda bs: state(bs, victim).ejections > 0, WAIT_S)
        tokens += await round_(2)
        await asyncio.get_running_loop().run_in_executor(None, step, "RESTART")
        restarted = time.monotonic()
        assert await client.wait_until(
            lambda bs: state(bs, victim).readmissions > 0, WAIT_S
        ), client.backends()
        readmit_s = time.monotonic() - restarted
        served = state(client.backends(), victim).served
        tokens += await round_(3)
        after = state(client.backends(), victim)
        assert after.served > served, after
        submitted = [
            await client.submit("turnstile", **target("async-task", 4, i)) for i in range(3)
        ]
        for task_id, address in submitted:
            task = await client.task(task_id, address, wait=30)
            assert task["status"] == "ready", task
            tokens.append(task["result"]["token"])
        return report(tokens, client.backends(), readmit_s)


def tasks_sync(client):
    """Three tasks through POST /v1/tasks, read back with the long-poll."""
    submitted = [client.submit("turnstile", **target("sync-task", 4, i)) for i in range(3)]
    assert len({address for _, address in submitted}) == 3, submitted
    tokens = []
    for task_id, address in submitted:
        task = client.task(task_id, address, wait=30)
        assert task["status"] == "ready", task
        tokens.append(task["result"]["token"])
    return tokens


def report(tokens, backends, readmit_s):
    return {
        "tokens": tokens,
        "readmit_s": readmit_s,
        "backends": [b.__dict__ for b in backends],
    }


def main():
    mode, key, urls = sys.argv[1], sys.argv[2], sys.argv[3:]
    if mode == "async":
        result = asyncio.run(run_async(key, urls))
    else:
        result = run_sync(mode, key, urls)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
