"""Strict serializer fields and the serializer base class every API body uses.

DRF's stock fields coerce: ``IntegerField`` takes ``"60"`` and ``60.0``,
``BooleanField`` takes ``"yes"`` and ``1``, ``CharField`` turns ``123`` into
``"123"``, and a serializer ignores keys it does not know. For an API whose
contract is docs/guides/api.md "Input rules", each of those hides a client bug, so here
a value has exactly the JSON type the table says, and an unknown or read-only
key is a 400 that names it.
"""

from __future__ import annotations

import copy
import datetime as dt
from collections.abc import Mapping

from django.utils.dateparse import parse_datetime
from rest_framework import serializers

from core.time_bounds import range_problem


class StrictIntegerField(serializers.IntegerField):
    default_error_messages = {"invalid": "A whole number is required (not a string or a float)."}

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictBooleanField(serializers.BooleanField):
    default_error_messages = {"invalid": "Must be true or false."}

    def to_internal_value(self, data):
        if not isinstance(data, bool):
            self.fail("invalid")
        return data


class StrictCharField(serializers.CharField):
    default_error_messages = {"invalid": "Must be a string."}

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictChoiceField(serializers.ChoiceField):
    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid_choice", input=data)
        return super().to_internal_value(data)


class UtcDateTimeField(serializers.DateTimeField):
    """DRF's DateTimeField in UTC, without asking Django for the current time
    zone on every value: Punctual runs in UTC only (scheduler_site/checks.py).
    The same answers ("2026-01-01T09:00:00Z"); a list of a thousand jobs has
    six thousand of them."""

    def default_timezone(self):
        return dt.UTC


class AwareDateTimeField(UtcDateTimeField):
    """An ISO 8601 string with a UTC offset; naive times are refused, not guessed."""

    default_error_messages = {
        "naive": "Include a UTC offset, e.g. 2026-01-01T09:00:00Z or 2026-01-01T10:00:00+01:00.",
    }

    def to_internal_value(self, value):
        if not isinstance(value, str):
            self.fail("invalid", format="ISO 8601")
        try:
            parsed = parse_datetime(value)
        except ValueError:
            parsed = None  # well-formed but impossible (month 13): super() says so
        if parsed is not None and parsed.utcoffset() is None:
            self.fail("naive")
        result = super().to_internal_value(value)
        reason = range_problem(result)
        if reason:
            raise serializers.ValidationError(reason, code="range")
        return result


class StrictSerializer(serializers.Serializer):
    """Refuses unknown keys and writes to read-only fields, with the key named.

    ``extra_read_only`` lists output-only names that are not fields of the
    serializer (``secret`` appears only in some responses) and the message
    explaining how they do change.
    """

    extra_read_only: Mapping[str, str] = {}

    def get_fields(self):
        """The declared fields, copied for this instance.

        DRF deep-copies each declared field for every serializer instance,
        which re-runs the field's ``__init__`` with deep copies of its
        arguments: for a job's 33 fields that was a tenth of a single create's
        CPU. A field without fields inside it keeps no state past its
        ``__init__`` but what ``bind()`` gives each copy (its name and
        parent), so a shallow copy is a full one. A field holding other
        fields (a list's ``child``, a nested serializer) is bound to them,
        and is deep-copied as DRF does. Which kind each field is, is found
        once per class (``_copy_plan``): looking through every field's
        attributes on every request cost as much as the copies.
        """
        return {
            name: copy.deepcopy(field) if deep else _shallow_copy(field)
            for name, field, deep in _copy_plan(type(self))
        }

    def to_internal_value(self, data):
        errors: dict[str, list[str]] = {}
        if isinstance(data, Mapping):
            for key in data:
                field = self.fields.get(key)
                if key in self.extra_read_only:
                    errors[key] = [self.extra_read_only[key]]
                elif field is None:
                    errors[key] = ["Unknown field."]
                elif field.read_only:
                    errors[key] = ["This field is read-only."]
        try:
            value = super().to_internal_value(data)
        except serializers.ValidationError as exc:
            if not isinstance(exc.detail, Mapping):
                raise
            raise serializers.ValidationError({**exc.detail, **errors}) from None
        if errors:
            raise serializers.ValidationError(errors)
        return value


# Per serializer class: each declared field, and whether it holds other
# fields (copied deep). Classes are made once, at import.
_COPY_PLANS: dict[type, tuple[tuple[str, serializers.Field, bool], ...]] = {}


def _copy_plan(cls: type[StrictSerializer]) -> tuple[tuple[str, serializers.Field, bool], ...]:
    plan = _COPY_PLANS.get(cls)
    if plan is None:
        plan = _COPY_PLANS[cls] = tuple(
            (name, field, _holds_fields(field)) for name, field in cls._declared_fields.items()
        )
    return plan


def _holds_fields(field: serializers.Field) -> bool:
    return isinstance(field, serializers.BaseSerializer) or any(
        isinstance(value, serializers.Field) for value in vars(field).values()
    )


def _shallow_copy(field: serializers.Field) -> serializers.Field:
    """``copy.copy`` of a field without fields inside it, without its
    ``__reduce_ex__`` round (DRF fields define no ``__copy__``)."""
    fresh = object.__new__(type(field))
    fresh.__dict__.update(field.__dict__)
    return fresh


class EmptySerializer(StrictSerializer):
    """For actions that take no body: none, or ``{}``; any key is a 400 naming it."""
