"""The seed stack's worker, for `captcha-gateway bench seed-stack` (docs/BENCHMARKS.md).

What it models: the worker API of seed 002 (a Flask app run on gunicorn behind a load balancer:
`POST /solve`, `GET /health` with its load, an active-task counter under a lock, and a
`MAX_CONCURRENT` above which `/solve` answers 503 `WORKER_AT_CAPACITY`), whose solve first takes a
cached token from the Redis token cache of seed 000 (one list per target, named
`captcha:token:{sitekey}:{pageurl}`, filled with RPUSH + EXPIRE; a token is taken with LPOP and
kept only if the list's remaining TTL is above 10 s). It is our own code written to the seeds'
documented behaviour, not a copy of their listings.

Only the cache-hit path is modelled: the bench keeps the list full, so the figure is what this
stack does per cached answer. A miss answers 503 `{"error": "CACHE_MISS"}` instead of starting an
upstream solve (the bench counts it as a failed run).

Request: `POST /solve` with a JSON body `{"sitekey": "...", "pageurl": "..."}` (the field names of
seed 002's client). Answers: 200 `{"token": "..."}`; 503 `{"error": "CACHE_MISS"}` or
`{"error": "WORKER_AT_CAPACITY"}`; 400 `{"error": "BAD_REQUEST"}` without both fields.

Environment: `REDIS_HOST` (default localhost), `REDIS_PORT` (6379), `MAX_CONCURRENT` (20, seed
002's default; the bench sets 64). Run (the bench does this, 2 processes x 32 threads):

    python -m gunicorn --chdir bench/seed_stack --worker-class gthread --workers 2 \
        --threads 32 --bind 127.0.0.1:8080 app:app
"""

import os
import threading

import redis
from flask import Flask, jsonify, request

# A token with less left than this on its list is not worth handing out (seed 000's margin).
MIN_TTL_S = 10
MAX_CONCURRENT = int(os.environ.get("MAX_CONCURRENT", "20"))

# One client per process; its connection pool is thread-safe and grows to the thread count.
cache = redis.Redis(
    host=os.environ.get("REDIS_HOST", "localhost"),
    port=int(os.environ.get("REDIS_PORT", "6379")),
    decode_responses=True,
)

app = Flask(__name__)

# Solves in progress in this process (gunicorn runs one counter per worker process).
active_tasks = 0
active_lock = threading.Lock()


def cache_key(sitekey, pageurl):
    return f"captcha:token:{sitekey}:{pageurl}"


def take_cached(sitekey, pageurl):
    """The next cached token of the target, or None.

    LPOP hands each token to one caller only. The TTL read after it is the list's: when the pop
    emptied the list, the key is gone (TTL -2) and the popped token is dropped too, as in
    seed 000.
    """
    key = cache_key(sitekey, pageurl)
    token = cache.lpop(key)
    if token is not None and cache.ttl(key) > MIN_TTL_S:
        return token
    return None


@app.post("/solve")
def solve():
    global active_tasks
    with active_lock:
        if active_tasks >= MAX_CONCURRENT:
            return jsonify(error="WORKER_AT_CAPACITY"), 503
        active_tasks += 1
    try:
        body = request.get_json(silent=True) or {}
        sitekey, pageurl = body.get("sitekey"), body.get("pageurl")
        if not sitekey or not pageurl:
            return jsonify(error="BAD_REQUEST"), 400
        token = take_cached(sitekey, pageurl)
        if token is None:
            return jsonify(error="CACHE_MISS"), 503
        return jsonify(token=token)
    finally:
        with active_lock:
            active_tasks -= 1


@app.get("/health")
def health():
    with active_lock:
        active = active_tasks
    load = active / MAX_CONCURRENT
    healthy = load < 0.9
    body = {
        "status": "healthy" if healthy else "overloaded",
        "active_tasks": active,
        "max_concurrent": MAX_CONCURRENT,
        "load_pct": round(load * 100, 1),
    }
    return jsonify(body), 200 if healthy else 503
