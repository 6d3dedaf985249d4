"""The asyncio client: the same semantics as ``GatewayClient``, on one event loop."""

from __future__ import annotations

import asyncio
import logging
import weakref
from typing import Any, Callable, Dict, List, Optional, Tuple

import httpx

from . import _core, _judge
from ._balancer import BackendState, Balancer, Outcome
from .errors import BadAnswerError, ExhaustedError, GatewayError, TransportError


_log = logging.getLogger("captcha_gateway_client")


class AsyncGatewayClient:
    """A balancing asyncio client over a list of gateways. Use it on one event loop, as
    ``async with AsyncGatewayClient([...]) as client:``; probes run as a task while it is open.
    Used without ``async with``, probes start with the first call and stop at ``aclose()`` or,
    at the latest, once the client is garbage-collected.
    """

    def __init__(self, backends: List[str], key: Optional[str] = None, **options: Any) -> None:
        self._settings = _core.settings(backends, key=key, **options)
        self._balancer: Balancer = _core.balancer(self._settings)
        self._http = httpx.AsyncClient(
            timeout=httpx.Timeout(None, connect=self._settings.connect_timeout),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=100),
        )
        self._changed: Optional[asyncio.Event] = None
        # Weakly, so that the client is freed as soon as it is dropped (its probe task stops).
        bump = weakref.WeakMethod(self._bump)
        self._balancer.on_change(lambda: _call(bump))
        self._prober: Optional["asyncio.Task[None]"] = None

    async def __aenter__(self) -> "AsyncGatewayClient":
        self._start_probes()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._prober is not None:
            self._prober.cancel()
            try:
                await self._prober
            except asyncio.CancelledError:
                pass
            self._prober = None
        await self._http.aclose()

    def __repr__(self) -> str:
        return f"AsyncGatewayClient({self._settings!r})"

    # -- the API -------------------------------------------------------------------------

    async def solve(
        self,
        kind: str,
        timeout_s: Optional[float] = None,
        idempotency_key: Optional[str] = None,
        **params: Any,
    ) -> Dict[str, Any]:
        """``POST /v1/solve``: the answer (``token``, ``kind``, ``source``, ``expires_at``...)."""
        body = _core.solve_body(kind, params, timeout_s)
        key, scoped = _core.call_key(self._settings, idempotency_key, solve=True)
        address, data = await self._send(
            "POST", "/v1/solve", body, _core.deadline(timeout_s), key, request_scoped=scoped
        )
        return _core.as_object(address, data)

    async def submit(
        self,
        kind: str,
        timeout_s: Optional[float] = None,
        idempotency_key: Optional[str] = None,
        **params: Any,
    ) -> Tuple[str, str]:
        """``POST /v1/tasks``: ``(task_id, address)``; read it with :meth:`task`."""
        body = _core.solve_body(kind, params, timeout_s)
        key, _ = _core.call_key(self._settings, idempotency_key, solve=False)
        address, data = await self._send("POST", "/v1/tasks", body, 0.0, key)
        task_id = _core.as_object(address, data).get("task_id")
        if not isinstance(task_id, str):
            raise BadAnswerError(address, "no task_id in the answer")
        return task_id, address

    async def task(
        self, task_id: str, address: Optional[str] = None, wait: float = 0.0
    ) -> Dict[str, Any]:
        """``GET /v1/tasks/{id}?wait=``, asking ``address`` first (see ``GatewayClient.task``)."""
        path = _core.task_path(task_id, wait)
        answered_by, data = await self._send(
            "GET", path, None, float(wait), None, repeatable=True, prefer=address
        )
        return _core.as_object(answered_by, data)

    async def worker_solve(self, task: Dict[str, Any]) -> Dict[str, Any]:
        """The seed's worker API, ``POST /solve``."""
        key, scoped = _core.call_key(self._settings, None, solve=True)
        address, data = await self._send(
            "POST", "/solve", dict(task), 600.0, key, request_scoped=scoped
        )
        return _core.as_object(address, data)

    def backends(self) -> List[BackendState]:
        return self._balancer.snapshot()

    async def wait_until(
        self, predicate: Callable[[List[BackendState]], bool], timeout: float
    ) -> bool:
        """Waits until ``predicate(backends())`` holds, re-checking on every ejection and
        re-admission (no polling); False if ``timeout`` seconds passed first."""
        loop = asyncio.get_running_loop()
        give_up = loop.time() + timeout
        while not predicate(self.backends()):
            if self._changed is None:
                self._changed = asyncio.Event()
            changed = self._changed
            left = give_up - loop.time()
            if left <= 0:
                return False
            try:
                await asyncio.wait_for(changed.wait(), left)
            except asyncio.TimeoutError:
                return predicate(self.backends())
        return True

    # -- the retry loop ------------------------------------------------------------------

    async def _send(
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
        self._start_probes()
        s = self._settings
        repeatable = repeatable or idempotency_key is not None
        headers = _core.headers(s, idempotency_key, request_scoped)
        tried: List[str] = []
        last: Optional[GatewayError] = None
        for attempt in range(1, s.max_attempts + 1):
            if attempt > 1:
                await asyncio.sleep(_core.backoff(s, attempt - 1))
            ticket = self._balancer.pick(avoid=tried, prefer=prefer if not tried else None)
            try:
                outcome, next_ = await self._attempt(
                    ticket.address,
                    method,
                    path,
                    body,
                    headers,
                    wait + s.response_margin,
                    repeatable,
                )
            except BaseException:
                # Cancelled: the caller gave up, which says nothing about the gateway.
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

    async def _attempt(
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
            res = await self._http.request(
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

    def _start_probes(self) -> None:
        if self._prober is None and self._settings.probe_interval is not None:
            # The task holds the client weakly: a client dropped without ``aclose()`` does not
            # keep a task probing forever.
            loop = _probe_loop(weakref.ref(self), self._settings.probe_interval)
            self._prober = asyncio.get_running_loop().create_task(loop)

    async def _probe_round(self) -> None:
        await asyncio.gather(*(self._probe(a) for a in self._balancer.addresses))

    async def _probe(self, address: str) -> None:
        sent_at = self._balancer.now()
        try:
            res = await self._http.get(address + "/health", timeout=self._settings.probe_timeout)
            outcome, load = _judge.probe(res.status_code, res.content)
        except httpx.TimeoutException:
            outcome, load = Outcome.SERVER_ERROR, None
        except httpx.HTTPError:
            outcome, load = Outcome.CONNECT_FAILED, None
        self._balancer.record(address, outcome, sent_at, load)

    def _bump(self) -> None:
        # Wakes every waiter; the next wait gets a fresh event.
        if self._changed is not None:
            self._changed.set()
            self._changed = None


async def _probe_loop(client: "weakref.ref[AsyncGatewayClient]", interval: float) -> None:
    """Probes every ``interval`` while the client lives. A round that fails for any other reason
    than the network (a bug, say) is logged and the next one runs: probes never stop silently."""
    while True:
        await asyncio.sleep(interval)
        live = client()
        if live is None:
            return
        try:
            await live._probe_round()
        except Exception:
            _log.exception("a probe round failed; probing goes on")
        del live


def _call(method: "weakref.WeakMethod[Callable[[], None]]") -> None:
    live = method()
    if live is not None:
        live()
