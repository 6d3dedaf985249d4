"""The sync client: the native API and the seed's worker API over a balanced fleet."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import httpx

from . import _core, _judge
from ._balancer import BackendState, Balancer, Outcome
from .errors import BadAnswerError, ExhaustedError, GatewayError, TransportError

_log = logging.getLogger("captcha_gateway_client")


class GatewayClient:
    """A balancing client over a list of gateways. Thread-safe: share one across threads.

    Probes run in a daemon thread while the client is open; ``close()`` (or ``with``) stops
    them. Settings and their defaults are those of ``_core.settings`` (docs/CLIENTS.md).
    """

    def __init__(self, backends: List[str], key: Optional[str] = None, **options: Any) -> None:
        self._settings = _core.settings(backends, key=key, **options)
        self._balancer: Balancer = _core.balancer(self._settings)
        s = self._settings
        self._http = httpx.Client(
            timeout=httpx.Timeout(None, connect=s.connect_timeout),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=100),
        )
        self._changed = threading.Condition()
        self._balancer.on_change(self._bump)
        self._stop = threading.Event()
        self._prober: Optional[threading.Thread] = None
        if s.probe_interval is not None:
            self._prober = threading.Thread(
                target=self._probe_loop, name="gateway-probes", daemon=True
            )
            self._prober.start()

    # -- the API -------------------------------------------------------------------------

    def solve(
        self,
        kind: str,
        timeout_s: Optional[float] = None,
        idempotency_key: Optional[str] = None,
        **params: Any,
    ) -> Dict[str, Any]:
        """``POST /v1/solve``: the answer (``token``, ``kind``, ``source``, ``expires_at``...)."""
        body = _core.solve_body(kind, params, timeout_s)
        key, scoped = _core.call_key(self._settings, idempotency_key, solve=True)
        address, data = self._send(
            "POST", "/v1/solve", body, _core.deadline(timeout_s), key, request_scoped=scoped
        )
        return _core.as_object(address, data)

    def submit(
        self,
        kind: str,
        timeout_s: Optional[float] = None,
        idempotency_key: Optional[str] = None,
        **params: Any,
    ) -> Tuple[str, str]:
        """``POST /v1/tasks``: ``(task_id, address)``; read it with :meth:`task`."""
        body = _core.solve_body(kind, params, timeout_s)
        key, _ = _core.call_key(self._settings, idempotency_key, solve=False)
        address, data = self._send("POST", "/v1/tasks", body, 0.0, key)
        task_id = _core.as_object(address, data).get("task_id")
        if not isinstance(task_id, str):
            raise BadAnswerError(address, "no task_id in the answer")
        return task_id, address

    def task(
        self, task_id: str, address: Optional[str] = None, wait: float = 0.0
    ) -> Dict[str, Any]:
        """``GET /v1/tasks/{id}?wait=``: asks ``address`` (the gateway that took it) first; a
        read is safe to repeat, so another gateway (on the same Redis) is asked if it fails."""
        path = _core.task_path(task_id, wait)
        answered_by, data = self._send(
            "GET", path, None, float(wait), None, repeatable=True, prefer=address
        )
        return _core.as_object(answered_by, data)

    def worker_solve(self, task: Dict[str, Any]) -> Dict[str, Any]:
        """The seed's worker API, ``POST /solve``: ``{solution, captcha_id}`` or ``{error}``
        (solving errors come with HTTP 200, as in the seed)."""
        key, scoped = _core.call_key(self._settings, None, solve=True)
        address, data = self._send(
            "POST", "/solve", dict(task), 600.0, key, request_scoped=scoped
        )
        return _core.as_object(address, data)

    def backends(self) -> List[BackendState]:
        """Every gateway as the client sees it: outstanding, ejected, served, re-admissions."""
        return self._balancer.snapshot()

    def wait_until(self, predicate: Callable[[List[BackendState]], bool], timeout: float) -> bool:
        """Blocks until ``predicate(backends())`` holds, re-checking on every ejection and
        re-admission (no polling); False if ``timeout`` seconds passed first."""
        with self._changed:
            return self._changed.wait_for(lambda: predicate(self.backends()), timeout)

    def close(self) -> None:
        self._stop.set()
        if self._prober is not None:
            self._prober.join()
        self._http.close()

    def __enter__(self) -> "GatewayClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"GatewayClient({self._settings!r})"

    # -- the retry loop ------------------------------------------------------------------

    def _send(
        self,
        method: str,
        path: str,
        body: Optional[Dict[str, Any]],
        wait: float,
        idempotency_key: Optional[str],
        repeatable: bool = False,
        prefer: Optional[str] = None,
        request_scoped: bool = False,
    ) -> Tuple[str, Any]:
        s = self._settings
        repeatable = repeatable or idempotency_key is not None
        headers = _core.headers(s, idempotency_key, request_scoped)
        tried: List[str] = []
        last: Optional[GatewayError] = None
        for attempt in range(1, s.max_attempts + 1):
            if attempt > 1:
                time.sleep(_core.backoff(s, attempt - 1))
            ticket = self._balancer.pick(avoid=tried, prefer=prefer if not tried else None)
            try:
                outcome, next_ = self._attempt(
                    ticket.address,
                    method,
                    path,
                    body,
                    headers,
                    wait + s.response_margin,
                    repeatable,
                )
            except BaseException:
                # Interrupted: the caller gave up, which says nothing about the gateway.
                self._balancer.abandon(ticket)
                raise
            self._balancer.finish(ticket, outcome)
            if isinstance(next_, _judge.Retry):
                last = next_.error
                tried.append(ticket.address)
                continue
            if isinstance(next_, GatewayError):
                raise next_
            return ticket.address, next_
        raise ExhaustedError(len(tried), last or TransportError("", "no attempt made", sent=False))

    def _attempt(
        self,
        address: str,
        method: str,
        path: str,
        body: Optional[Dict[str, Any]],
        headers: Dict[str, str],
        timeout: float,
        repeatable: bool,
    ) -> Tuple[Outcome, _judge.Next]:
        try:
            res = self._http.request(
                method,
                address + path,
                json=body,
                headers=headers,
                timeout=httpx.Timeout(timeout, connect=self._settings.connect_timeout),
            )
        except httpx.HTTPError as e:
            return _judge.transport(address, e, repeatable)
        return _judge.answer(
            address, res.status_code, res.headers.get("retry-after"), res.content, repeatable
        )

    # -- probes --------------------------------------------------------------------------

    def _probe_loop(self) -> None:
        interval = self._settings.probe_interval or 0.0
        while not self._stop.wait(interval):
            for address in self._balancer.addresses:
                if self._stop.is_set():
                    return
                try:
                    self._probe(address)
                except Exception:
                    # Anything but the network (a bug, say): logged, and probing goes on, so
                    # ejected backends still come back.
                    _log.exception("a probe of %s failed; probing goes on", address)

    def _probe(self, address: str) -> None:
        sent_at = self._balancer.now()
        try:
            res = self._http.get(address + "/health", timeout=self._settings.probe_timeout)
            outcome, load = _judge.probe(res.status_code, res.content)
        except httpx.TimeoutException:
            outcome, load = Outcome.SERVER_ERROR, None
        except httpx.HTTPError:
            outcome, load = Outcome.CONNECT_FAILED, None
        self._balancer.record(address, outcome, sent_at, load)

    def _bump(self) -> None:
        with self._changed:
            self._changed.notify_all()
