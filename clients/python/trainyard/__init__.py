"""Trainyard's Python client.

``trainyard.Client`` drives the REST API (openapi/openapi.yaml) from scripts and sweep tools;
``trainyard.report()`` sends a running job's metrics to the server that started it.
"""

__version__ = "0.1.0"

from .report import report  # noqa: E402,F401
