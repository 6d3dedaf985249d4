"""What a call can end in besides an answer. Messages name gateways and the gateway's own
error codes, never the key."""

from __future__ import annotations

from typing import Optional


class GatewayError(Exception):
    """Base of every error this package raises about a call."""


class ConfigError(GatewayError, ValueError):
    """A setting that cannot work; the message names it and the fix."""


class ApiError(GatewayError):
    """The gateway answered with an error about this call (bad input, unsolvable, provider
    failure, timeout...). Another gateway would answer the same."""

    def __init__(
        self, address: str, status: int, code: str, message: str, retry_after: Optional[float]
    ) -> None:
        super().__init__(f"{address} answered {status} {code}: {message}")
        self.address = address
        self.status = status
        self.code = code
        self.message = message
        self.retry_after = retry_after


class FleetLimitedError(ApiError):
    """A 429: a fleet-wide limit is exhausted. Not retried elsewhere; wait ``retry_after``."""


class RefusedError(GatewayError):
    """A gateway refused the call at admission (503 + Retry-After): it was full."""

    def __init__(self, address: str, code: str, retry_after: Optional[float]) -> None:
        super().__init__(f"{address} is full ({code}); retry after {retry_after} s")
        self.address = address
        self.code = code
        self.retry_after = retry_after


class TransportError(GatewayError):
    """No HTTP answer. ``sent`` says whether the request may have reached the gateway."""

    def __init__(self, address: str, what: str, sent: bool) -> None:
        super().__init__(f"{address}: {what}")
        self.address = address
        self.what = what
        self.sent = sent


class BadAnswerError(GatewayError):
    """A 2xx whose body this client cannot read."""

    def __init__(self, address: str, what: str) -> None:
        super().__init__(f"{address} sent an unreadable answer: {what}")
        self.address = address


class ExhaustedError(GatewayError):
    """Every attempt was refused at admission or could not connect (or, for a repeatable call,
    failed): nothing was left running because of it. ``last`` is the last failure."""

    def __init__(self, attempts: int, last: GatewayError) -> None:
        super().__init__(f"no gateway took the call after {attempts} attempts; last: {last}")
        self.attempts = attempts
        self.last = last
