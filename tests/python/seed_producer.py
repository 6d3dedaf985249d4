"""A producer written seed 003's way (its `submit_tasks` / `get_results`): `rpush` of
`{"id", "method", "params"}` entries to `captcha:queue`, then `hget` of `captcha:results` for
every id once a second until all are in or the deadline passes. Our own code, written to the
seed's documented format, to check that `worker --seed-queue` serves such a producer unchanged.

Usage: seed_producer.py REDIS_URL COUNT TIMEOUT_S [SITEKEY]
Prints {"ids": [...], "results": {id: result}} as JSON.
"""

import json
import sys
import time
import uuid

import redis


def submit_tasks(redis_url, tasks):
    r = redis.from_url(redis_url)
    task_ids = []
    for task in tasks:
        task_id = str(uuid.uuid4())[:8]
        task["id"] = task_id
        r.rpush("captcha:queue", json.dumps(task))
        task_ids.append(task_id)
    return task_ids


def get_results(redis_url, task_ids, timeout=180):
    r = redis.from_url(redis_url)
    results = {}
    deadline = time.time() + timeout
    while len(results) < len(task_ids) and time.time() < deadline:
        for tid in task_ids:
            if tid in results:
                continue
            raw = r.hget("captcha:results", tid)
            if raw:
                results[tid] = json.loads(raw)
        time.sleep(1)
    return results


def main():
    redis_url, count, timeout = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    sitekey = sys.argv[4] if len(sys.argv) > 4 else "6Le-seed-producer"
    tasks = [
        {
            "method": "userrecaptcha",
            "params": {"googlekey": sitekey, "pageurl": f"https://shop.example/login/{i}"},
        }
        for i in range(count)
    ]
    ids = submit_tasks(redis_url, tasks)
    results = get_results(redis_url, ids, timeout)
    print(json.dumps({"ids": ids, "results": results}))


if __name__ == "__main__":
    main()
