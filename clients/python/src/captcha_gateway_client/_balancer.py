"""The balancer: which gateway gets the next call, and which are ejected for a while.

The same rules as the Rust crate `captcha-gateway-balance` (balance/README.md), so a Python
scraper and a Rust program judge a gateway alike:

- load is calls outstanding; least-outstanding takes the idlest (ties round-robin),
  power-of-two-choices the idler of two drawn at random;
- three instance failures in a row (refused, full, unreachable, 5xx) eject a gateway for
  ``base_ejection``; after the cool-down it is let back half-open, where one failure ejects
  it again for twice as long (up to ``max_ejection``) and one success ends the back-off;
- a 429 (fleet-wide limit) is no one instance's fault: it neither counts nor clears;
- outcomes of calls sent before the latest ejection ended are ignored;
- when every gateway is ejected, the one whose ejection ends first is still used: a gateway is
  never given up for good.

Thread-safe (one lock, held only for a pick or a record); no I/O; the clock is injectable.
"""

from __future__ import annotations

import enum
import math
import random
import threading
import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence


class Outcome(enum.Enum):
    """How a call (or probe) to one gateway ended, as far as its health is concerned."""

    SUCCESS = "success"
    CONNECT_FAILED = "connect_failed"
    SERVER_ERROR = "server_error"
    SHED = "shed"
    FLEET_LIMITED = "fleet_limited"

    @property
    def is_failure(self) -> bool:
        return self in (Outcome.CONNECT_FAILED, Outcome.SERVER_ERROR, Outcome.SHED)


class Strategy(enum.Enum):
    LEAST_OUTSTANDING = "least_outstanding"
    POWER_OF_TWO_CHOICES = "power_of_two_choices"


@dataclass(frozen=True)
class EjectionPolicy:
    """When a gateway is ejected and for how long (seconds)."""

    consecutive_failures: int = 3
    base_ejection: float = 10.0
    max_ejection: float = 300.0

    def cool_down(self, previous: int) -> float:
        # Capped before doubling a large number of times.
        if previous >= 32:
            return self.max_ejection
        return min(math.ldexp(self.base_ejection, previous), self.max_ejection)


@dataclass(frozen=True)
class BackendState:
    """One gateway as the client sees it now."""

    address: str
    outstanding: int
    ejected: bool
    served: int
    failures: int
    ejections: int
    readmissions: int
    load_pct: Optional[float]


class _Endpoint:
    __slots__ = (
        "address",
        "outstanding",
        "failures_in_row",
        "ejections_in_row",
        "ejection_end",
        "served",
        "failures",
        "ejections",
        "readmissions",
        "awaiting_return",
        "load_pct",
    )

    def __init__(self, address: str) -> None:
        self.address = address
        self.outstanding = 0
        self.failures_in_row = 0
        self.ejections_in_row = 0
        self.ejection_end: Optional[float] = None
        self.served = 0
        self.failures = 0
        self.ejections = 0
        self.readmissions = 0
        self.awaiting_return: Optional[float] = None
        self.load_pct: Optional[float] = None

    def ejected(self, now: float) -> bool:
        return self.ejection_end is not None and now < self.ejection_end


class Ticket:
    """One call counted against one gateway until :meth:`Balancer.finish`."""

    __slots__ = ("address", "sent_at", "_endpoint", "_open")

    def __init__(self, endpoint: _Endpoint, sent_at: float) -> None:
        self.address = endpoint.address
        self.sent_at = sent_at
        self._endpoint = endpoint
        self._open = True


class Balancer:
    """Spreads calls over gateways by outstanding count and ejects failing ones for a while."""

    def __init__(
        self,
        addresses: Sequence[str],
        strategy: Strategy = Strategy.LEAST_OUTSTANDING,
        policy: Optional[EjectionPolicy] = None,
        seed: Optional[int] = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not addresses:
            raise ValueError("backends: no gateway URL given; pass at least one")
        if len(set(addresses)) != len(addresses):
            raise ValueError("backends: a gateway is listed twice; list each once")
        self._endpoints = [_Endpoint(a) for a in addresses]
        self._strategy = strategy
        self._policy = policy or EjectionPolicy()
        self._rng = random.Random(seed)
        self._clock = clock
        self._cursor = 0
        self._lock = threading.Lock()
        self._listeners: List[Callable[[], None]] = []

    def now(self) -> float:
        """The balancer's clock: what a probe's ``sent_at`` must be measured with."""
        return self._clock()

    @property
    def addresses(self) -> List[str]:
        return [e.address for e in self._endpoints]

    def on_change(self, listener: Callable[[], None]) -> None:
        """Calls ``listener`` (under no lock) after every ejection and re-admission."""
        self._listeners.append(listener)

    def pick(self, avoid: Sequence[str] = (), prefer: Optional[str] = None) -> Ticket:
        """The gateway for the next attempt: ``prefer`` if it is available, else one not in
        ``avoid`` if any is available, else any available one, else the one back soonest."""
        with self._lock:
            now = self._clock()
            available = [e for e in self._endpoints if not e.ejected(now)]
            preferred = [e for e in available if e.address == prefer]
            others = [e for e in available if e.address not in avoid]
            candidates = preferred or others or available
            if candidates:
                chosen = self._choose(candidates)
            else:
                chosen = min(self._endpoints, key=lambda e: (e.ejection_end or 0.0, e.outstanding))
            chosen.outstanding += 1
            return Ticket(chosen, now)

    def _choose(self, candidates: List[_Endpoint]) -> _Endpoint:
        if self._strategy is Strategy.POWER_OF_TWO_CHOICES and len(candidates) > 1:
            a, b = self._rng.sample(candidates, 2)
            return b if b.outstanding < a.outstanding else a
        start = self._cursor % len(candidates)
        best = candidates[start]
        for step in range(1, len(candidates)):
            if best.outstanding == 0:
                break
            c = candidates[(start + step) % len(candidates)]
            if c.outstanding < best.outstanding:
                best = c
        self._cursor = candidates.index(best) + 1
        return best

    def finish(self, ticket: Ticket, outcome: Outcome) -> None:
        """Uncounts the call and records how it went. A second finish is ignored."""
        changed = False
        with self._lock:
            if not ticket._open:
                return
            ticket._open = False
            endpoint = ticket._endpoint
            endpoint.outstanding -= 1
            if not outcome.is_failure:
                endpoint.served += 1
            changed = self._record(endpoint, outcome, ticket.sent_at)
        if changed:
            self._notify()

    def abandon(self, ticket: Ticket) -> None:
        """Uncounts a call the caller gave up on; says nothing about the gateway."""
        with self._lock:
            if ticket._open:
                ticket._open = False
                ticket._endpoint.outstanding -= 1

    def record(
        self, address: str, outcome: Outcome, sent_at: float, load_pct: Optional[float] = None
    ) -> None:
        """Records a probe's outcome (and the load it read) for ``address``."""
        changed = False
        with self._lock:
            for endpoint in self._endpoints:
                if endpoint.address == address:
                    if load_pct is not None:
                        endpoint.load_pct = load_pct
                    changed = self._record(endpoint, outcome, sent_at)
        if changed:
            self._notify()

    def _record(self, e: _Endpoint, outcome: Outcome, sent_at: float) -> bool:
        """Returns whether this was an ejection or a re-admission."""
        now = self._clock()
        if outcome.is_failure:
            e.failures += 1
        # Sent before the latest ejection ended: it describes what that ejection answered.
        if e.ejection_end is not None and sent_at < e.ejection_end:
            return False
        if outcome is Outcome.SUCCESS:
            e.failures_in_row = 0
            e.ejections_in_row = 0
            if e.awaiting_return is not None and sent_at >= e.awaiting_return:
                e.awaiting_return = None
                e.readmissions += 1
                return True
            return False
        if not outcome.is_failure:
            return False
        e.failures_in_row += 1
        on_probation = e.ejections_in_row > 0
        if not on_probation and e.failures_in_row < max(self._policy.consecutive_failures, 1):
            return False
        e.ejection_end = now + self._policy.cool_down(e.ejections_in_row)
        e.awaiting_return = e.ejection_end
        e.ejections_in_row += 1
        e.ejections += 1
        e.failures_in_row = 0
        return True

    def _notify(self) -> None:
        for listener in list(self._listeners):
            listener()

    def snapshot(self) -> List[BackendState]:
        with self._lock:
            now = self._clock()
            return [
                BackendState(
                    address=e.address,
                    outstanding=e.outstanding,
                    ejected=e.ejected(now),
                    served=e.served,
                    failures=e.failures,
                    ejections=e.ejections,
                    readmissions=e.readmissions,
                    load_pct=e.load_pct,
                )
                for e in self._endpoints
            ]

    def states(self) -> Dict[str, BackendState]:
        return {s.address: s for s in self.snapshot()}
