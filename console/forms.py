"""The admin's job form: the rules of docs/guides/api.md "Input rules", field by field.

Schedules are checked by ``jobs.schedules`` (the same validators the API and
the dispatcher rely on) and webhook URLs by ``jobs.targets.check_url``
(the outbound-address rules of docs/security.md "Outbound address guard"), so the admin
accepts exactly what the rest of Punctual accepts, with the error next to the field.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import re
import zoneinfo
from typing import TYPE_CHECKING

from django import forms
from django.core.validators import MaxLengthValidator, ProhibitNullCharactersValidator
from django.forms.fields import InvalidJSONInput
from django.utils import dateparse, timezone
from django.utils.html import format_html, format_html_join

from alerts.models import Channel as AlertChannel
from core import strict_json
from core.time_bounds import range_problem
from jobs import http_options, lookups, quotas, schedules
from jobs.limits import (
    MAX_LENGTHS,
    PAYLOAD_DEPTH,
    RANGES,
    TOO_LONG_TEXT,
    max_payload_bytes,
    payload_from_text,
)
from jobs.models import Job, TargetKind
from jobs.tags import MAX_TAGS, RULE, TagError, clean_tags
from jobs.targets import UnsafeTargetError, check_url, configured_rule

if TYPE_CHECKING:
    from django.contrib.auth.models import User


class PayloadField(forms.JSONField):
    """The payload box, read by the API's strict JSON rules (``payload_from_text``).

    Django's JSONField reads the text with plain ``json.loads`` (``NaN``, NUL
    characters, lone surrogates, 5,000-digit numbers and deep nesting all get
    through it, or crash it), and writes a value back with ``json.dumps``,
    which recurses once per level: a payload stored before the depth rule could
    not be shown. Here the text is judged as the API judges a payload, with the
    same messages; what was typed is shown again as typed; a stored value is
    written back by ``strict_json.dumps``, at any depth.
    """

    def to_python(self, value):
        if not isinstance(value, str):
            return value  # already a value: the initial one, or a disabled field's
        if value in self.empty_values:
            return None
        try:
            return payload_from_text(value)
        except strict_json.JSONProblem as exc:
            raise forms.ValidationError(str(exc), code="invalid") from None

    def bound_data(self, data, initial):
        if self.disabled or data is None:
            return super().bound_data(data, initial)
        return InvalidJSONInput(data)

    def prepare_value(self, value):
        if isinstance(value, InvalidJSONInput):
            return value
        if value is None:  # a new job's box: the empty payload, not "null"
            value = {}
        return strict_json.dumps(value)

    def has_changed(self, initial, data):
        try:
            value = self.to_python(data) or {}  # an empty box is the empty payload
        except forms.ValidationError:
            return True
        initial = initial or {}
        if strict_json.problem(initial, depth=PAYLOAD_DEPTH):
            return True  # stored before the rules: no valid value equals it
        # Key order does not matter; true and 1 differ (Python's == says equal).
        return json.dumps(initial, sort_keys=True) != json.dumps(value, sort_keys=True)


def _speak_as_the_api(field: forms.Field) -> None:
    """Give a text field the API's words for a NUL character and for a value
    too long, so that the admin refuses the same text with the same message."""
    validators = []
    for validator in field.validators:
        if isinstance(validator, ProhibitNullCharactersValidator):
            validator = ProhibitNullCharactersValidator(message=strict_json.NUL)
        elif isinstance(validator, MaxLengthValidator):
            limit = validator.limit_value
            validator = MaxLengthValidator(limit, message=TOO_LONG_TEXT.format(max_length=limit))
        validators.append(validator)
    field.validators = validators


class TagsField(forms.CharField):
    """The tags box: tags separated by commas or spaces, judged by
    ``jobs.tags.clean_tags`` as the API judges its list, in the same words."""

    def prepare_value(self, value):
        if isinstance(value, list | tuple):
            return ", ".join(value)
        return value

    def to_python(self, value):
        if isinstance(value, list | tuple):
            return list(value)  # the initial value: already tags
        text = super().to_python(value) or ""
        try:
            return clean_tags(part for part in re.split(r"[,\s]+", text) if part)
        except TagError as exc:
            raise forms.ValidationError(str(exc)) from None


class ZoneInput(forms.TextInput):
    """A text box for a zone name, with the tz database's canonical zones as
    its suggestions (a ``<datalist>``: the browser filters it as you type).

    Suggestions only: the field accepts any name ``validate_timezone`` knows,
    so a job stored with a legacy alias (``US/Pacific``) keeps it through an
    edit, exactly as the API would.
    """

    DATALIST_ID = "punctual-zones"

    def __init__(self, attrs=None) -> None:
        super().__init__(
            {
                "list": self.DATALIST_ID,
                "autocomplete": "off",
                "spellcheck": "false",
                **(attrs or {}),
            }
        )

    def render(self, name, value, attrs=None, renderer=None):
        box = super().render(name, value, attrs, renderer)
        return format_html('{}<datalist id="{}">{}</datalist>', box, self.DATALIST_ID, _zones())


@functools.cache
def _zones() -> str:
    """The datalist's options, made once per process (about 450 zones)."""
    return format_html_join(
        "", '<option value="{}">', ((zone,) for zone in schedules.canonical_timezones())
    )


def parse_header_lines(text: str) -> dict[str, str]:
    """The headers box, one ``Name: value`` per line, as the API's object;
    blank lines are skipped. A line without a colon, or a name given twice,
    is refused here; the names and values are judged by
    ``http_options.settle``, in the API's words."""
    headers: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        name, colon, value = line.partition(":")
        if not colon:
            raise forms.ValidationError(f"Line {number} has no colon: write Name: value.")
        name = name.strip()
        if name.lower() in {known.lower() for known in headers}:
            raise forms.ValidationError(f"Header {name} is given twice.")
        headers[name] = value.strip()
    return headers


SECRET_BOX = {"autocomplete": "new-password", "class": "vTextField"}
# How the headers box shows a stored value: never a valid one (not ASCII).
MASK = "••••••"


# The form's fields that make the schedule.
SCHEDULE_FORM_FIELDS = ("cron", "interval_seconds", "run_at", "timezone", "start_at", "end_at")


class JobForm(forms.ModelForm):
    # Declared for their labels, help and empty values; every bound is read
    # from jobs/limits.py, as the model's validators and the API's are.
    cron = forms.CharField(
        required=False,
        max_length=MAX_LENGTHS["cron"],
        strip=True,
        widget=forms.TextInput(attrs={"placeholder": "0 2 * * *", "class": "vTextField"}),
        help_text=(
            "Five fields (minute hour day-of-month month day-of-week), or @hourly, @daily, "
            "@weekly, @monthly, @yearly. Leave empty for an interval or a one-off."
        ),
    )
    interval_seconds = forms.IntegerField(
        required=False,
        **RANGES["interval_seconds"].bounds(),
        label="Interval (seconds)",
        help_text="Fires every this many seconds from start at (or creation). Leave empty "
        "for a cron schedule or a one-off.",
    )
    timezone = forms.CharField(
        max_length=MAX_LENGTHS["timezone"],
        strip=True,
        initial="UTC",
        widget=ZoneInput(attrs={"class": "vTextField", "placeholder": "Europe/Berlin"}),
        label="Time zone",
        help_text="The IANA zone the cron is read in (type to search: “Berlin”, “New_York”). "
        "An interval is the same in every zone.",
    )
    timeout_seconds = forms.IntegerField(**RANGES["timeout_seconds"].bounds(), initial=30)
    max_attempts = forms.IntegerField(**RANGES["max_attempts"].bounds(), initial=3)
    retry_backoff_seconds = forms.IntegerField(
        **RANGES["retry_backoff_seconds"].bounds(),
        initial=10,
        help_text="The base of exponential backoff with full jitter.",
    )
    max_catchup = forms.IntegerField(
        **RANGES["max_catchup"].bounds(),
        initial=3,
        label="Max catch-up",
        help_text="Under “Catch up”: how many of the most recent misfires run. Older ones "
        "are recorded missed (“over catch-up cap”).",
    )
    misfire_grace_seconds = forms.IntegerField(
        **RANGES["misfire_grace_seconds"].bounds(),
        initial=60,
        label="Misfire grace (seconds)",
        help_text="A fire reached at most this late (the dispatcher was down or busy) still "
        "runs, late; a later one is a misfire, handled by the misfire policy.",
    )
    jitter_seconds = forms.IntegerField(
        **RANGES["jitter_seconds"].bounds(),
        initial=0,
        label="Jitter (seconds)",
        help_text="Delays every scheduled delivery by the same per-job offset, below this many "
        "seconds, so that many jobs on one schedule do not hit their targets at once. 0: "
        "none. Manual runs and test deliveries are not delayed.",
    )
    pause_after_failures = forms.IntegerField(
        required=False,
        **RANGES["pause_after_failures"].bounds(),
        help_text="Pause the job automatically after this many failed runs in a row (a run "
        "fails once its attempts are used up); the list shows it as “Paused (auto)”. A "
        "success resets the count, and so does resuming. Test deliveries do not count. "
        "Empty: never pause.",
    )

    tags = TagsField(
        required=False,
        widget=forms.TextInput(
            attrs={"placeholder": "team:billing, nightly", "class": "vTextField"}
        ),
        help_text=(
            f"Up to {MAX_TAGS} labels to group and find jobs by, separated by commas or"
            f" spaces: each {RULE}. Upper-case letters are lower-cased. The jobs list"
            " filters by them."
        ),
    )
    payload = PayloadField(
        required=False,
        help_text="A JSON object sent as data.payload in every delivery (at most 64 KiB).",
    )

    # How the endpoint is called (jobs/http_options.py). The secrets are
    # never put back in the page: an empty box keeps what the job has.
    method = forms.ChoiceField(
        required=False,
        choices=http_options.HttpMethod.choices,
        initial=http_options.HttpMethod.POST,
        label="Method",
        help_text="The HTTP method of each delivery. Not posted: POST.",
    )
    auth_kind = forms.ChoiceField(
        required=False,
        choices=http_options.AuthKind.choices,
        initial=http_options.AuthKind.NONE,
        label="Authentication",
        help_text="Sent as the Authorization header. Not posted: none.",
    )
    body_mode = forms.ChoiceField(
        required=False,
        choices=[
            ("", "As the method: none for GET and DELETE, the envelope otherwise"),
            *http_options.BodyMode.choices,
        ],
        label="Body",
        help_text="What each request carries. A GET request carries no body.",
    )
    headers = forms.CharField(
        required=False,
        strip=False,
        label="Extra headers",
        widget=forms.Textarea(
            attrs={"rows": 3, "placeholder": "X-Api-Key: your key", "autocomplete": "off"}
        ),
        help_text=(
            f"One Name: value per line, at most {http_options.MAX_HEADERS}. The values are"
            " stored encrypted and never shown again. Refused: Host, Content-Length,"
            " Idempotency-Key, webhook-*, the hop-by-hop ones (Connection, Keep-Alive,"
            " Proxy-*, TE, Trailer, Transfer-Encoding, Upgrade), and Authorization when"
            " the job has an authentication below."
        ),
    )
    auth_token = forms.CharField(
        required=False,
        strip=False,
        label="Bearer token",
        widget=forms.PasswordInput(attrs=SECRET_BOX),
        help_text=(
            "Sent as the Authorization header, “Bearer ” and the token. Stored encrypted, never"
            " shown again."
        ),
    )
    auth_username = forms.CharField(
        required=False,
        strip=False,
        label="User name",
        widget=forms.PasswordInput(attrs=SECRET_BOX),
        help_text="For basic authentication. Stored encrypted, never shown again.",
    )
    auth_password = forms.CharField(
        required=False,
        strip=False,
        label="Password",
        widget=forms.PasswordInput(attrs=SECRET_BOX),
        help_text="For basic authentication. Stored encrypted, never shown again.",
    )

    # The version the page was loaded at: saving over a change made meanwhile
    # (by the API, a pause, the system) is refused, like the API's If-Match.
    expected_version = forms.IntegerField(required=False, widget=forms.HiddenInput)
    # Not a column: the job's rows in alerts_jobchannel (alerts/selection.py).
    # Its choices are the owner's channels (JobAdmin.get_form).
    alert_channels = forms.ModelMultipleChoiceField(
        queryset=AlertChannel.objects.none(),
        required=False,
        widget=forms.CheckboxSelectMultiple,
        label="Alert channels",
        help_text="Where this job's alerts go. None ticked: all of your alert channels.",
    )

    # The owner of a new job when the form has no owner field (non-superusers).
    # Set per request by JobAdmin.get_form.
    default_owner: User | None = None
    # The answers for the posted URL's host name, looked up before the
    # admin's transaction opened (JobAdmin.changeform_view, jobs/lookups.py).
    # Set per request by JobAdmin.get_form.
    url_answers: lookups.Answers | None = None

    class Meta:
        model = Job
        labels = {"url": "URL"}
        help_texts = {
            "misfire_policy": (
                "What happens to fires missed by more than the grace (the dispatcher was "
                "down, the database unreachable). Skip: each is recorded as a missed run, "
                "nothing is delivered. Catch up: the most recent ones (up to max catch-up) "
                "run now, one after the other; older ones are recorded missed."
            ),
            "overlap_policy": (
                "When a fire comes while a run of this job is still running or waiting. "
                "Skip: the fire is recorded skipped. Queue one: it waits for the running "
                "one (at most one waits; more are skipped). Allow side by side: it runs at "
                "once, in parallel."
            ),
        }
        fields = [
            "name",
            "description",
            "tags",
            "cron",
            "interval_seconds",
            "run_at",
            "timezone",
            "start_at",
            "end_at",
            "target_kind",
            "url",
            "method",
            "body_mode",
            "payload",
            "auth_kind",
            "timeout_seconds",
            "max_attempts",
            "retry_backoff_seconds",
            "misfire_policy",
            "max_catchup",
            "misfire_grace_seconds",
            "overlap_policy",
            "jitter_seconds",
            "pause_after_failures",
        ]

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        for field in self.fields.values():
            _speak_as_the_api(field)
        if self.instance.owner_id is None and self.default_owner is not None:
            self.instance.owner = self.default_owner
        if self.instance.pk is not None:
            self.fields["expected_version"].initial = self.instance.version
        if "url" in self.fields:
            self.fields["url"].help_text = (
                "http or https; required for webhook jobs. Private and loopback addresses "
                "are refused unless PUNCTUAL_ALLOW_PRIVATE_TARGETS is set; in demo mode "
                "loopback ones (127.0.0.1) are allowed."
            )
        zone = timezone.get_current_timezone_name()
        # Read in the admin's zone, as Django's admin reads every date and time.
        for name, text in (
            (
                "start_at",
                "Optional: no fire before this time. An interval counts from it (or from the"
                " job's creation). Not for a one-off job.",
            ),
            (
                "run_at",
                "A one-off job: it fires once, at this time, instead of a cron or an"
                " interval (leave those empty). A time already past is saved and never"
                " fires.",
            ),
            (
                "end_at",
                "Optional: no fire after this time (one exactly at it still fires). When its"
                " last fire is made the job shows as finished; a later end (or none) brings"
                " it back.",
            ),
        ):
            if name in self.fields:
                self.fields[
                    name
                ].help_text = (
                    f"{text} Read in {zone} (the admin's time zone), not in the job's time zone."
                )
        self.request_values: dict = {}
        if not self.instance._state.adding and "headers" in self.fields:
            # The names, each value masked: a masked line keeps its value.
            self.fields["headers"].initial = "\n".join(
                f"{name}: {MASK}" for name in self.instance.header_names
            )
            self.fields["headers"].help_text = (
                f"A value shown as {MASK} is kept as it is; type a new one to change it,"
                " remove a line to remove that header. " + str(self.fields["headers"].help_text)
            )
            if self.instance.auth_kind != http_options.AuthKind.NONE:
                for name in http_options.CREDENTIAL_FIELDS:
                    self.fields[name].widget.attrs["placeholder"] = "(set: empty keeps it)"
        if "payload" in self.fields:
            self.fields["payload"].help_text = (
                "A JSON object sent as data.payload in every delivery"
                f" (at most {max_payload_bytes():,} bytes)."
            )

    class Media:
        # The live schedule preview and the policy rows that depend on each
        # other (docs/guides/owners.md "The admin").
        js = ["punctual/job_form.js"]
        css = {"all": ["punctual/job_form.css"]}

    # -- fields

    def clean_cron(self) -> str | None:
        text = self.cleaned_data.get("cron") or ""
        if not text:
            return None
        try:
            return schedules.validate_cron(text)
        except schedules.ScheduleError as exc:
            raise forms.ValidationError(str(exc)) from None

    def clean_timezone(self) -> str:
        try:
            return schedules.validate_timezone(self.cleaned_data["timezone"])
        except schedules.ScheduleError as exc:
            raise forms.ValidationError(str(exc)) from None

    def clean_payload(self) -> dict:
        # An empty box is the empty payload; anything else PayloadField judged.
        return self.cleaned_data.get("payload") or {}

    def clean_method(self) -> str:
        return self.cleaned_data.get("method") or http_options.HttpMethod.POST

    def clean_auth_kind(self) -> str:
        return self.cleaned_data.get("auth_kind") or http_options.AuthKind.NONE

    def _clean_time(self, name: str) -> dt.datetime | None:
        value = self.cleaned_data.get(name)
        reason = value and range_problem(value)
        if reason:
            raise forms.ValidationError(reason)
        return value

    def clean_start_at(self) -> dt.datetime | None:
        return self._clean_time("start_at")

    def clean_run_at(self) -> dt.datetime | None:
        return self._clean_time("run_at")

    def clean_end_at(self) -> dt.datetime | None:
        return self._clean_time("end_at")

    # -- the whole form

    def clean(self) -> dict:
        data = super().clean()
        # BaseModelForm.clean returns cleaned_data; the stubs allow None for
        # overrides that return nothing.
        assert data is not None
        expected = data.get("expected_version")
        if self.instance.pk is not None and expected not in (None, self.instance.version):
            raise forms.ValidationError(
                "This job was changed elsewhere since this page was loaded (by the API, a "
                "pause or the system). Reload the page to see the change, then edit again."
            )
        self._clean_schedule(data)
        self._clean_target(data)
        self._clean_request(data)
        self._clean_name(data)
        self._clean_owner_limits(data)
        return data

    def _owner(self, data: dict) -> User | None:
        """The job's owner: chosen in the form (superusers), or the job's, or
        the signed-in user's for a new job."""
        return data.get("owner") or (self.instance.owner if self.instance.owner_id else None)

    def _clean_schedule(self, data: dict) -> None:
        if any(f in self.errors for f in SCHEDULE_FORM_FIELDS):
            return
        kinds = [name for name in ("cron", "interval_seconds", "run_at") if data.get(name)]
        if len(kinds) != 1:
            message = (
                "Set exactly one of cron, interval and run at (a one-off): a job has one schedule."
            )
            for name in kinds or ("cron", "interval_seconds", "run_at"):
                self.add_error(name, message)
            return
        try:
            # A new job would be created now (the anchor rule of
            # Schedule.for_job); only whether the schedule can be built matters.
            schedules.Schedule.for_job(
                cron=data.get("cron"),
                interval_seconds=data.get("interval_seconds"),
                timezone=data.get("timezone") or "UTC",
                start_at=data.get("start_at"),
                created_at=self.instance.created_at or timezone.now(),
                run_at=data.get("run_at"),
                end_at=data.get("end_at"),
            )
        except schedules.ScheduleError as exc:
            self.add_error(exc.field or kinds[0], str(exc))

    def _clean_target(self, data: dict) -> None:
        if data.get("target_kind") != TargetKind.WEBHOOK or "url" in self.errors:
            return
        url = (data.get("url") or "").strip()
        if not url:
            self.add_error("url", "A webhook job needs a URL.")
            return
        # The form is cleaned inside the admin's transaction: never look up here.
        assert self.url_answers is not None, "JobAdmin.changeform_view looks the URL up first"
        try:
            check_url(url, **configured_rule(), resolve=self.url_answers)
        except UnsafeTargetError as exc:
            self.add_error("url", str(exc))
            return
        data["url"] = url

    def _clean_request(self, data: dict) -> None:
        """Method, body, headers and authentication, by the API's rules
        (``http_options.settle``), the errors next to their boxes. What is
        to be written is kept in ``request_values`` (JobAdmin.save_model)."""
        method = data.get("method") or http_options.HttpMethod.POST
        data["method"] = method
        if not data.get("body_mode"):
            data["body_mode"] = http_options.natural_body(method)
        problem = http_options.body_problem(method, data["body_mode"])
        if problem and "body_mode" not in self.errors:
            self.add_error("body_mode", problem)
        sent: dict = {name: data[name] for name in http_options.CREDENTIAL_FIELDS if data.get(name)}
        if "headers" in self.changed_data:
            try:
                sent["headers"] = self._unmasked(parse_header_lines(data.get("headers") or ""))
            except forms.ValidationError as exc:
                self.add_error("headers", exc)
                return
        kind = data["auth_kind"] = data.get("auth_kind") or http_options.AuthKind.NONE
        values, problems = http_options.settle(http_options.Stored.of(self.instance), kind, sent)
        for name, message in problems.items():
            self.add_error(name, message)
        if not problems:
            self.request_values = values
            for name, value in values.items():
                setattr(self.instance, name, value)

    def _unmasked(self, headers: dict[str, str]) -> dict[str, str]:
        """``headers`` with each masked value replaced by the stored one."""
        if MASK not in headers.values():
            return headers
        stored = http_options.unseal(self.instance.headers_encrypted) or {}
        by_name = {name.lower(): value for name, value in stored.items()}
        out = {}
        for name, value in headers.items():
            if value == MASK:
                if name.lower() not in by_name:
                    raise forms.ValidationError(f"Type the value of header {name}.")
                value = by_name[name.lower()]
            out[name] = value
        return out

    def _clean_name(self, data: dict) -> None:
        """Names are unique per owner among live jobs. Checked here because the
        database constraint names ``owner``, which the form may not carry, and
        an IntegrityError would otherwise be a 500."""
        name = data.get("name")
        owner = self._owner(data)
        if not name or owner is None:
            return
        clash = Job.objects.live().filter(owner=owner, name=name).exclude(pk=self.instance.pk)
        if clash.exists():
            self.add_error("name", "You already have a job with this name.")

    def _clean_owner_limits(self, data: dict) -> None:
        """The owner's limits (jobs/quotas.py): the minimum interval, for an
        interval the form sets or changes, and for a new job the live jobs
        quota. The admin saves inside a transaction, so the quota's lock is
        held until the job is written."""
        owner = self._owner(data)
        if owner is None or self.errors:
            return
        limits = quotas.limits_for(owner)
        new = self.instance._state.adding  # a new job's id is set already: not pk
        interval = data.get("interval_seconds")
        if new or interval != self.instance.interval_seconds:
            short = quotas.interval_refusal(limits, interval)
            if short:
                self.add_error("interval_seconds", short)
                return
        if new:
            refusal = quotas.new_jobs_refusal(owner, 1, limits)
            if refusal is not None:
                raise forms.ValidationError(str(refusal))


# The pause note's limit: the column's, which the API's pause body checks too.
PAUSE_NOTE_MAX = Job._meta.get_field("pause_note").max_length
PAUSE_TIME_HELP = "YYYY-MM-DD HH:MM, e.g. 2026-03-01 09:30."


class PauseForm(forms.Form):
    """The admin's pause: a note, and an optional time to resume by itself.

    The resume time is typed as a wall-clock time in a zone the owner picks
    (the job's own zone or UTC, named beside the box), so that nobody has to
    work out an offset. Refused, with the reason next to the box: a time
    that is not in the future (by the database clock ``now``), one that the
    zone skips (a daylight-saving gap), one outside 1970 to 9000.
    """

    note = forms.CharField(
        required=False,
        max_length=PAUSE_NOTE_MAX,
        strip=True,
        label="Note",
        help_text="Why it is paused; shown on the job's page and in the list.",
        widget=forms.TextInput(attrs={"class": "vTextField", "size": 60}),
    )
    resume_at = forms.CharField(
        required=False,
        strip=True,
        max_length=40,
        label="Resume at (optional)",
        help_text=f"{PAUSE_TIME_HELP} Empty: paused until someone resumes it.",
        widget=forms.TextInput(attrs={"placeholder": "YYYY-MM-DD HH:MM"}),
    )
    zone = forms.ChoiceField(label="Resume time is in", required=False)

    def __init__(self, *args, zones: list[str], now: dt.datetime, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.now = now
        choices = [(zone, f"{zone} (the job's time zone)") for zone in zones if _readable(zone)]
        zone_field = self.fields["zone"]
        assert isinstance(zone_field, forms.ChoiceField)
        zone_field.choices = [*choices, ("UTC", "UTC")]
        zone_field.initial = choices[0][0] if len(choices) == 1 else "UTC"
        for name in ("note", "resume_at"):
            _speak_as_the_api(self.fields[name])

    def clean(self) -> dict:
        data = super().clean()
        assert data is not None
        text, zone = data.get("resume_at"), data.get("zone")
        if not text:
            data["resume_at"] = None
        elif not zone:
            self.add_error("zone", "Choose the time zone the resume time is in.")
        else:
            try:
                data["resume_at"] = self._resume_time(text, zone)
            except forms.ValidationError as exc:
                self.add_error("resume_at", exc)
        return data

    def _resume_time(self, text: str, zone: str) -> dt.datetime:
        """``text`` read in ``zone`` (an explicit UTC offset in it wins)."""
        try:
            parsed = dateparse.parse_datetime(text)
        except ValueError:
            parsed = None  # well-formed but impossible, e.g. month 13
        if parsed is None:
            raise forms.ValidationError(f"Not a date and time: {PAUSE_TIME_HELP}")
        if parsed.utcoffset() is None:
            parsed = _in_zone(parsed, zone)
        reason = range_problem(parsed)
        if reason:
            raise forms.ValidationError(reason)
        if parsed <= self.now:
            raise forms.ValidationError(
                f"Must be in the future: it is now {self.now:%Y-%m-%d %H:%M} UTC."
            )
        return parsed.astimezone(dt.UTC)


def _readable(zone: str) -> bool:
    """A zone other than UTC that this host can read (the system pauses a
    job whose zone it cannot; its owner types the resume time in UTC)."""
    try:
        return schedules.validate_timezone(zone) != "UTC"
    except schedules.ScheduleError:
        return False


def _in_zone(wall: dt.datetime, zone: str) -> dt.datetime:
    """The wall-clock time ``wall`` in ``zone``; refused if the zone skips it
    (the hour clocks jump over). A time that occurs twice is the first."""
    aware = wall.replace(tzinfo=zoneinfo.ZoneInfo(zone))
    if aware.astimezone(dt.UTC).astimezone(aware.tzinfo).replace(tzinfo=None) != wall:
        raise forms.ValidationError(
            f"{wall:%Y-%m-%d %H:%M} does not exist in {zone}: the clocks skip it."
        )
    return aware
