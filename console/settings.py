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
    "rest_framework.authtoken",
    "drf_spectacular",
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
                "console.pages.access.roles",
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
# Long-lived connections in every process and thread (web, workers, history writers): reconnecting costs more
# than the statement (SQLite runs its PRAGMAs and registers Django's functions on every connection).
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

LOGIN_URL = "/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/login/"

# Admin REST API (console/api): session for the console, token for scripts; roles from console/roles.py.
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["console.api.permissions.ViewerReadsOthersNeedRole"],
    "EXCEPTION_HANDLER": "console.api.errors.exception_handler",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "ASE admin API",
    "DESCRIPTION": "Assured Service Execution: service units, processes, persistence areas, jobs, monitoring.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
    "SERVE_PERMISSIONS": ["console.api.permissions.ViewerReadsOthersNeedRole"],
    # Jobs and reports share these states; the broker connection has its own "status" choices.
    "ENUM_NAME_OVERRIDES": {"RunStatusEnum": "console.models.Report.Status"},
}
# If set, GET /metrics requires "Authorization: Bearer <token>".
ASE_METRICS_TOKEN = env.str("ASE_METRICS_TOKEN", default="")

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
# Seconds between two snapshots pushed to the open dashboards (console.live).
ASE_DASHBOARD_INTERVAL = env.float("ASE_DASHBOARD_INTERVAL", default=2.0)
# Seconds between two probes of the broker connection when idle (MON-010).
ASE_BROKER_PROBE_INTERVAL = env.float("ASE_BROKER_PROBE_INTERVAL", default=30.0)
# Message history: days kept (0 = forever), and how often / how much the beat task purges older events.
# Off only to measure what recording the history costs (bench/history_overhead.py): nothing is recorded.
ASE_HISTORY_ENABLED = env.bool("ASE_HISTORY_ENABLED", default=True)
# Seconds between two writes of a process's buffered history events (one transaction each): what a kill -9 of
# the process can lose, and how late the console shows an event. Fewer, larger writes cost less per event.
ASE_HISTORY_FLUSH_INTERVAL = env.float("ASE_HISTORY_FLUSH_INTERVAL", default=1.0)
# Who writes those batches: "thread" (the recorder thread, through the process's own connection), "process" (a
# child process, console.history_writer: SQLite only) or "auto": "process" on SQLite, whose work would otherwise
# run inside the recording process among its busy threads, "thread" on PostgreSQL, whose server does the work.
ASE_HISTORY_WRITER = env.str("ASE_HISTORY_WRITER", default="auto")
ASE_HISTORY_RETENTION_DAYS = env.int("ASE_HISTORY_RETENTION_DAYS", default=90)
ASE_HISTORY_PURGE_INTERVAL = env.float("ASE_HISTORY_PURGE_INTERVAL", default=3600.0)
ASE_HISTORY_PURGE_BATCH = env.int("ASE_HISTORY_PURGE_BATCH", default=10_000)
CELERY_BEAT_SCHEDULE = {
    "ase-retry-pump": {"task": "console.tasks.pump_retries", "schedule": ASE_RETRY_PUMP_INTERVAL},
    "ase-broker-probe": {"task": "console.tasks.probe_broker", "schedule": ASE_BROKER_PROBE_INTERVAL},
    "ase-dashboard": {"task": "console.tasks.publish_dashboard", "schedule": ASE_DASHBOARD_INTERVAL},
    "ase-history-purge": {"task": "console.tasks.purge_history", "schedule": ASE_HISTORY_PURGE_INTERVAL},
}

# -- Reports (PySpark) -------------------------------------------------------------
# Spark master: local[*] (this machine) by default, spark://host:7077 (or yarn, k8s://...) for a cluster.
SPARK_MASTER = env.str("SPARK_MASTER", default="local[*]")
# JDBC drivers handed to Spark (Debian's libpostgresql-jdbc-java and libxerial-sqlite-jdbc-java).
ASE_SPARK_JDBC_JARS = env.list(
    "ASE_SPARK_JDBC_JARS", default=["/usr/share/java/postgresql.jar", "/usr/share/java/sqlite-jdbc.jar"]
)
# How Spark reaches the history store, when it is not the DATABASE_URL as seen from this machine
# (a cluster's executors may need another host name): a JDBC URL, e.g. jdbc:postgresql://db:5432/ase.
ASE_REPORT_JDBC_URL = env.str("ASE_REPORT_JDBC_URL", default="")
# Parallel JDBC reads of the history (one query per id range).
ASE_REPORT_PARTITIONS = env.int("ASE_REPORT_PARTITIONS", default=8)
ASE_SPARK_DRIVER_MEMORY = env.str("ASE_SPARK_DRIVER_MEMORY", default="2g")

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
# STOMP connections per web process for the posting process; each carries one SEND or one transaction at a time
# (group commit, ase_engine/stomp_async.py): one gathers the most requests per disk sync (docs/BENCHMARKS.md).
ASE_POSTING_CONNECTIONS = env.int("ASE_POSTING_CONNECTIONS", default=1)
# How long a web process trusts its cached copy of the service units (seconds).
ASE_REGISTRY_TTL = env.float("ASE_REGISTRY_TTL", default=1.0)
# Concurrent target invocations per worker instance.
ASE_SENDING_CONCURRENCY = env.int("ASE_SENDING_CONCURRENCY", default=8)
# How often a worker re-reads the service units and writes its heartbeat (seconds).
ASE_WORKER_SYNC_INTERVAL = env.float("ASE_WORKER_SYNC_INTERVAL", default=2.0)
# Duplicate elimination (Idempotency-Key, console.dedup): keys live in Redis.
# A key is remembered for the longer of the unit's TTL and this many seconds.
ASE_IDEMPOTENCY_RETENTION = env.int("ASE_IDEMPOTENCY_RETENTION", default=24 * 3600)
# How long a claimed key stays locked if its web process dies before persisting (seconds).
ASE_IDEMPOTENCY_LEASE = env.float("ASE_IDEMPOTENCY_LEASE", default=60.0)
# How long a concurrent duplicate waits for the first request's outcome before 409 E1002 (seconds).
ASE_IDEMPOTENCY_WAIT = env.float("ASE_IDEMPOTENCY_WAIT", default=15.0)
# Redis of the keys (default: REDIS_URL) and its socket timeout (seconds).
ASE_IDEMPOTENCY_REDIS_URL = env.str("ASE_IDEMPOTENCY_REDIS_URL", default="")
ASE_IDEMPOTENCY_REDIS_TIMEOUT = env.float("ASE_IDEMPOTENCY_REDIS_TIMEOUT", default=2.0)
# How deep a browse page can reach into each queue: the broker's maxBrowsePageSize (deploy/activemq/activemq.xml).
ASE_BROWSE_WINDOW = env.int("ASE_BROWSE_WINDOW", default=1000)
# Purge/recycle: messages per broker transaction, and how many messages per queue a selective one
# (ids or a filter) looks at (those it does not take are held un-acknowledged meanwhile).
ASE_ADMIN_BATCH = env.int("ASE_ADMIN_BATCH", default=500)
ASE_ADMIN_SCAN_WINDOW = env.int("ASE_ADMIN_SCAN_WINDOW", default=10_000)
# A purge/recycle of a whole area reconnects every this many messages: ActiveMQ holds per-connection state for its
# transactions until the connection closes (a 512 MB broker ran out of heap after ~60,000 moves on one connection).
ASE_ADMIN_PER_CONNECTION = env.int("ASE_ADMIN_PER_CONNECTION", default=20_000)
# During a purge or a recycle of a service's area, posting into that service waits up to this many seconds
# (ADM-010/015), then answers 503.
ASE_ADMIN_POSTING_WAIT = env.float("ASE_ADMIN_POSTING_WAIT", default=10.0)
# A running job with no heartbeat for this long is dead (its worker was killed): posting stops waiting for it,
# and its task, delivered again, takes it over.
ASE_JOB_STALE_AFTER = env.float("ASE_JOB_STALE_AFTER", default=60.0)

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
