"""How one attempt ended: an Outcome for the balancer, and whether the call may move on.

A call goes to another gateway only when that cannot solve it twice: the gateway refused it at
admission (503 ``overloaded`` / ``WORKER_AT_CAPACITY``), no connection was made, or the caller
marked it repeatable (an idempotency key, or a read). A 429 is fleet-wide: returned at once."""

from __future__ import annotations

import json
from typing import Any, Optional, Tuple, Type, Union

import httpx

from ._balancer import Outcome
from .errors import (
    ApiError,
    BadAnswerError,
    FleetLimitedError,
    GatewayError,
    RefusedError,
    TransportError,
)

ADMISSION_REFUSALS = ("overloaded", "WORKER_AT_CAPACITY")
LONGEST_RETRY_AFTER = 3600.0


class Retry:
    """Send the call elsewhere if attempts remain; ``error`` is the failure so far."""

    __slots__ = ("error",)

    def __init__(self, error: GatewayError) -> None:
        self.error = error


#: ``Any`` (the answer's JSON), a ``GatewayError`` to raise, or a ``Retry``.
Next = Union[Retry, GatewayError, Any]


def _retry_after(value: Optional[str]) -> Optional[float]:
    if value is None:
        return None
    try:
        secs = int(value.strip())
    except ValueError:
        return None
    if secs < 0:
        return None
    return min(float(secs), LONGEST_RETRY_AFTER)


def answer(
    address: str,
    status: int,
    retry_after: Optional[str],
    body: bytes,
    repeatable: bool,
    errors_in_200: bool = False,
) -> Tuple[Outcome, Next]:
    try:
        data: Any = json.loads(body) if body else None
        readable = True
    except ValueError:
        data, readable = None, False
    if 200 <= status < 300:
        if not readable:
            return Outcome.SUCCESS, BadAnswerError(
                address, f"{status} with a body that is not JSON"
            )
        return Outcome.SUCCESS, data
    after = _retry_after(retry_after)
    err = data.get("error") if isinstance(data, dict) else None
    if isinstance(err, dict):
        raw_code, raw_message = err.get("code"), err.get("message")
        code: Optional[str] = raw_code if isinstance(raw_code, str) else None
        message: str = raw_message if isinstance(raw_message, str) else ""
    elif isinstance(err, str):
        code, message = err, ""
    else:
        code, message = None, ""

    def api(cls: Type[ApiError] = ApiError) -> ApiError:
        return cls(address, status, code or f"http_{status}", message, after)

    def unless_repeatable(error: GatewayError) -> Next:
        return Retry(error) if repeatable else error

    if status == 429:
        return Outcome.FLEET_LIMITED, api(FleetLimitedError)
    if status == 503 and code in ADMISSION_REFUSALS:
        return Outcome.SHED, Retry(RefusedError(address, code or "", after))
    if status == 503:
        return Outcome.SHED, unless_repeatable(api())
    if status in (502, 504) and code is not None:
        return Outcome.SUCCESS, api()
    if 500 <= status < 600:
        return Outcome.SERVER_ERROR, unless_repeatable(api())
    return Outcome.SUCCESS, api()


def transport(address: str, error: Exception, repeatable: bool) -> Tuple[Outcome, Next]:
    if isinstance(error, (httpx.ConnectError, httpx.ConnectTimeout)):
        # Never reached the gateway: nothing can have started there.
        return Outcome.CONNECT_FAILED, Retry(
            TransportError(address, f"could not connect: {error}", sent=False)
        )
    if isinstance(error, httpx.TimeoutException):
        outcome, what = Outcome.SERVER_ERROR, f"no answer in time: {error}"
    else:
        outcome, what = Outcome.CONNECT_FAILED, f"connection lost: {error}"
    e = TransportError(address, what, sent=True)
    return outcome, (Retry(e) if repeatable else e)


def probe(status: Optional[int], body: bytes) -> Tuple[Outcome, Optional[float]]:
    """A ``/health`` probe: 503 or ``load_pct`` >= 90 is full (counts like a refusal)."""
    if status is None:
        return Outcome.CONNECT_FAILED, None
    load: Optional[float] = None
    try:
        data = json.loads(body)
        raw = data.get("load_pct", data.get("loadPct")) if isinstance(data, dict) else None
        if isinstance(raw, (int, float)) and not isinstance(raw, bool) and 0 <= raw < float("inf"):
            load = float(raw)
    except ValueError:
        pass
    if 200 <= status < 300:
        return (Outcome.SHED if load is not None and load >= 90.0 else Outcome.SUCCESS), load
    if status == 503:
        return Outcome.SHED, load
    return Outcome.SERVER_ERROR, load
