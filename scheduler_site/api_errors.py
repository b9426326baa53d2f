"""API error shape: DRF's ``{"field": ["message"]}`` for validation, and a JSON
body for every other client error (never an HTML page)."""

from __future__ import annotations

from rest_framework.views import exception_handler as drf_exception_handler


def exception_handler(exc, context):
    return drf_exception_handler(exc, context)
