"""API error shape: DRF's ``{"field": ["message"]}`` for validation (for a
list body, a bulk create, the item's index first: ``{"3": {"field": [...]}}``),
and a JSON ``{"detail": "..."}`` body for every other error, never an HTML page.

docs/guides/api.md "Input rules": bad input gets a 4xx that names the field, never a 500.
The serializers catch what they can; this handler turns the validation-like
errors that escape from deeper down (a model's ``ValidationError``, a
``ScheduleError``, a unique constraint hit by a race) into 4xx answers too.
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.core.exceptions import PermissionDenied, RequestDataTooBig
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import DataError, IntegrityError
from django.http import Http404
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import OpenApiResponse
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.serializers import as_serializer_error
from rest_framework.views import exception_handler as drf_exception_handler
from rest_framework.views import set_rollback

from core import unavailable
from core.errors import LimitExceeded, UserFacingError

log = logging.getLogger("punctual.api")

# One body for every 404, so that another owner's object and an id that never
# existed cannot be told apart (docs/guides/owners.md "Owners and access": "never 403").
NOT_FOUND_DETAIL = "Not found."


class Conflict(exceptions.APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = "The request conflicts with the current state of the resource."
    default_code = "conflict"


class PreconditionFailed(exceptions.APIException):
    status_code = status.HTTP_412_PRECONDITION_FAILED
    default_detail = "The resource has changed since the version given in If-Match."
    default_code = "precondition_failed"


class UnprocessableKey(exceptions.APIException):
    status_code = status.HTTP_422_UNPROCESSABLE_ENTITY
    default_detail = "This Idempotency-Key was already used for a different request."
    default_code = "idempotency_key_reused"


def exception_handler(exc, context):
    if isinstance(exc, LimitExceeded):
        return over_limit(exc)
    if unavailable.lost_database(exc):
        # A failover or an outage, not a bug: the client should try again.
        unavailable.note(exc, context["request"].path)
        set_rollback()
        return Response(
            {"detail": unavailable.MESSAGE},
            status=status.HTTP_503_SERVICE_UNAVAILABLE,
            headers={"Retry-After": str(unavailable.RETRY_AFTER_SECONDS)},
        )
    if isinstance(exc, Http404):
        # get_object_or_404 names the model, and says nothing at all for a
        # malformed id: one body for every missing object instead.
        exc = exceptions.NotFound(NOT_FOUND_DETAIL)
    elif isinstance(exc, PermissionDenied):
        exc = exceptions.PermissionDenied()
    elif isinstance(exc, DjangoValidationError):
        exc = exceptions.ValidationError(as_serializer_error(exc))
    elif isinstance(exc, UserFacingError):  # e.g. jobs.schedules.ScheduleError
        exc = exceptions.ValidationError({"detail": [str(exc)]})
    elif isinstance(exc, RequestDataTooBig):
        exc = exceptions.APIException(str(exc))
        exc.status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    elif isinstance(exc, IntegrityError):
        # The serializers check uniqueness first; this is the race they lose.
        log.warning("integrity error answered 409", extra={"error": str(exc)[:200]})
        exc = Conflict()
    elif isinstance(exc, DataError):
        log.warning("data error answered 400", extra={"error": str(exc)[:200]})
        exc = exceptions.ValidationError({"detail": ["A value is out of range or malformed."]})

    response = drf_exception_handler(exc, context)
    if response is not None:
        return response
    if settings.DEBUG:
        return None  # Django's debug page is more use to a developer than a JSON 500
    log.exception("unhandled API error", exc_info=exc)
    set_rollback()
    return Response({"detail": "Internal server error."}, status=500)


def over_limit(exc: LimitExceeded) -> Response:
    """An owner's limit refused the request (docs/guides/owners.md "Owner limits"): 429 with
    ``Retry-After`` when waiting frees room, 403 when it does not; the body
    names the limit."""
    set_rollback()
    body = {"detail": str(exc), "limit": exc.limit}
    if exc.retry_after is None:
        return Response(body, status=status.HTTP_403_FORBIDDEN)
    return Response(
        body,
        status=status.HTTP_429_TOO_MANY_REQUESTS,
        headers={"Retry-After": str(exc.retry_after)},
    )


# -- OpenAPI ------------------------------------------------------------------

ERROR_SCHEMA = {
    "type": "object",
    "description": (
        'Either {"detail": "message"} or, for invalid input, {"field": ["message", ...]};'
        ' for an invalid item of a list body, by its index: {"3": {"field": ["message"]}}.'
    ),
    "additionalProperties": True,
}

_COMMON_ERRORS = {
    400: "Invalid input: the body names each offending field.",
    401: "No valid credentials.",
    403: (
        "Authenticated, but not allowed: a session without its CSRF token, or over one of"
        ' the owner\'s limits ({"detail": ..., "limit": "jobs_per_owner"}).'
    ),
    404: "No such object, or it belongs to another owner.",
    405: "Method not allowed.",
    406: "Only application/json responses are available.",
    413: "The request body is too large.",
    415: "The body must be application/json.",
    429: (
        "Too many requests for this owner, or over one of its rate limits"
        ' ({"detail": ..., "limit": "triggers_per_minute"}); see Retry-After.'
    ),
    503: "The database is unavailable (a failover or an outage); try again after Retry-After.",
}


class ApiAutoSchema(AutoSchema):
    """drf-spectacular's schema, plus the error answers every operation can give.

    Documented errors keep clients (and schemathesis' conformance checks)
    honest: an undocumented status is a contract break.
    """

    def _get_response_bodies(self, direction="response"):
        responses = super()._get_response_bodies(direction=direction)
        for code, text in _COMMON_ERRORS.items():
            responses.setdefault(str(code), self._error_response(text))
        return responses

    def _error_response(self, text: str) -> dict:
        return {
            "content": {"application/json": {"schema": ERROR_SCHEMA}},
            "description": text,
        }


def error_response(text: str) -> OpenApiResponse:
    """For ``@extend_schema(responses=...)``: a documented error answer."""
    return OpenApiResponse(response=ERROR_SCHEMA, description=text)
