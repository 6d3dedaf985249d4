"""What the sync and the asyncio client share: settings and their checks, request bodies,
the retry schedule. The HTTP exchanges themselves are in ``_sync`` and ``_async``."""

from __future__ import annotations

import math
import random
import re
import urllib.parse
import uuid
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Optional, Tuple

from ._balancer import Balancer, EjectionPolicy, Strategy
from .errors import BadAnswerError, ConfigError

LONGEST = 3600.0


def backend_url(url: str) -> str:
    """``url`` as a base URL: http(s), a host, no credentials, query or trailing slash."""
    if not isinstance(url, str):
        raise ConfigError(f"backends: {url!r} is not a string; use 'http://host:port'")
    parsed = urllib.parse.urlsplit(url.strip())
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise ConfigError(
            f"backends: {url!r} is not an http(s) URL with a host; use http://host:port"
        )
    if parsed.username or parsed.password:
        raise ConfigError(
            f"backends: the URL for {parsed.hostname} carries credentials; pass key= instead"
        )
    if parsed.query or parsed.fragment:
        raise ConfigError(f"backends: {url!r} has a query or fragment; give the base URL only")
    return urllib.parse.urlunsplit((parsed.scheme, parsed.netloc, parsed.path, "", "")).rstrip("/")


def _seconds(name: str, value: Any, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise ConfigError(f"{name}: {value!r} is not a number of seconds")
    if not low <= value <= high:
        raise ConfigError(f"{name}: {value} is out of range; use {low} to {high} seconds")
    return float(value)


@dataclass(frozen=True)
class Settings:
    backends: List[str]
    key: Optional[str]
    strategy: Strategy
    policy: EjectionPolicy
    max_attempts: int
    retry_base: float
    retry_cap: float
    probe_interval: Optional[float]
    probe_timeout: float
    connect_timeout: float
    response_margin: float
    generated_idempotency_keys: bool

    def __repr__(self) -> str:
        # The key is never printed.
        return f"Settings(backends={self.backends!r}, strategy={self.strategy.value})"


def settings(
    backends: Iterable[str],
    key: Optional[str] = None,
    strategy: Strategy = Strategy.LEAST_OUTSTANDING,
    ejection: Optional[EjectionPolicy] = None,
    max_attempts: int = 3,
    retry_base: float = 0.05,
    retry_cap: float = 1.0,
    probe_interval: Optional[float] = 5.0,
    probe_timeout: float = 2.0,
    connect_timeout: float = 2.0,
    response_margin: float = 10.0,
    generated_idempotency_keys: bool = True,
) -> Settings:
    urls = [backend_url(u) for u in backends]
    if not urls:
        raise ConfigError(
            "backends: no gateway URL given; pass at least one, e.g. http://10.0.0.11:8080"
        )
    if len(set(urls)) != len(urls):
        raise ConfigError("backends: a gateway is listed twice; list each once")
    if (
        isinstance(max_attempts, bool)
        or not isinstance(max_attempts, int)
        or not 1 <= max_attempts <= 10
    ):
        raise ConfigError(f"max_attempts: {max_attempts!r} is out of range; use 1 to 10")
    policy = ejection or EjectionPolicy()
    if (
        isinstance(policy.consecutive_failures, bool)
        or not isinstance(policy.consecutive_failures, int)
        or not 1 <= policy.consecutive_failures <= 1000
    ):
        raise ConfigError("consecutive_failures: use a whole number from 1 to 1000")
    base = _seconds("base_ejection", policy.base_ejection, 0.001, LONGEST)
    cap = _seconds("max_ejection", policy.max_ejection, base, LONGEST)
    if probe_interval is not None:
        probe_interval = _seconds("probe_interval", probe_interval, 0.01, LONGEST)
    if not isinstance(generated_idempotency_keys, bool):
        raise ConfigError("generated_idempotency_keys: use True or False")
    return Settings(
        backends=urls,
        key=key,
        strategy=Strategy(strategy),
        policy=EjectionPolicy(policy.consecutive_failures, base, cap),
        max_attempts=max_attempts,
        retry_base=_seconds("retry_base", retry_base, 0.0, LONGEST),
        retry_cap=_seconds("retry_cap", retry_cap, 0.0, LONGEST),
        probe_interval=probe_interval,
        probe_timeout=_seconds("probe_timeout", probe_timeout, 0.001, LONGEST),
        connect_timeout=_seconds("connect_timeout", connect_timeout, 0.001, LONGEST),
        response_margin=_seconds("response_margin", response_margin, 0.0, LONGEST),
        generated_idempotency_keys=generated_idempotency_keys,
    )


def balancer(s: Settings, seed: Optional[int] = None) -> Balancer:
    return Balancer(s.backends, s.strategy, s.policy, seed=seed)


def backoff(s: Settings, retry: int) -> float:
    """Full jitter below ``min(cap, base * 2^(retry-1))``: spreads callers refused together."""
    ceiling = min(s.retry_cap, s.retry_base * (2 ** min(retry - 1, 30)))
    return random.uniform(0.0, ceiling)


def call_key(
    s: Settings, idempotency_key: Optional[str], solve: bool
) -> Tuple[Optional[str], bool]:
    """The call's idempotency key, and whether the gateway is told it names only this request.

    The caller's own key wins. Without one, a key is generated (128 random bits) unless
    ``generated_idempotency_keys=False``: with it, a call whose gateway died after it was sent is
    sent to another, which on a shared Redis resumes the same task. A generated key on a solve is
    sent with ``Idempotency-Scope: request``, so the task ends when its callers leave, as a call
    without a key does; a task for later (``submit``) outlives its request either way."""
    if idempotency_key is not None:
        return idempotency_key, False
    if not s.generated_idempotency_keys:
        return None, False
    return "cgc-" + uuid.uuid4().hex, solve


def headers(s: Settings, idempotency_key: Optional[str], request_scoped: bool) -> Dict[str, str]:
    h = {"Accept": "application/json"}
    if s.key is not None:
        h["Authorization"] = f"Bearer {s.key}"
    if idempotency_key is not None:
        h["Idempotency-Key"] = idempotency_key
        if request_scoped:
            h["Idempotency-Scope"] = "request"
    return h


def solve_body(kind: str, params: Dict[str, Any], timeout_s: Optional[float]) -> Dict[str, Any]:
    """A native body: ``kind``, the kind's parameters, and ``timeout_s`` (0 < t <= 600)."""
    if not isinstance(kind, str) or not kind:
        raise ConfigError("kind: give the CAPTCHA kind, e.g. 'recaptcha_v2'")
    body = dict(params)
    body["kind"] = kind
    if timeout_s is not None:
        body["timeout_s"] = _seconds("timeout_s", timeout_s, 0.001, 600.0)
    return body


def deadline(timeout_s: Optional[float]) -> float:
    """The gateway's own deadline for a solve (its default is 180 s)."""
    return 180.0 if timeout_s is None else float(timeout_s)


_TASK_ID = re.compile(r"[A-Za-z0-9_:-][A-Za-z0-9_.:-]{0,63}")


def task_path(task_id: str, wait: float) -> str:
    if not isinstance(task_id, str) or not _TASK_ID.fullmatch(task_id):
        raise ConfigError(f"task_id: {task_id!r} is not a task id; pass the id submit() returned")
    wait = _seconds("wait", wait, 0.0, 600.0)
    return f"/v1/tasks/{task_id}?wait={wait:g}"


def as_object(address: str, data: Any) -> Dict[str, Any]:
    """An answer's JSON, which must be an object."""
    if not isinstance(data, dict):
        raise BadAnswerError(address, f"expected a JSON object, got {type(data).__name__}")
    return data
