"""The one settings module, driven by the environment.

ASE's own variables start with ``ASE_``; the database and Redis use the
standard ``DATABASE_URL`` and ``REDIS_URL``. Defaults run on one machine out
of the box (SQLite under ``ASE_DATA_DIR``, Redis and ActiveMQ on loopback).
A value that cannot be read stops the process with the variable's name.
The broker parameters are checked with the specification's codes
(E0002-E0005, E0015) by ``console.checks``.
"""

from __future__ import annotations

from pathlib import Path

import environ

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()
DATA_DIR = Path(env.str("ASE_DATA_DIR", default=str(BASE_DIR / "var")))

SECRET_KEY = env.str("ASE_SECRET_KEY", default="ase-development-key-change-me-in-production")
DEBUG = env.bool("ASE_DEBUG", default=False)
ALLOWED_HOSTS = env.list("ASE_ALLOWED_HOSTS", default=["127.0.0.1", "localhost", "testserver"])
CSRF_TRUSTED_ORIGINS = env.list("ASE_CSRF_TRUSTED_ORIGINS", default=[])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "channels",
    "console",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "servestatic.middleware.ServeStaticMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "console.urls"
WSGI_APPLICATION = None
ASGI_APPLICATION = "console.asgi.application"

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
            ]
        },
    }
]

DATABASES = {"default": env.db_url("DATABASE_URL", default=f"sqlite:///{DATA_DIR / 'ase.sqlite3'}")}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # A file, not memory, so that worker processes started by tests share it.
    DATABASES["default"]["TEST"] = {"NAME": str(DATA_DIR / "test-ase.sqlite3")}
    # Several processes write (web, workers, beat): WAL lets readers and one writer work together, and
    # IMMEDIATE transactions wait for the write lock (timeout) instead of failing on a lock upgrade.
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {"timeout": 20, "transaction_mode": "IMMEDIATE", "init_command": "PRAGMA journal_mode=WAL;"}
    )
else:
    DATABASES["default"]["CONN_MAX_AGE"] = env.int("ASE_DB_CONN_MAX_AGE", default=60)
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = env.str("REDIS_URL", default="redis://127.0.0.1:6379/0")
CHANNEL_LAYERS = {
    "default": {"BACKEND": "channels_redis.core.RedisChannelLayer", "CONFIG": {"hosts": [REDIS_URL]}},
}

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = DATA_DIR / "static"
STATICFILES_DIRS = [BASE_DIR / "static"]

LOGIN_URL = "/admin/login/"

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.SessionAuthentication",
        "rest_framework.authentication.BasicAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAdminUser"],
}

# -- Celery ------------------------------------------------------------------------
CELERY_BROKER_URL = env.str("ASE_CELERY_BROKER_URL", default=REDIS_URL)
CELERY_RESULT_BACKEND = env.str("ASE_CELERY_RESULT_BACKEND", default=REDIS_URL)
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Seconds between two runs of the retry pump (PROC-026), and the longest one run may take.
ASE_RETRY_PUMP_INTERVAL = env.float("ASE_RETRY_PUMP_INTERVAL", default=1.0)
ASE_RETRY_PUMP_BUDGET = env.float("ASE_RETRY_PUMP_BUDGET", default=5.0)
CELERY_BEAT_SCHEDULE = {
    "ase-retry-pump": {"task": "console.tasks.pump_retries", "schedule": ASE_RETRY_PUMP_INTERVAL},
}

# -- ASE -----------------------------------------------------------------------------
# Component parameters as text: console.component checks them with the spec's codes.
ASE_COMPONENT = {
    "broker-transport": env.str("ASE_BROKER_TRANSPORT", default="stomp"),
    "broker-url": env.str("ASE_BROKER_URL", default=f"127.0.0.1:{env.str('ASE_BROKER_PORT', default='61613')}"),
    "broker-vhost": env.str("ASE_BROKER_VHOST", default="localhost"),
    "broker-login": env.str("ASE_BROKER_LOGIN", default=""),
    "broker-passcode": env.str("ASE_BROKER_PASSCODE", default=""),
    "stop-timeout": env.str("ASE_STOP_TIMEOUT", default="60"),
    "time-to-live": env.str("ASE_TIME_TO_LIVE", default="0"),
    "receipt-timeout": env.str("ASE_RECEIPT_TIMEOUT", default="10"),
}
# Largest request body the ingress accepts (413 above it).
ASE_MAX_BODY_BYTES = env.int("ASE_MAX_BODY_BYTES", default=10 * 1024 * 1024)
DATA_UPLOAD_MAX_MEMORY_SIZE = ASE_MAX_BODY_BYTES
# STOMP connections per web process for the posting process.
ASE_POSTING_CONNECTIONS = env.int("ASE_POSTING_CONNECTIONS", default=8)
# How long a web process trusts its cached copy of the service units (seconds).
ASE_REGISTRY_TTL = env.float("ASE_REGISTRY_TTL", default=1.0)
# Concurrent target invocations per worker instance.
ASE_SENDING_CONCURRENCY = env.int("ASE_SENDING_CONCURRENCY", default=8)
# How often a worker re-reads the service units and writes its heartbeat (seconds).
ASE_WORKER_SYNC_INTERVAL = env.float("ASE_WORKER_SYNC_INTERVAL", default=2.0)

LOG_LEVEL = env.str("ASE_LOG_LEVEL", default="INFO")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {
            "()": "console.logformat.OneLineFormatter",
            "format": "%(asctime)s %(levelname)s %(name)s %(message)s",
        }
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": "WARNING"},
    "loggers": {
        "ase": {"level": LOG_LEVEL},
        "console": {"level": LOG_LEVEL},
        "stomp": {"level": "WARNING"},
        "httpx": {"level": "WARNING"},
    },
}
