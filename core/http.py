"""Plain Django views that answer like the API: JSON errors, never HTML pages."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt

SAFE_METHODS = ("GET", "HEAD")


def method_not_allowed(method: str, allowed: tuple[str, ...]) -> JsonResponse:
    """405 in the API's error shape (core/api_errors.py), with ``Allow``."""
    response = JsonResponse({"detail": f'Method "{method}" not allowed.'}, status=405)
    response["Allow"] = ", ".join(allowed)
    return response


def json_require_safe(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Django's ``require_safe``, answering any other method with a JSON 405.

    CSRF exempt as well: the view changes nothing, and without the exemption
    the CSRF middleware would answer a POST with its HTML 403 page before the
    method is ever looked at.
    """

    @csrf_exempt
    @wraps(view)
    def only_safe_methods(request: HttpRequest, *args, **kwargs) -> HttpResponse:
        if request.method not in SAFE_METHODS:
            return method_not_allowed(request.method or "", SAFE_METHODS)
        return view(request, *args, **kwargs)

    return only_safe_methods
