"""History reports benchmark: 1,000,000 and 10,000,000 events, the full Spark report on local[2].

    flock /tmp/ase-bench.lock .venv/bin/python bench/history_reports.py [--sizes 1000000,10000000] [--no-doc]

1. The history store is PostgreSQL (database ``ase_bench_history`` on
   127.0.0.1:5432, created and migrated if missing, its event table emptied
   first). Events are generated (a fixed seed; a realistic mix per message:
   delivered, retried then delivered, faulted, errored after retries, timed out,
   expired; parked messages purged or recycled hours later; 20 services; one
   day) and stored by the project's own bulk path, ``console.history_store.bulk_load``
   (COPY), up to the first size; the report runs; then events are added up to
   the next size (same day, new messages) and the report runs again.
2. The report is ``console.spark_reports.run_reports`` with every report, the
   whole day, every service, on ``local[2]``, reading the table over JDBC in
   ``--partitions`` id ranges, as ``manage.py ase_report`` does. The Spark session
   is started (and warmed up by one report on an empty window) before the timings.
Goals: 10M in <= 120 s; 10M time <= 12 x 1M time.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DATABASE = "ase_bench_history"
os.environ["DATABASE_URL"] = f"postgres://postgres@127.0.0.1:5432/{DATABASE}"
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
os.environ.setdefault("ASE_LOG_LEVEL", "WARNING")

from bench import report  # noqa: E402

GOAL_10M_SECONDS = 120.0
GOAL_RATIO = 12.0
DAY = datetime(2026, 1, 1, tzinfo=UTC)
SERVICES = [f"BenchSvc{i:02d}" for i in range(20)]
STEPS = ("reading the history", "outcomes", "latency", "attempts", "retries", "reasons", "parking")


def ensure_database() -> None:
    import psycopg

    with psycopg.connect("host=127.0.0.1 port=5432 user=postgres dbname=postgres", autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [DATABASE]).fetchone():
            conn.execute(f'CREATE DATABASE "{DATABASE}"')


def events(count: int, prefix: str, seed: int) -> Iterator[object]:
    """Exactly ``count`` history events of messages spread over one day (lazily)."""
    from ase_engine.history import Event
    from ase_engine.history import EventKind as K

    rng = random.Random(seed)
    start_ms = int(DAY.timestamp() * 1000)
    day_ms = 86_400_000
    produced = 0
    number = 0
    while True:
        number += 1
        mid = f"{prefix}{number:024x}"
        service = SERVICES[number % len(SERVICES)]
        t = start_ms + rng.randrange(day_ms - 3_600_000)
        lat = int(rng.lognormvariate(4.5, 0.8)) + 1  # ~90 ms median
        r = rng.random()
        batch = [Event(mid, service, K.POSTED, area=service, size=512, at_ms=t)]
        if r < 0.85:
            batch += [
                Event(
                    mid, service, K.ATTEMPT, area=service, attempt=1, target_status=200, duration_ms=lat, at_ms=t + lat
                ),  # fmt: skip
                Event(mid, service, K.ACKED, area=service, attempt=1, target_status=200, at_ms=t + lat + 1),
            ]
        elif r < 0.90:
            batch += [
                Event(mid, service, K.ATTEMPT, area=service, attempt=1, target_status=503, at_ms=t + lat),
                Event(
                    mid,
                    service,
                    K.RETRY_SCHEDULED,
                    area=f"{service}_retry_1",
                    attempt=1,
                    target_status=503,
                    detail="error: HTTP 503: Service Unavailable",
                    at_ms=t + lat,
                ),  # fmt: skip
                Event(mid, service, K.RETRIED, area=service, attempt=1, at_ms=t + 10_000),
                Event(mid, service, K.ATTEMPT, area=service, attempt=2, target_status=200, at_ms=t + 10_000 + lat),
                Event(mid, service, K.ACKED, area=service, attempt=2, target_status=200, at_ms=t + 10_001 + lat),
            ]
        elif r < 0.94:
            parked_at = t + lat
            reason = "no such product" if rng.random() < 0.7 else "invalid order"
            batch += [
                Event(mid, service, K.ATTEMPT, area=service, attempt=1, target_status=422, at_ms=parked_at),
                Event(
                    mid,
                    service,
                    K.FAULT,
                    area=f"{service}_fault",
                    attempt=1,
                    target_status=422,
                    detail=reason,
                    at_ms=parked_at,
                ),  # fmt: skip
                Event(
                    mid, service, K.PARKED, area=f"{service}_fault", attempt=1, target_status=422, at_ms=parked_at
                ),  # fmt: skip
            ]
            exit_kind = K.PURGED if rng.random() < 0.7 else K.RECYCLED
            batch.append(
                Event(mid, service, exit_kind, area=f"{service}_fault", at_ms=parked_at + rng.randrange(3_600_000))
            )
        elif r < 0.97:
            batch += [
                Event(mid, service, K.ATTEMPT, area=service, attempt=1, target_status=500, at_ms=t + lat),
                Event(
                    mid,
                    service,
                    K.RETRY_SCHEDULED,
                    area=f"{service}_retry_1",
                    attempt=1,
                    target_status=500,
                    detail="error: HTTP 500: Internal Server Error",
                    at_ms=t + lat,
                ),  # fmt: skip
                Event(mid, service, K.RETRIED, area=service, attempt=1, at_ms=t + 10_000),
                Event(mid, service, K.ATTEMPT, area=service, attempt=2, target_status=500, at_ms=t + 10_000 + lat),
                Event(
                    mid,
                    service,
                    K.ERROR,
                    area=f"{service}_error",
                    attempt=2,
                    target_status=500,
                    outcome_code="SE-ASE-E0020",
                    detail="HTTP 500: Internal Server Error",
                    at_ms=t + 10_000 + lat,
                ),  # fmt: skip
                Event(
                    mid,
                    service,
                    K.PARKED,
                    area=f"{service}_error",
                    attempt=2,
                    target_status=500,
                    outcome_code="SE-ASE-E0020",
                    at_ms=t + 10_000 + lat,
                ),  # fmt: skip
            ]
        elif r < 0.99:
            batch += [
                Event(mid, service, K.ATTEMPT, area=service, attempt=1, duration_ms=30_000, at_ms=t + 30_000),
                Event(
                    mid,
                    service,
                    K.TIMEOUT,
                    area=f"{service}_timedout",
                    attempt=1,
                    outcome_code="SE-ASE-E0017",
                    detail="no answer within 30000 ms",
                    at_ms=t + 30_000,
                ),  # fmt: skip
                Event(
                    mid,
                    service,
                    K.PARKED,
                    area=f"{service}_timedout",
                    attempt=1,
                    outcome_code="SE-ASE-E0017",
                    at_ms=t + 30_000,
                ),  # fmt: skip
            ]
        else:
            batch += [
                Event(
                    mid, service, K.EXPIRED, area=f"{service}_expired", outcome_code="SE-ASE-W0011", at_ms=t + 600_000
                ),  # fmt: skip
                Event(
                    mid, service, K.PARKED, area=f"{service}_expired", outcome_code="SE-ASE-W0011", at_ms=t + 600_000
                ),  # fmt: skip
                Event(mid, service, K.PURGED, area=f"{service}_expired", at_ms=t + 600_000 + rng.randrange(1_800_000)),
            ]
        for event in batch:
            yield event
            produced += 1
            if produced >= count:
                return


class StepClock:
    """Prints how long each step of the report took (from the progress callback)."""

    def __init__(self) -> None:
        self.step = ""
        self.since = time.monotonic()
        self.seconds: dict[str, float] = {}

    def tick(self, stage: str, fraction: float) -> None:
        step = stage.split(":", 1)[0]
        if step != self.step:
            now = time.monotonic()
            if self.step:
                self.seconds[self.step] = now - self.since
                print(f"  {self.step}: {now - self.since:.1f} s", flush=True)
            self.step, self.since = step, now


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000000,10000000", help="cumulative event counts, ascending")
    parser.add_argument("--partitions", type=int, default=8, help="parallel JDBC reads")
    parser.add_argument("--driver-memory", default="6g")
    parser.add_argument("--chunk", type=int, default=200_000, help="events per COPY transaction")
    parser.add_argument("--no-doc", action="store_true", help="do not rewrite docs/BENCHMARKS.md")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    if sizes != sorted(sizes) or sizes[0] < 1 or sizes[-1] > 20_000_000:
        parser.error("--sizes: ascending counts between 1 and 20,000,000")

    machine = report.machine()
    ensure_database()
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    from console.history_store import bulk_load
    from console.models import MessageEvent
    from console.reports import history_source
    from console.spark_reports import SparkSettings, Window, run_reports, spark_session

    call_command("migrate", verbosity=0)
    table = MessageEvent._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {table} RESTART IDENTITY")

    t0 = time.monotonic()
    spark = spark_session(
        SparkSettings(
            master="local[2]",
            jars=("/usr/share/java/postgresql.jar", "/usr/share/java/sqlite-jdbc.jar"),
            driver_memory=args.driver_memory,
            partitions=args.partitions,
        )
    )
    source = history_source()
    whole_day = Window(DAY, DAY + timedelta(days=1))
    run_reports(spark, source, Window(DAY - timedelta(days=2), DAY - timedelta(days=1)), partitions=args.partitions)
    session_s = time.monotonic() - t0
    print(f"Spark session started and warmed up in {session_s:.1f} s", flush=True)

    rows: list[list[object]] = []
    steps: list[list[object]] = []
    loaded = 0
    timings: dict[int, float] = {}
    for index, size in enumerate(sizes):
        t = time.monotonic()
        added = bulk_load(events(size - loaded, prefix=f"{index:02x}", seed=index), chunk=args.chunk)
        with connection.cursor() as cursor:
            cursor.execute(f"ANALYZE {table}")
        load_s = time.monotonic() - t
        loaded += added
        table_mb = 0.0
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_total_relation_size(%s)", [table])
            table_mb = cursor.fetchone()[0] / 1e6
        print(f"{loaded:,} events stored ({added:,} in {load_s:.1f} s, {added / load_s:,.0f}/s)", flush=True)

        t = time.monotonic()
        clock = StepClock()
        output = run_reports(spark, source, whole_day, partitions=args.partitions, progress=clock.tick)
        report_s = time.monotonic() - t
        if output.events != loaded:
            raise SystemExit(f"the report read {output.events:,} events, {loaded:,} are stored")
        timings[size] = report_s
        sizes_text = ", ".join(f"{k} {len(v)}" for k, v in output.results.items())
        print(f"report over {loaded:,} events: {report_s:.1f} s ({sizes_text} rows)", flush=True)
        rows.append([f"{loaded:,}", f"{added:,}", round(load_s, 1), round(added / load_s), round(table_mb),
                     round(report_s, 1), round(loaded / report_s)])  # fmt: skip
        steps.append([f"{loaded:,}", *(round(clock.seconds.get(name, 0.0), 1) for name in STEPS)])

    lines = [
        "## History reports (Spark, local[2])",
        "",
        f"Command: `flock /tmp/ase-bench.lock {report.command_line()}`",
        "",
        report.machine_markdown({**machine, "load average at end": report.loadavg()}),
        f"- PySpark {report._version('pyspark')}, JDBC {source.url} ({args.partitions} partitions), "
        f"driver memory {args.driver_memory}",
        f"- Spark session start + warm-up report (not in the times below): {session_s:.1f} s",
        "",
        report.table(
            ["events stored", "added", "load s", "load events/s", "table+indexes MB", "report s", "events/s read"],
            rows,
        ),
        "",
        "Seconds per step of the report (reading = the partitioned JDBC read into Spark's cache; latency includes",
        "the one aggregation per message that attempts and retries reuse):",
        "",
        report.table(["events", *STEPS], steps),
        "",
    ]
    verdicts = []
    big = max(sizes)
    if big >= 10_000_000 and big in timings:
        verdicts.append(f"- {big:,} events in {timings[big]:.1f} s (goal <= {GOAL_10M_SECONDS:.0f} s): "
                        f"{'met' if timings[big] <= GOAL_10M_SECONDS else 'NOT met'}")  # fmt: skip
    if 1_000_000 in timings and 10_000_000 in timings:
        ratio = timings[10_000_000] / timings[1_000_000]
        met = "met" if ratio <= GOAL_RATIO else "NOT met"
        verdicts.append(f"- 10M time / 1M time = {ratio:.2f} (goal <= {GOAL_RATIO:.0f}): {met}")
    lines += verdicts or ["- goals not evaluated: the sizes measured do not include 1M and 10M"]
    text = "\n".join(lines)
    print(text)
    if not args.no_doc:
        print(f"written to {report.update_section('history-reports', text)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
