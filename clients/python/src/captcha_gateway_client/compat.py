"""``ClientLoadBalancer``: the drop-in successor of seed 002's class of the same name.

Same constructor (a list of worker URLs) and same ``solve(task)`` returning the worker API's
JSON (``{solution, captcha_id}`` or ``{error}``), over the gateway's seed worker API
(``POST /solve``). What changed is what went wrong in the seed: a worker is never marked dead
forever (it is ejected for a while and let back), there is no recursion (at most
``max_attempts`` tries), a call goes to another worker only when that cannot solve it twice
(refused at admission, no connection, or, under the idempotency key every call carries, a
worker that died mid-call: workers on one Redis resume the task), and a 429 is returned, not
retried everywhere.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from ._sync import GatewayClient
from .errors import ExhaustedError, FleetLimitedError


class ClientLoadBalancer:
    def __init__(self, workers: List[str], key: Optional[str] = None, **options: Any) -> None:
        self._client = GatewayClient(workers, key=key, **options)

    @property
    def client(self) -> GatewayClient:
        """The underlying client: its ``backends()`` and ``wait_until``."""
        return self._client

    @property
    def workers(self) -> List[Dict[str, Any]]:
        """The seed's view: ``{url, healthy, active}`` per worker (healthy = not ejected now)."""
        return [
            {"url": b.address, "healthy": not b.ejected, "active": b.outstanding}
            for b in self._client.backends()
        ]

    def get_worker(self) -> Dict[str, Any]:
        """The least loaded worker not ejected (the seed's selection); never raises for an
        all-ejected fleet, which is when the seed gave up for good."""
        workers = self.workers
        healthy = [w for w in workers if w["healthy"]] or workers
        return min(healthy, key=lambda w: w["active"])

    def solve(self, task: Dict[str, Any]) -> Dict[str, Any]:
        """``POST /solve`` on the least loaded worker, moving on only when safe. Raises
        ``ExhaustedError`` when no worker took it (every one full or down), and returns a
        fleet-wide 429 as ``{"error": CODE}`` like any other worker error."""
        try:
            return self._client.worker_solve(task)
        except FleetLimitedError as e:
            return {"error": e.code, "retry_after": e.retry_after}

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> "ClientLoadBalancer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


__all__ = ["ClientLoadBalancer", "ExhaustedError"]
