"""The caller's own API token: read, rotate, revoke (docs/guides/owners.md "Owners and access").

There is no token id in these URLs: each call acts on the caller's token
only, so no owner can reach another's.
"""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts import tokens
from api.token_serializers import NewTokenSerializer, RotateSerializer, TokenSerializer
from core.api_base import ApiViewMixin
from core.api_errors import error_response
from core.db import db_now

NO_TOKEN = "You have no live API token: rotate to make one."


class TokenView(ApiViewMixin, APIView):
    @extend_schema(
        summary="Your API token (never its key)",
        description="The prefix, creation, expiry and last use of your live token.",
        responses={200: TokenSerializer, 404: error_response(NO_TOKEN)},
    )
    def get(self, request):
        token = tokens.live_token(request.user)
        if token is None:
            return Response({"detail": NO_TOKEN}, status=status.HTTP_404_NOT_FOUND)
        return Response(TokenSerializer(token).data)

    @extend_schema(
        summary="Revoke your API token",
        description="Its key answers 401 from now on. Rotating from an admin session makes"
        " a new one.",
        request=None,
        responses={204: None, 404: error_response(NO_TOKEN)},
    )
    def delete(self, request):
        if not tokens.revoke(request.user):
            return Response({"detail": NO_TOKEN}, status=status.HTTP_404_NOT_FOUND)
        return Response(status=status.HTTP_204_NO_CONTENT)


class TokenRotateView(ApiViewMixin, APIView):
    @extend_schema(
        summary="Replace your API token with a new one",
        description="The current key answers 401 from now on. The answer holds the new key,"
        " shown this once.",
        request=RotateSerializer,
        responses={201: NewTokenSerializer},
    )
    def post(self, request):
        body = RotateSerializer(data=request.data, context={"now": db_now()})
        body.is_valid(raise_exception=True)
        token, key = tokens.issue(request.user, expires_at=body.validated_data["expires_at"])
        return Response({**TokenSerializer(token).data, "key": key}, status=status.HTTP_201_CREATED)
