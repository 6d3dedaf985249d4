"""Balancing clients for a fleet of captcha-gateway instances (docs/CLIENTS.md).

- ``GatewayClient``: sync, thread-safe; the native JSON API and the seed worker API.
- ``AsyncGatewayClient``: the same on asyncio.
- ``ClientLoadBalancer``: the drop-in successor of seed 002's class.
"""

from ._async import AsyncGatewayClient
from ._balancer import BackendState, Balancer, EjectionPolicy, Outcome, Strategy
from ._sync import GatewayClient
from .compat import ClientLoadBalancer
from .errors import (
    ApiError,
    BadAnswerError,
    ConfigError,
    ExhaustedError,
    FleetLimitedError,
    GatewayError,
    RefusedError,
    TransportError,
)

__all__ = [
    "ApiError",
    "AsyncGatewayClient",
    "BackendState",
    "BadAnswerError",
    "Balancer",
    "ClientLoadBalancer",
    "ConfigError",
    "EjectionPolicy",
    "ExhaustedError",
    "FleetLimitedError",
    "GatewayClient",
    "GatewayError",
    "Outcome",
    "RefusedError",
    "Strategy",
    "TransportError",
]
