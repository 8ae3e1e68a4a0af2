"""The Spark job behind the reports: reads the message history store itself, over JDBC.

No Django here: the caller gives a ``HistorySource`` (JDBC URL, driver,
credentials, table) and the ``Window`` (time range, services). The history is
read once, in ``partitions`` parallel JDBC queries (one id range each), kept
in Spark's cache, and every report is computed from it:

- ``outcomes``: per service and hour, messages acked, faulted, errored, timed out, expired;
- ``latency``: per service, post -> ack latency p50/p95/p99 (``percentile_approx``) of the
  messages whose ``posted`` and (first) ``acked`` events both fall in the window;
- ``attempts``: per service, how many messages needed n attempts (``attempt`` events);
- ``retries``: per service, messages that had a retry scheduled and, of them, how many were
  finally acked (retry success rate);
- ``reasons``: the most frequent fault/error reasons (service, kind, target status, message);
- ``parking``: per service, area and exit (purged/recycled), how long messages stayed parked:
  from the ``parked`` event to the ``purged``/``recycled`` event of the same message and area.

Every event counts where its own time falls: a window cuts the life of the
messages that cross its edges. ``progress`` is called with a stage description
and a fraction (Spark stages done, report by report) while the job runs.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

log = logging.getLogger("ase.reports")

REPORTS = ("outcomes", "latency", "attempts", "retries", "reasons", "parking")
# The columns of each report's rows (CSV headers).
COLUMNS: dict[str, tuple[str, ...]] = {
    "outcomes": ("service", "hour", "acked", "faulted", "errored", "timed_out", "expired"),
    "latency": ("service", "messages", "p50_ms", "p95_ms", "p99_ms", "mean_ms", "max_ms"),
    "attempts": ("service", "attempts", "messages"),
    "retries": ("service", "retried", "succeeded", "success_rate"),
    "reasons": ("service", "kind", "target_status", "reason", "count"),
    "parking": ("service", "area", "exit", "messages", "mean_s", "p50_s", "p95_s", "max_s"),
}
PERCENTILES = (0.5, 0.95, 0.99)
# percentile_approx accuracy: the relative rank error is 1/ACCURACY.
ACCURACY = 10_000
TOP_REASONS = 20

Progress = Callable[[str, float], None]


@dataclass(frozen=True)
class HistorySource:
    """Where Spark reads the history: a JDBC URL (``jdbc:postgresql://...`` or ``jdbc:sqlite:/path``)."""

    url: str
    driver: str
    table: str = "console_messageevent"
    user: str = ""
    password: str = ""
    fetch_size: int = 10_000

    @property
    def vendor(self) -> str:
        return "sqlite" if self.url.startswith("jdbc:sqlite:") else "postgresql"


@dataclass(frozen=True)
class Window:
    start: datetime
    end: datetime
    services: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.start.tzinfo is None or self.end.tzinfo is None:
            raise ValueError("start and end must carry a time zone")
        if self.end <= self.start:
            raise ValueError("end must be after start")


@dataclass
class SparkSettings:
    master: str = "local[*]"
    jars: tuple[str, ...] = ()
    driver_memory: str = "2g"
    partitions: int = 8
    extra: dict[str, str] = field(default_factory=dict)


_session_lock = threading.Lock()


def spark_session(config: SparkSettings) -> Any:
    """The process's Spark session (created once; later calls reuse it whatever their settings)."""
    from pyspark.sql import SparkSession

    with _session_lock:
        builder = (
            SparkSession.builder.appName("ase-reports")
            .master(config.master)
            .config("spark.jars", ",".join(config.jars))
            .config("spark.driver.memory", config.driver_memory)
            .config("spark.sql.session.timeZone", "UTC")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", str(max(2, config.partitions)))
            .config("spark.sql.adaptive.enabled", "true")
        )
        for key, value in config.extra.items():
            builder = builder.config(key, value)
        session = builder.getOrCreate()
        session.sparkContext.setLogLevel("ERROR")
        return session


def _literal(moment: datetime, vendor: str) -> str:
    """A SQL timestamp literal built from a datetime (never from user text)."""
    utc = moment.astimezone(UTC)
    if vendor == "sqlite":
        # Django stores naive UTC text exactly as str() writes it ('YYYY-MM-DD HH:MM:SS[.ffffff]', no
        # fraction when it is zero); the same format keeps text comparison in time order.
        return "'" + str(utc.replace(tzinfo=None)) + "'"
    return "'" + utc.strftime("%Y-%m-%d %H:%M:%S.%f") + "+00'"


# The event kinds the reports use, read as small integers (the database sends and Spark compares
# numbers, not strings); other kinds (``retried``) are read as NULL.
KINDS = (
    "posted",
    "attempt",
    "acked",
    "fault",
    "error",
    "timeout",
    "expired",
    "retry_scheduled",
    "parked",
    "purged",
    "recycled",
)


def _k(*names: str) -> Any:
    """A condition on the event kind: one of ``names``."""
    from pyspark.sql import functions as F

    codes = [KINDS.index(name) for name in names]
    return F.col("k") == codes[0] if len(codes) == 1 else F.col("k").isin(codes)


def _message_key(vendor: str) -> str:
    """The message id as Spark groups on it: on PostgreSQL a 64-bit hash of it (a long key shuffles
    much faster than a 32-character string; a collision among 10 million ids has a probability of
    about 3 in a million, and would only merge two messages' figures); elsewhere the id itself."""
    return "hashtextextended(message_id, 0)" if vendor == "postgresql" else "message_id"


def _epoch_ms(vendor: str) -> str:
    if vendor == "sqlite":
        return "CAST(ROUND((julianday(at) - 2440587.5) * 86400000.0) AS INTEGER)"
    return "CAST(ROUND(EXTRACT(EPOCH FROM at) * 1000) AS BIGINT)"


def _reader(spark: Any, source: HistorySource) -> Any:
    reader = (
        spark.read.format("jdbc")
        .option("url", source.url)
        .option("driver", source.driver)
        .option("fetchsize", str(source.fetch_size))
    )
    if source.user:
        reader = reader.option("user", source.user)
    if source.password:
        reader = reader.option("password", source.password)
    return reader


def read_history(spark: Any, source: HistorySource, window: Window, partitions: int) -> Any:
    """The window's events as a DataFrame, read by ``partitions`` JDBC queries over id ranges."""
    from pyspark.sql import functions as F

    bounds = (
        _reader(spark, source)
        .option("query", f"SELECT MIN(id) AS lo, MAX(id) AS hi FROM {source.table}")
        .load()
        .collect()[0]
    )
    lo, hi = bounds["lo"], bounds["hi"]
    # Only what the reports use: the area of parking events, the reason of faults and errors.
    kind_code = " ".join(f"WHEN '{name}' THEN {code}" for code, name in enumerate(KINDS))
    columns = (
        f"id, {_message_key(source.vendor)} AS msg, service, CASE kind {kind_code} END AS k, target_status, "
        "CASE WHEN kind IN ('parked', 'purged', 'recycled') THEN area ELSE '' END AS area, "
        "CASE WHEN kind IN ('fault', 'error') THEN detail ELSE '' END AS detail"
    )
    query = (
        f"(SELECT {columns}, {_epoch_ms(source.vendor)} AS at_ms FROM {source.table} "
        f"WHERE at >= {_literal(window.start, source.vendor)} AND at < {_literal(window.end, source.vendor)}) h"
    )
    # Spark's types for the columns (SQLite's driver reports computed columns as decimals).
    key_type = "LONG" if source.vendor == "postgresql" else "STRING"
    schema = (
        f"id LONG, msg {key_type}, service STRING, k INT, target_status INT, area STRING, detail STRING, at_ms LONG"
    )
    reader = _reader(spark, source).option("dbtable", query).option("customSchema", schema)
    if lo is not None and hi is not None and partitions > 1 and hi > lo:
        reader = (
            reader.option("partitionColumn", "id")
            .option("lowerBound", str(int(lo)))
            .option("upperBound", str(int(hi) + 1))
            .option("numPartitions", str(partitions))
        )
    frame = reader.load()
    if window.services:
        frame = frame.where(F.col("service").isin(list(window.services)))  # pushed down to the database
    return frame


# -- the reports --------------------------------------------------------------------


def _count(kind: str) -> Any:
    from pyspark.sql import functions as F

    return F.sum(F.when(_k(kind), 1).otherwise(0)).cast("long")


def outcomes(events: Any) -> list[dict[str, Any]]:
    from pyspark.sql import functions as F

    finals = events.where(_k("acked", "fault", "error", "timeout", "expired"))
    rows = (
        finals.withColumn("hour_ms", (F.floor(F.col("at_ms") / 3_600_000) * 3_600_000).cast("long"))
        .groupBy("service", "hour_ms")
        .agg(
            _count("acked").alias("acked"),
            _count("fault").alias("faulted"),
            _count("error").alias("errored"),
            _count("timeout").alias("timed_out"),
            _count("expired").alias("expired"),
        )
        .orderBy("service", "hour_ms")
        .collect()
    )
    return [
        {
            "service": r["service"],
            "hour": _iso(r["hour_ms"]),
            **{k: int(r[k]) for k in ("acked", "faulted", "errored", "timed_out", "expired")},
        }
        for r in rows
    ]


def per_message(events: Any) -> Any:
    """One row per message: first post and first ack times, attempts, whether a retry was scheduled.

    Shared by ``latency``, ``attempts`` and ``retries`` (one shuffle of the events instead of three)."""
    from pyspark.sql import functions as F

    return (
        events.where(_k("posted", "attempt", "acked", "retry_scheduled"))
        .groupBy("service", "msg")
        .agg(
            F.min(F.when(_k("posted"), F.col("at_ms"))).alias("posted_ms"),
            F.min(F.when(_k("acked"), F.col("at_ms"))).alias("acked_ms"),
            F.sum(F.when(_k("attempt"), 1).otherwise(0)).cast("long").alias("attempts"),
            F.max(F.when(_k("retry_scheduled"), 1).otherwise(0)).alias("retried"),
        )
    )


def latency(messages: Any) -> list[dict[str, Any]]:
    from pyspark.sql import functions as F

    pairs = messages.where(F.col("posted_ms").isNotNull() & F.col("acked_ms").isNotNull()).withColumn(
        "latency_ms", F.col("acked_ms") - F.col("posted_ms")
    )
    rows = (
        pairs.groupBy("service")
        .agg(
            F.count("*").alias("messages"),
            F.percentile_approx("latency_ms", list(PERCENTILES), ACCURACY).alias("p"),
            F.avg("latency_ms").alias("mean"),
            F.max("latency_ms").alias("max"),
        )
        .orderBy("service")
        .collect()
    )
    return [
        {
            "service": r["service"],
            "messages": int(r["messages"]),
            "p50_ms": int(r["p"][0]),
            "p95_ms": int(r["p"][1]),
            "p99_ms": int(r["p"][2]),
            "mean_ms": round(float(r["mean"]), 1),
            "max_ms": int(r["max"]),
        }
        for r in rows
    ]


def attempts(messages: Any) -> list[dict[str, Any]]:
    from pyspark.sql import functions as F

    rows = (
        messages.where(F.col("attempts") > 0)
        .groupBy("service", "attempts")
        .agg(F.count("*").alias("messages"))
        .orderBy("service", "attempts")
        .collect()
    )
    return [{"service": r["service"], "attempts": int(r["attempts"]), "messages": int(r["messages"])} for r in rows]


def retries(messages: Any) -> list[dict[str, Any]]:
    from pyspark.sql import functions as F

    rows = (
        messages.where(F.col("retried") == 1)
        .groupBy("service")
        .agg(
            F.count("*").alias("retried"),
            F.sum(F.when(F.col("acked_ms").isNotNull(), 1).otherwise(0)).cast("long").alias("succeeded"),
        )
        .orderBy("service")
        .collect()
    )
    return [
        {
            "service": r["service"],
            "retried": int(r["retried"]),
            "succeeded": int(r["succeeded"]),
            "success_rate": round(int(r["succeeded"]) / int(r["retried"]), 4),
        }
        for r in rows
    ]


def reasons(events: Any, top: int = TOP_REASONS) -> list[dict[str, Any]]:
    from pyspark.sql import functions as F

    rows = (
        events.where(_k("fault", "error"))
        .groupBy("service", "k", "target_status", "detail")
        .agg(F.count("*").alias("count"))
        .orderBy(F.desc("count"), "service", "k", "target_status", "detail")
        .limit(top)
        .collect()
    )
    return [
        {
            "service": r["service"],
            "kind": KINDS[r["k"]],
            "target_status": None if r["target_status"] is None else int(r["target_status"]),
            "reason": r["detail"] or "",
            "count": int(r["count"]),
        }
        for r in rows
    ]


def parking(events: Any) -> list[dict[str, Any]]:
    from pyspark.sql import functions as F

    parked = events.where(_k("parked")).select("msg", "area", F.col("at_ms").alias("parked_ms"))
    exits = events.where(_k("purged", "recycled")).select("service", "msg", "area", F.col("k").alias("exit"), "at_ms")
    stays = (
        exits.join(parked, ["msg", "area"])
        .where(F.col("parked_ms") <= F.col("at_ms"))
        .groupBy("service", "msg", "area", "exit", "at_ms")
        .agg(F.max("parked_ms").alias("parked_ms"))  # the latest parking before this exit
        .withColumn("seconds", (F.col("at_ms") - F.col("parked_ms")) / 1000.0)
    )
    rows = (
        stays.groupBy("service", "area", "exit")
        .agg(
            F.count("*").alias("messages"),
            F.avg("seconds").alias("mean"),
            F.percentile_approx("seconds", [0.5, 0.95], ACCURACY).alias("p"),
            F.max("seconds").alias("max"),
        )
        .orderBy("service", "area", "exit")
        .collect()
    )
    return [
        {
            "service": r["service"],
            "area": r["area"],
            "exit": KINDS[r["exit"]],
            "messages": int(r["messages"]),
            "mean_s": round(float(r["mean"]), 3),
            "p50_s": round(float(r["p"][0]), 3),
            "p95_s": round(float(r["p"][1]), 3),
            "max_s": round(float(r["max"]), 3),
        }
        for r in rows
    ]


# Each report and what it is computed from: the events, or one row per message (``per_message``).
_FUNCTIONS: dict[str, tuple[str, Callable[[Any], list[dict[str, Any]]]]] = {
    "outcomes": ("events", outcomes),
    "latency": ("messages", latency),
    "attempts": ("messages", attempts),
    "retries": ("messages", retries),
    "reasons": ("events", reasons),
    "parking": ("events", parking),
}


def _iso(epoch_ms: int) -> str:
    return datetime.fromtimestamp(epoch_ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# -- progress -----------------------------------------------------------------------


class StageMonitor:
    """Polls Spark's status tracker while a step runs and reports its stages' progress."""

    def __init__(
        self, spark: Any, progress: Progress, interval: float = 0.5, on_exit: Callable[[], None] | None = None
    ) -> None:
        self.tracker = spark.sparkContext.statusTracker()
        self.progress = progress
        self.on_exit = on_exit
        self.interval = interval
        self.step = ""
        self.done = 0.0
        self.share = 0.0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._last = 0.0
        self._thread = threading.Thread(target=self._run, name="ase-report-stages", daemon=True)

    def __enter__(self) -> StageMonitor:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def begin(self, step: str, done: float, share: float) -> None:
        """A new step: ``done`` is the progress before it, ``share`` its part of the whole."""
        self.step, self.done, self.share = step, done, share
        self._report(f"{step}: starting", done)

    def _report(self, stage: str, fraction: float) -> None:
        """Both threads report through here, one at a time; progress never goes backwards."""
        with self._lock:
            self._last = max(self._last, min(1.0, fraction))
            try:
                self.progress(stage, self._last)
            except Exception as exc:  # noqa: BLE001 - a progress update must never fail the report
                log.warning("report progress not saved: %s", exc)

    def _run(self) -> None:
        try:
            self._poll()
        finally:
            if self.on_exit is not None:
                self.on_exit()

    def _poll(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                stages = [self.tracker.getStageInfo(i) for i in self.tracker.getActiveStageIds()]
            except Exception:  # noqa: BLE001 - the context may be stopping
                continue
            stages = [s for s in stages if s is not None]
            if not stages:
                continue
            total = sum(s.numTasks for s in stages) or 1
            finished = sum(s.numCompletedTasks for s in stages)
            names = ", ".join(f"stage {s.stageId} {s.numCompletedTasks}/{s.numTasks} tasks" for s in stages)
            self._report(f"{self.step}: {names}", self.done + self.share * finished / total)


# -- the job ------------------------------------------------------------------------


@dataclass
class ReportOutput:
    events: int
    results: dict[str, list[dict[str, Any]]]


def run_reports(
    spark: Any,
    source: HistorySource,
    window: Window,
    *,
    partitions: int = 8,
    progress: Progress | None = None,
    names: tuple[str, ...] = REPORTS,
    on_monitor_exit: Callable[[], None] | None = None,
) -> ReportOutput:
    """Read the window's history once (cached), compute each report, then release the cache.

    ``progress`` is called from this thread and from a monitor thread, which
    calls ``on_monitor_exit`` as it ends (to close what it opened, e.g. a database connection)."""
    from pyspark import StorageLevel

    unknown = [name for name in names if name not in _FUNCTIONS]
    if unknown:
        raise ValueError(f"unknown reports: {', '.join(unknown)}")
    progress = progress or (lambda stage, fraction: None)
    steps = len(names) + 1
    events = read_history(spark, source, window, partitions).persist(StorageLevel.MEMORY_AND_DISK)
    results: dict[str, list[dict[str, Any]]] = {}
    messages = None
    try:
        with StageMonitor(spark, progress, on_exit=on_monitor_exit) as monitor:
            monitor.begin("reading the history", 0.0, 1 / steps)
            count = events.count()
            for index, name in enumerate(names, start=1):
                monitor.begin(name, index / steps, 1 / steps)
                source_name, function = _FUNCTIONS[name]
                if source_name == "messages" and messages is None:
                    messages = per_message(events).persist(StorageLevel.MEMORY_AND_DISK)
                results[name] = function(events if source_name == "events" else messages)
        progress("done", 1.0)
    finally:
        events.unpersist()
        if messages is not None:
            messages.unpersist()
    return ReportOutput(int(count), results)
