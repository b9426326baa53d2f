"""Punctual settings. Every knob comes from the environment through django-environ.

See the configuration table in docs/operating/configuration.md. Settings hold
wiring only: no logic.
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import environ

from jobs.limits import LIMIT_SETTINGS
from scheduler_site import localdb
from scheduler_site.database_url import database_settings

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env(
    DEBUG=(bool, False),
    ALLOWED_HOSTS=(list, ["localhost", "127.0.0.1"]),
    PUNCTUAL_ALLOW_PRIVATE_TARGETS=(bool, False),
    PUNCTUAL_TARGET_LOOKUP_SECONDS=(float, 2.0),
    PUNCTUAL_MAX_TARGET_HOSTS=(int, 100),
    PUNCTUAL_RUN_RETENTION_DAYS=(int, 30),
    PUNCTUAL_EVENT_RETENTION_DAYS=(int, 90),
    PUNCTUAL_ENCRYPTION_KEYS=(list, []),
    PUNCTUAL_LOG_JSON=(bool, False),
    PUNCTUAL_LOG_LEVEL=(str, "INFO"),
    PUNCTUAL_API_RATE=(str, "6000/min"),
    PUNCTUAL_API_ANON_RATE=(str, "60/min"),
    PUNCTUAL_DEMO=(bool, False),
    PUNCTUAL_LISTEN=(bool, True),
    PUNCTUAL_POLL_SECONDS=(float, 5.0),
    PUNCTUAL_HTTPS=(bool, False),
    PUNCTUAL_HSTS_SECONDS=(int, 31_536_000),
    PUNCTUAL_TRUSTED_PROXIES=(int, 0),
    PUNCTUAL_LOGIN_FAILURE_LIMIT=(int, 10),
    PUNCTUAL_LOGIN_COOLOFF_MINUTES=(int, 15),
    PUNCTUAL_BACKFILL_RATE=(float, 10.0),
    PUNCTUAL_OWNER_SHARE=(float, 0.5),
    PUNCTUAL_BACKLOG_DEGRADED_SECONDS=(float, 60.0),
    PUNCTUAL_CLAIM_WAITERS=(int, 4),
    PUNCTUAL_PULL_UNCLAIMED_SECONDS=(int, 60),
    PUNCTUAL_TRANSACTION_POOLER=(bool, False),
    PUNCTUAL_LISTEN_DATABASE_URL=(str, ""),
    PUNCTUAL_ALERT_QUIET_SECONDS=(float, 900.0),
    PUNCTUAL_ALERT_RETRY_SECONDS=(float, 30.0),
    PUNCTUAL_ALERT_MAX_ATTEMPTS=(int, 5),
    PUNCTUAL_ALERT_SEND_SECONDS=(float, 20.0),
)

DEBUG = env("DEBUG")

# With DEBUG on (development, `make run`) a missing SECRET_KEY means a fixed
# development key, silently: every process of `make run` would otherwise warn
# about a choice the developer made on purpose. Without DEBUG it is required.
# Read as it is: django-environ takes a value that starts with "$" for the
# name of another variable, and Django's own key generator makes such keys.
_DEV_SECRET_KEY = "punctual-development-key-do-not-use-in-production"
_secret_key = os.environ.get("SECRET_KEY", "")
if not _secret_key and not DEBUG:
    raise environ.ImproperlyConfigured(
        "SECRET_KEY is required when DEBUG is false (set DEBUG=true for development)"
    )
SECRET_KEY: str = _secret_key or _DEV_SECRET_KEY

ALLOWED_HOSTS = env("ALLOWED_HOSTS")

# Webhooks may target loopback and private addresses only when this is true
# (development, tests). It lifts the address rule of docs/security.md
# "Outbound address guard" and nothing else. Demo mode (PUNCTUAL_DEMO) narrows
# it to loopback addresses (jobs/targets.py configured_rule).
PUNCTUAL_ALLOW_PRIVATE_TARGETS = env("PUNCTUAL_ALLOW_PRIVATE_TARGETS")
# Saving jobs looks their webhook URLs' host names up (jobs/lookups.py): all
# of a request's at once, waiting this long at most in all, for at most this
# many distinct names per request.
PUNCTUAL_TARGET_LOOKUP_SECONDS = env("PUNCTUAL_TARGET_LOOKUP_SECONDS")
if not 0.1 <= PUNCTUAL_TARGET_LOOKUP_SECONDS <= 30:
    raise environ.ImproperlyConfigured("PUNCTUAL_TARGET_LOOKUP_SECONDS must be between 0.1 and 30")
PUNCTUAL_MAX_TARGET_HOSTS = env("PUNCTUAL_MAX_TARGET_HOSTS")
if not 1 <= PUNCTUAL_MAX_TARGET_HOSTS <= 1000:
    raise environ.ImproperlyConfigured("PUNCTUAL_MAX_TARGET_HOSTS must be between 1 and 1000")
PUNCTUAL_RUN_RETENTION_DAYS = env("PUNCTUAL_RUN_RETENTION_DAYS")
# Audit events (jobs.JobEvent) older than this are deleted by the same
# retention pruning as runs (runs/retention.py).
PUNCTUAL_EVENT_RETENTION_DAYS = env("PUNCTUAL_EVENT_RETENTION_DAYS")
if not 1 <= PUNCTUAL_EVENT_RETENTION_DAYS <= 36_500:
    raise environ.ImproperlyConfigured("PUNCTUAL_EVENT_RETENTION_DAYS must be between 1 and 36500")
# Fernet keys (urlsafe base64, 32 bytes) for secrets at rest, newest first. Empty:
# one key is derived from SECRET_KEY (see jobs/crypto.py).
PUNCTUAL_ENCRYPTION_KEYS = env("PUNCTUAL_ENCRYPTION_KEYS")

# Idle workers wait for a NOTIFY on a LISTEN connection of their own, and claim
# at least every PUNCTUAL_POLL_SECONDS anyway (dispatch/wakeup.py). Without
# LISTEN (behind a transaction pooler) they poll every 100 ms.
PUNCTUAL_LISTEN = env("PUNCTUAL_LISTEN")
PUNCTUAL_POLL_SECONDS = env("PUNCTUAL_POLL_SECONDS")
if not 0.01 <= PUNCTUAL_POLL_SECONDS <= 3600:
    raise environ.ImproperlyConfigured("PUNCTUAL_POLL_SECONDS must be between 0.01 and 3600")
# Pull claims with wait_seconds (api/claim_waits.py): at most this many wait at
# once in one web process, each holding one of its threads (the Procfile runs 8
# per process), and at most half of them for one owner. 0: no claim waits.
PUNCTUAL_CLAIM_WAITERS = env("PUNCTUAL_CLAIM_WAITERS")
if not 0 <= PUNCTUAL_CLAIM_WAITERS <= 1000:
    raise environ.ImproperlyConfigured("PUNCTUAL_CLAIM_WAITERS must be between 0 and 1000")
# A pull job's run due this long ago and still not claimed shows in "Needs
# attention" (console/attention.py unclaimed_pull): its workers are gone.
PUNCTUAL_PULL_UNCLAIMED_SECONDS = env("PUNCTUAL_PULL_UNCLAIMED_SECONDS")
if not 1 <= PUNCTUAL_PULL_UNCLAIMED_SECONDS <= 86_400:
    raise environ.ImproperlyConfigured(
        "PUNCTUAL_PULL_UNCLAIMED_SECONDS must be between 1 and 86400"
    )


def _limit(name: str) -> int:
    """An owner limit's default, or the payload limit (docs/guides/owners.md "Owner limits"),
    within the range jobs/limits.py gives it."""
    default, bounds = LIMIT_SETTINGS[name]
    value = env.int(name, default=default)
    if not bounds.min <= value <= bounds.max:
        raise environ.ImproperlyConfigured(
            f"{name} must be between {bounds.min:,} and {bounds.max:,} (got {value:,})"
        )
    return value


# The defaults of the per-owner limits; a superuser sets other values for one
# owner in the admin (jobs.OwnerLimits).
PUNCTUAL_MAX_JOBS_PER_OWNER = _limit("PUNCTUAL_MAX_JOBS_PER_OWNER")
PUNCTUAL_MIN_INTERVAL_SECONDS = _limit("PUNCTUAL_MIN_INTERVAL_SECONDS")
PUNCTUAL_BACKFILL_RUNS_PER_HOUR = _limit("PUNCTUAL_BACKFILL_RUNS_PER_HOUR")
PUNCTUAL_TRIGGERS_PER_MINUTE = _limit("PUNCTUAL_TRIGGERS_PER_MINUTE")
PUNCTUAL_MAX_PAYLOAD_BYTES = _limit("PUNCTUAL_MAX_PAYLOAD_BYTES")


# A backfill's runs become available this many per second per job
# (runs/job_verbs.py backfill), not all at once.
PUNCTUAL_BACKFILL_RATE = env("PUNCTUAL_BACKFILL_RATE")
if not 0.01 <= PUNCTUAL_BACKFILL_RATE <= 1_000_000:
    raise environ.ImproperlyConfigured("PUNCTUAL_BACKFILL_RATE must be between 0.01 and 1000000")
# The largest share of one worker's delivery slots that one owner's runs may
# hold at once (dispatch/worker.py, runs/leases.py claim): the rest stays free
# for the other owners' fires, however slow the one owner's receivers are.
PUNCTUAL_OWNER_SHARE = env("PUNCTUAL_OWNER_SHARE")
if not 0.0 < PUNCTUAL_OWNER_SHARE <= 1.0:
    raise environ.ImproperlyConfigured("PUNCTUAL_OWNER_SHARE must be above 0 and at most 1")
# /api/v1/health/ answers degraded once the oldest claimable run has waited
# longer than this (ops/health.py).
PUNCTUAL_BACKLOG_DEGRADED_SECONDS = env("PUNCTUAL_BACKLOG_DEGRADED_SECONDS")
if PUNCTUAL_BACKLOG_DEGRADED_SECONDS <= 0:
    raise environ.ImproperlyConfigured("PUNCTUAL_BACKLOG_DEGRADED_SECONDS must be positive")

# Alerts (alerts/, docs/guides/alerts.md): one alert per job, kind and
# channel per quiet period (repeats fold into it, with their count); a failed
# send is retried with backoff (full jitter from this base) up to the cap;
# one send may take this long before it is abandoned and retried.
PUNCTUAL_ALERT_QUIET_SECONDS = env("PUNCTUAL_ALERT_QUIET_SECONDS")
if not 0 <= PUNCTUAL_ALERT_QUIET_SECONDS <= 7 * 86400:
    raise environ.ImproperlyConfigured("PUNCTUAL_ALERT_QUIET_SECONDS must be between 0 and 604800")
PUNCTUAL_ALERT_RETRY_SECONDS = env("PUNCTUAL_ALERT_RETRY_SECONDS")
if not 0 < PUNCTUAL_ALERT_RETRY_SECONDS <= 3600:
    raise environ.ImproperlyConfigured(
        "PUNCTUAL_ALERT_RETRY_SECONDS must be above 0 and at most 3600"
    )
PUNCTUAL_ALERT_MAX_ATTEMPTS = env("PUNCTUAL_ALERT_MAX_ATTEMPTS")
if not 1 <= PUNCTUAL_ALERT_MAX_ATTEMPTS <= 100:
    raise environ.ImproperlyConfigured("PUNCTUAL_ALERT_MAX_ATTEMPTS must be between 1 and 100")
PUNCTUAL_ALERT_SEND_SECONDS = env("PUNCTUAL_ALERT_SEND_SECONDS")
if not 0.5 <= PUNCTUAL_ALERT_SEND_SECONDS <= 300:
    raise environ.ImproperlyConfigured("PUNCTUAL_ALERT_SEND_SECONDS must be between 0.5 and 300")

# Demo mode (`make run`): the demo app (ops.demo, the built-in receiver that
# the demo delivers to), a "demo mode" banner on every admin page, and
# webhooks may target loopback addresses, but no other private one.
PUNCTUAL_DEMO = env("PUNCTUAL_DEMO")

INSTALLED_APPS = [
    # django.contrib.admin, with Punctual's site (dashboard URL) as admin.site.
    "scheduler_site.admin_apps.PunctualAdminConfig",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    # Sign-in attempt limits (see "Sign-in limits" below).
    "axes",
    "scheduler_site",
    "accounts",
    "jobs",
    "runs",
    "dispatch",
    "api",
    "console",
    "ops",
    "alerts",
    # The demo receiver's table and ``manage.py demo`` (make run): only with
    # PUNCTUAL_DEMO=true, so a production schema never has the demo's table.
    *(["ops.demo"] if PUNCTUAL_DEMO else []),
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # A sign-in post that arrives while this process hashes another's
    # password is answered 429 at once (scheduler_site/signin.py).
    "scheduler_site.signin.AnswerBusySignIns",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # A view that loses the database answers 503 with Retry-After (failover).
    "core.unavailable.DatabaseUnavailable",
    # Last, as django-axes requires: turns a locked-out sign-in into its 429 page.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "scheduler_site.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                # The "no dispatcher" banner on every admin page.
                "scheduler_site.context_processors.dispatcher_outage",
                # The "demo mode" banner on every admin page.
                "scheduler_site.context_processors.demo_mode",
            ],
        },
    },
]

WSGI_APPLICATION = "scheduler_site.wsgi.application"


# PostgreSQL is the only engine. Without DATABASE_URL, Punctual uses the
# embedded server in var/pg/ (scheduler_site/localdb.py; `make run` starts it).
DATABASE_URL = env.str("DATABASE_URL", default="") or localdb.database_url(BASE_DIR / "var" / "pg")
# Several hosts (a primary and its standbys) are libpq's multi-host form:
# scheduler_site/database_url.py, docs/operating/high-availability.md.
DATABASES = {"default": database_settings(DATABASE_URL)}
# Web processes keep their connection between requests; the loops hold one
# persistent connection of their own.
DATABASES["default"]["CONN_MAX_AGE"] = env.int("CONN_MAX_AGE", default=60)
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True

# DATABASE_URL leads to a transaction pooler (PgBouncer pool_mode=transaction,
# docs/operating/poolers.md): each transaction may run on another server
# connection, so nothing may outlive a transaction on the server.
PUNCTUAL_TRANSACTION_POOLER = env("PUNCTUAL_TRANSACTION_POOLER")
# libpq's startup option that turns JIT off for a connection's session.
JIT_OFF_OPTION = "-c jit=off"
# Statements that ask for it (core/db.py bound_cursor: every API request's
# token lookup, rate count and a create's statements) are prepared on the
# server. Behind a transaction pooler the next transaction may run on a server
# connection that lacks them, so nothing is prepared there: psycopg's
# prepare_threshold None, as Django opens its connections. The ORM's cursors
# bind on the client and never prepare. tests/processes/test_pooler.py runs
# the prepared statements through PgBouncer 1.18 and notices otherwise.
if PUNCTUAL_TRANSACTION_POOLER:
    # A queryset's .iterator() would declare a cursor WITH HOLD, which lives
    # in the session; Punctual streams none, but Django's own commands may.
    DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = True
else:
    # Any number lets a cursor prepare; each bound cursor says whether it
    # does, so the number itself decides nothing.
    DATABASES["default"].setdefault("OPTIONS", {})["prepare_threshold"] = 5
    # No statement of Punctual's is worth JIT-compiling (core/db.py NO_JIT,
    # docs/operating/database.md "Supported servers"): a direct connection
    # turns it off for its whole session, at no cost per transaction. Behind a
    # transaction pooler a session setting cannot be relied on, so every hot
    # transaction sets it itself there (core/db.py hot_transaction).
    _options = DATABASES["default"]["OPTIONS"]
    if JIT_OFF_OPTION not in _options.get("options", ""):
        _options["options"] = f"{_options.get('options', '')} {JIT_OFF_OPTION}".strip()

# The worker's LISTEN connection (dispatch/wakeup.py) is a session of its own:
# through a transaction pooler the notifications never reach it. Empty: it
# uses DATABASE_URL.
PUNCTUAL_LISTEN_DATABASE = (
    database_settings(env("PUNCTUAL_LISTEN_DATABASE_URL"), "PUNCTUAL_LISTEN_DATABASE_URL")
    if env("PUNCTUAL_LISTEN_DATABASE_URL")
    else None
)
if PUNCTUAL_TRANSACTION_POOLER and PUNCTUAL_LISTEN and PUNCTUAL_LISTEN_DATABASE is None:
    raise environ.ImproperlyConfigured(
        "PUNCTUAL_TRANSACTION_POOLER is true: LISTEN through a transaction pooler hears no"
        " notification. Set PUNCTUAL_LISTEN_DATABASE_URL to a direct connection to the server,"
        " or PUNCTUAL_LISTEN=false to poll every 100 ms"
    )

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

# -- Sign-in limits (django-axes; docs/security.md "Sign-in limits") ------------
# Axes' backend comes first, so a locked-out attempt is refused before the
# password backend hashes anything (or takes the one-hash-at-a-time gate,
# scheduler_site/signin.py). Failures are counted in the database, so every
# gunicorn process on every host sees the same counts.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "scheduler_site.signin.OneHashAtATime",
]
AXES_HANDLER = "axes.handlers.database.AxesDatabaseHandler"
# Locked: a user name at one client address, and a client address over all
# the names it tries (docs/security.md "Sign-in limits"); never a user name by
# itself, or anyone could lock any owner, superusers included, out of the
# admin from anywhere. (With one limit for both, an address's count, which
# includes each of its pairs', reaches it first or together.)
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"], "ip_address"]
AXES_FAILURE_LIMIT = env("PUNCTUAL_LOGIN_FAILURE_LIMIT")
if AXES_FAILURE_LIMIT < 1:
    raise environ.ImproperlyConfigured("PUNCTUAL_LOGIN_FAILURE_LIMIT must be at least 1")
_cooloff_minutes = env("PUNCTUAL_LOGIN_COOLOFF_MINUTES")
if _cooloff_minutes < 1:
    raise environ.ImproperlyConfigured("PUNCTUAL_LOGIN_COOLOFF_MINUTES must be at least 1")
AXES_COOLOFF_TIME = dt.timedelta(minutes=_cooloff_minutes)
AXES_CLIENT_IP_CALLABLE = "core.client_address.client_address"
AXES_LOCKOUT_CALLABLE = "scheduler_site.signin.locked_out"
# An attempt during a lockout is refused and writes nothing: the lockout ends a
# cool-off after the failure that reached the limit. Recording it instead (axes'
# default) appends each refused post to the attempt row, a row that grows and
# is rewritten whole with every attempt of a client that keeps hammering.
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False
# A success does not clear the failures: an owner's own sign-in would
# otherwise clear the count of the address they guess others' passwords from.
AXES_RESET_ON_SUCCESS = False
# Axes would keep a row per successful sign-in forever; only failures are kept,
# and only within the cool-off.
AXES_DISABLE_ACCESS_LOG = True
# No "AXES: BEGIN" line at the start of every process.
AXES_VERBOSE = False

# -- HTTPS and proxies (docs/operating/tls-proxy.md) ----------------------------
# How many reverse proxies stand between clients and gunicorn. 0: the
# X-Forwarded-* headers are the client's own words and are ignored.
PUNCTUAL_TRUSTED_PROXIES = env("PUNCTUAL_TRUSTED_PROXIES")
if PUNCTUAL_TRUSTED_PROXIES < 0:
    raise environ.ImproperlyConfigured("PUNCTUAL_TRUSTED_PROXIES must be 0 or more")
if PUNCTUAL_TRUSTED_PROXIES:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
PUNCTUAL_HTTPS = env("PUNCTUAL_HTTPS")
if PUNCTUAL_HTTPS:
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_SSL_REDIRECT = True
    # Load-balancer probes and Prometheus often reach gunicorn directly, over
    # plain HTTP: health and metrics answer them instead of redirecting.
    SECURE_REDIRECT_EXEMPT = [r"^api/v1/health/$", r"^metrics$"]
    SECURE_HSTS_SECONDS = env("PUNCTUAL_HSTS_SECONDS")
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True

LANGUAGE_CODE = "en-us"
# Punctual requires aware UTC datetimes everywhere; the
# system check in scheduler_site/checks.py refuses to start otherwise.
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
# Admin dates as "2026-11-30 01:53:29 UTC" (scheduler_site/formats/en/formats.py).
FORMAT_MODULE_PATH = ["scheduler_site.formats"]

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "var" / "static"

LOGIN_URL = "admin:login"

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "accounts.authentication.ApiTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_THROTTLE_CLASSES": [
        "accounts.throttles.OwnerRateThrottle",
        "accounts.throttles.AddressRateThrottle",
    ],
    "DEFAULT_THROTTLE_RATES": {
        "user": env("PUNCTUAL_API_RATE"),
        "anon": env("PUNCTUAL_API_ANON_RATE"),
    },
    # No NUM_PROXIES: DRF's own rule would take a short X-Forwarded-For's
    # first entry. Every throttle keys clients by core/client_address.py.
    "COERCE_DECIMAL_TO_STRING": False,
    "EXCEPTION_HANDLER": "core.api_errors.exception_handler",
}

# The OpenAPI document's introduction (Markdown), shown at the top of /api/v1/docs/.
API_INTRO = """Recurring jobs (cron or interval) delivered as signed webhooks, or handed to
your own pull workers.

**Authentication.** Send your API key in every request:
`Authorization: Token <key>` (`Authorization: Bearer <key>` works too).
The `create_owner` management command prints an owner's first key;
`POST /api/v1/token/rotate/` makes a new one. Without valid credentials the answer is 401.

**Requests and answers.** Bodies are JSON objects (`Content-Type: application/json`),
and unknown or read-only fields are refused. Times are ISO 8601 with a UTC offset;
answers are UTC with a `Z`. Errors are `{"field": ["message"]}` for invalid input,
otherwise `{"detail": "message"}`.

**Lists** are cursor-paginated (`next`, `previous`, `results`): follow `next`;
`page_size` is 1 to 500 (default 50).

**Pull workers** claim due runs of their pull jobs, heartbeat while they work,
and complete each run with the `attempt` the claim gave them.
"""

SPECTACULAR_SETTINGS = {
    "TITLE": "Punctual API",
    "DESCRIPTION": API_INTRO,
    # Docstrings are written for the maintainers: the document's words are
    # only those given to it (extend_schema's summary and description, help_text).
    "DISABLE_DOCSTRING_DESCRIPTIONS": True,
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    # Jobs and runs both have a "state": name their enums apart.
    "ENUM_NAME_OVERRIDES": {
        "JobStateEnum": "jobs.models.JobStatus",
        "RunStateEnum": "runs.models.RunState",
    },
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"()": "core.logs.KeyValueFormatter"},
        "json": {"()": "core.logs.JsonFormatter"},
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": "json" if env("PUNCTUAL_LOG_JSON") else "plain",
        },
    },
    "root": {"handlers": ["console"], "level": env("PUNCTUAL_LOG_LEVEL")},
    "loggers": {"django.db.backends": {"level": "WARNING"}},
}
