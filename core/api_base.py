"""What every API view shares: strict JSON in, JSON out, documented errors,
and ``If-Match``/``ETag`` helpers for versioned objects."""

from __future__ import annotations

from typing import TYPE_CHECKING, NoReturn

from rest_framework import exceptions
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request

from core.api_errors import ApiAutoSchema, PreconditionFailed
from core.api_parsers import StrictJSONParser

if TYPE_CHECKING:
    # The mixin is only ever mixed into APIView subclasses; type-check it as one.
    from rest_framework.views import APIView

    _MixinBase = APIView
else:
    _MixinBase = object


class ApiViewMixin(_MixinBase):
    """Put first in the bases of every API view.

    JSON only, both ways: a form post or a body without a Content-Type is a
    415, rather than DRF's silent "no data" that would turn a PATCH into a
    no-op answered 200.
    """

    parser_classes = [StrictJSONParser]
    renderer_classes = [JSONRenderer]
    schema = ApiAutoSchema()
    # No OPTIONS self-description (405): the OpenAPI schema is the description.
    metadata_class = None

    def initial(self, request: Request, *args, **kwargs) -> None:
        super().initial(request, *args, **kwargs)  # authentication, permissions, throttles
        writes = request.method in ("POST", "PUT", "PATCH") and _has_body(request)
        if writes and not request.content_type:
            raise exceptions.UnsupportedMediaType(
                "", detail="Send the body as JSON, with Content-Type: application/json."
            )

    def permission_denied(self, request: Request, message=None, code=None) -> NoReturn:
        # DRF checks permissions before throttles, so an anonymous caller's 401
        # would never be counted: count it first (docs/guides/api.md "Rate limits").
        # A refused token was counted by the authentication class already.
        if request.authenticators and not request.successful_authenticator:
            self.check_throttles(request)
        super().permission_denied(request, message, code)


def _has_body(request: Request) -> bool:
    meta = request.META
    return meta.get("CONTENT_LENGTH") not in (None, "", "0") or "HTTP_TRANSFER_ENCODING" in meta


def etag(version: int) -> str:
    return f'"{version}"'


def check_if_match(request: Request, version: int) -> None:
    """412 unless ``If-Match`` (when sent) names the current version, or is ``*``.

    Strong comparison (RFC 9110 §13.1.1): a weak tag ``W/"3"`` never matches.
    The caller holds the row lock, so nothing can change between this check
    and its write.
    """
    header = request.headers.get("If-Match")
    if header is None:
        return
    tags = [tag.strip() for tag in header.split(",")]
    if "*" in tags or etag(version) in tags:
        return
    raise PreconditionFailed(
        f"The job is at version {version} (ETag {etag(version)}), not the one given in If-Match."
    )
