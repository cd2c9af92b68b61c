"""Trainyard's Python client.

``trainyard.Client`` drives the REST API (openapi/openapi.yaml) from scripts and sweep tools;
``trainyard.report()`` sends a running job's metrics to the server that started it.
"""

__version__ = "0.1.0"

from .client import Client, StreamEvent, TERMINAL_STATES  # noqa: E402,F401
from .errors import (  # noqa: E402,F401
    APIError, BadRequest, ConfigError, Conflict, Forbidden, Invalid, NotFound,
    ServiceUnavailable, TooManyRequests, TrainyardError, Unauthorized)
from .report import report  # noqa: E402,F401
