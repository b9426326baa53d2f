"""Punctual settings. Every knob comes from the environment through django-environ.

See the configuration table in README.md. Settings hold wiring only: no logic.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import environ

from scheduler_site import localdb
from scheduler_site.database_url import database_settings

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env(
    DEBUG=(bool, False),
    ALLOWED_HOSTS=(list, ["localhost", "127.0.0.1"]),
    PUNCTUAL_ALLOW_PRIVATE_TARGETS=(bool, False),
    PUNCTUAL_RUN_RETENTION_DAYS=(int, 30),
    PUNCTUAL_ENCRYPTION_KEYS=(list, []),
    PUNCTUAL_LOG_JSON=(bool, False),
    PUNCTUAL_LOG_LEVEL=(str, "INFO"),
    PUNCTUAL_API_RATE=(str, "6000/min"),
    PUNCTUAL_DEMO=(bool, False),
    PUNCTUAL_LISTEN=(bool, True),
    PUNCTUAL_POLL_SECONDS=(float, 5.0),
)

DEBUG = env("DEBUG")

_DEV_SECRET_KEY = "punctual-development-key-do-not-use-in-production"
SECRET_KEY = env("SECRET_KEY", default=None)
if not SECRET_KEY:
    if not DEBUG:
        raise environ.ImproperlyConfigured(
            "SECRET_KEY is required when DEBUG is false (set DEBUG=true for development)"
        )
    SECRET_KEY = _DEV_SECRET_KEY
    warnings.warn(
        "SECRET_KEY is not set: using the development key. Set SECRET_KEY in production.",
        stacklevel=1,
    )

ALLOWED_HOSTS = env("ALLOWED_HOSTS")

# Webhooks may target loopback and private addresses only when this is true
# (development, the demo, tests). It lifts the address rule of README "Security" and
# nothing else.
PUNCTUAL_ALLOW_PRIVATE_TARGETS = env("PUNCTUAL_ALLOW_PRIVATE_TARGETS")
PUNCTUAL_RUN_RETENTION_DAYS = env("PUNCTUAL_RUN_RETENTION_DAYS")
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

# The demo app (ops.demo): the built-in receiver that `make run` delivers to.
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
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "scheduler_site",
    "jobs",
    "runs",
    "dispatch",
    "ops",
    # The demo receiver's table and ``manage.py demo`` (make run): only with
    # PUNCTUAL_DEMO=true, so a production schema never has the demo's table.
    *(["ops.demo"] if PUNCTUAL_DEMO else []),
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
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
            ],
        },
    },
]

WSGI_APPLICATION = "scheduler_site.wsgi.application"

# PostgreSQL is the only engine. Without DATABASE_URL, Punctual uses the
# embedded server in var/pg/ (scheduler_site/localdb.py; `make run` starts it).
DATABASE_URL = env.str("DATABASE_URL", default="") or localdb.database_url(BASE_DIR / "var" / "pg")
# Several hosts (a primary and its standbys) are libpq's multi-host form:
# scheduler_site/database_url.py, README "High availability".
DATABASES = {"default": database_settings(DATABASE_URL)}
# Web processes keep their connection between requests; the loops hold one
# persistent connection of their own.
DATABASES["default"]["CONN_MAX_AGE"] = env.int("CONN_MAX_AGE", default=60)
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

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
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_THROTTLE_CLASSES": ["rest_framework.throttling.UserRateThrottle"],
    "DEFAULT_THROTTLE_RATES": {"user": env("PUNCTUAL_API_RATE")},
    "COERCE_DECIMAL_TO_STRING": False,
    "EXCEPTION_HANDLER": "core.api_errors.exception_handler",
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Punctual API",
    "DESCRIPTION": "Recurring jobs delivered as signed webhooks or to pull workers.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    # Jobs and runs both have a "state": name their enums apart.
    "ENUM_NAME_OVERRIDES": {
        "JobStateEnum": "jobs.models.JobState",
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
