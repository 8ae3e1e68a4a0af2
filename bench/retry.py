"""Retry benchmark: 100,000 requests waiting in the RETRY area.

    .venv/bin/python bench/retry.py [--messages 100000] [--no-doc]

1. Memory: a Celery worker (sending process) and Celery beat (retry pump every
   second) run for a service unit whose RETRY queue ``<queue>_retry_1`` holds
   N requests that are not due (retry delay one hour). The worker's resident
   memory (RSS of its process group, sampled every 0.5 s) is compared with its
   idle value before the N requests were queued. Goal: within 50 MB.
2. Pump rate: N requests that are due (retry delay 1 s) wait in
   ``<queue>_retry_1`` of a second unit whose sending process is stopped;
   beat and the worker run the pump as in production (runs of at most
   ``ASE_RETRY_PUMP_BUDGET`` = 5 s, one per second, one at a time); the rate is
   N / (time until PENDING holds all N and RETRY none). The pump alone
   (``RetryPump.pump`` in this process, no history store) is measured too,
   on another N. Goal: >= 1,000/s.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import report  # noqa: E402
from bench.stack import Stack, run  # noqa: E402

GOAL_MEMORY_MB = 50
GOAL_RATE = 1000
WAITING = "BenchRetryWaiting"
DUE = "BenchRetryDue"
ALONE = "BenchRetryAlone"


def retry_params(base: int) -> str:
    return (
        "<ase:retry-policy-number>1</ase:retry-policy-number>"
        f"<ase:retry-policy-base-interval>{base}</ase:retry-policy-base-interval>"
        "<ase:retry-policy-factor>1</ase:retry-policy-factor>"
    )


def verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"


def rss_mb(stack: Stack, name: str) -> float:
    """Resident memory of every process in the process group of ``name``, in MB."""
    proc = stack.procs[name]
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = (Path("/proc") / entry / "stat").read_text().rsplit(")", 1)[1].split()
            if int(stat[2]) != proc.pid:
                continue
            for line in (Path("/proc") / entry / "status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total / 1024


def fill(stack: Stack, queue_name: str, service: str, count: int) -> float:
    """Queue ``count`` waiting requests (persistent, receipts pipelined in windows of 500); returns seconds."""
    from ase_engine.broker import queue
    from ase_engine.message import Message, new_id

    conn = stack.stomp("fill")
    started = time.monotonic()
    try:
        headers, body = Message(
            id=new_id(), service=service, payload=b'{"n": 0}' + b" " * 1016, content_type="application/json", attempt=1
        ).to_frame()
        window = []
        for _ in range(count):
            window.append(conn.send(queue(queue_name), {**headers, "ase-id": new_id()}, body))
            if len(window) >= 500:
                for future in window:
                    future.result(60)
                window = []
        for future in window:
            future.result(60)
    finally:
        conn.disconnect()
    return time.monotonic() - started


def start_beat(stack: Stack, name: str) -> None:
    """Celery beat as scripts/up.sh starts it, with a schedule file of its own."""
    schedule = str(stack.data_dir / f"{name}-schedule")
    stack.spawn(
        name, [sys.executable, "-m", "celery", "-A", "console", "beat", "--loglevel", "INFO", "--schedule", schedule]
    )


def sample(stack: Stack, name: str, seconds: float) -> list[float]:
    values = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        values.append(rss_mb(stack, name))
        time.sleep(0.5)
    return values


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--no-doc", action="store_true")
    args = parser.parse_args()
    n = args.messages
    info = report.machine()
    began = time.monotonic()
    with Stack("retry") as stack:
        stack.start_broker()
        stack.migrate()
        target = stack.start_target()
        stack.deploy(WAITING, "bench_retry_waiting", target + "/waiting", extra=retry_params(3600))
        stack.deploy(DUE, "bench_retry_due", target + "/due", sending=False, extra=retry_params(1))
        stack.start_worker()
        start_beat(stack, "beat")
        time.sleep(10)
        idle = sample(stack, "worker", 10)
        fill_seconds = fill(stack, "bench_retry_waiting_retry_1", WAITING, n)
        assert stack.depth("bench_retry_waiting_retry_1") == n
        loaded = sample(stack, "worker", 30)
        assert stack.depth("bench_retry_waiting_retry_1") == n, "a waiting request was moved"
        idle_mb, loaded_mb = max(idle), max(loaded)
        print(f"worker RSS idle max {idle_mb:.1f} MB, with {n} waiting max {loaded_mb:.1f} MB")

        # Pump rate through beat and the worker.
        stack.stop("beat")
        fill(stack, "bench_retry_due_retry_1", DUE, n)
        time.sleep(1.5)
        started = time.monotonic()
        start_beat(stack, "beat2")
        deadline = started + 900
        while time.monotonic() < deadline and stack.depth("bench_retry_due_retry_1"):
            time.sleep(0.5)
        beat_seconds = time.monotonic() - started
        moved = stack.depth("bench_retry_due")
        assert moved == n and stack.depth("bench_retry_due_retry_1") == 0, (moved, n)
        beat_rate = n / beat_seconds
        stack.stop("beat2")
        print(f"beat-driven pump: {n} in {beat_seconds:.1f} s = {beat_rate:,.0f}/s (includes beat start-up)")

        # The pump alone, in this process.
        from ase_engine.config import RetryPolicy, ServiceUnitConfig
        from ase_engine.history import LogSink
        from ase_engine.retry import RetryPump

        unit = ServiceUnitConfig(
            name=ALONE, service=ALONE, target_url=target, is_idempotent=True, retry=RetryPolicy(1, 1, 1)
        )
        fill(stack, unit.areas.retry(1), ALONE, n)
        time.sleep(1.5)
        pump = RetryPump(stack.component(), LogSink())
        started = time.monotonic()
        moved_alone = 0
        while moved_alone < n and time.monotonic() - started < 600:
            moved_alone += pump.pump([unit], budget=60).retried
        alone_seconds = time.monotonic() - started
        alone_rate = moved_alone / alone_seconds
        print(f"pump alone: {moved_alone} in {alone_seconds:.1f} s = {alone_rate:,.0f}/s")

    growth = loaded_mb - idle_mb
    rows = [
        ["worker RSS, idle (max of 20 samples)", f"{idle_mb:.1f} MB", ""],
        [
            f"worker RSS, {n:,} waiting in RETRY (max of 60 samples over 30 s)",
            f"{loaded_mb:.1f} MB",
            f"growth {growth:+.1f} MB (goal <= {GOAL_MEMORY_MB} MB): {verdict(growth <= GOAL_MEMORY_MB)}",
        ],
        [
            f"beat-driven pump, {n:,} due requests",
            f"{beat_rate:,.0f} /s ({beat_seconds:.1f} s)",
            f"goal >= {GOAL_RATE:,}/s: {'met' if beat_rate >= GOAL_RATE else 'NOT met'}",
        ],
        [
            f"RetryPump.pump alone, {n:,} due requests",
            f"{alone_rate:,.0f} /s ({alone_seconds:.1f} s)",
            f"goal >= {GOAL_RATE:,}/s: {'met' if alone_rate >= GOAL_RATE else 'NOT met'}",
        ],
        [f"queueing {n:,} persistent requests (pipelined receipts, for scale)", f"{n / fill_seconds:,.0f} /s", ""],
    ]
    section = f"""## Retry: memory with 100,000 waiting, pump rate

Command: `{report.command_line()}` (total run time {time.monotonic() - began:.0f} s)

Machine and date:
{report.machine_markdown(info)}

What is measured: a Celery worker (sending process) and Celery beat started as `scripts/up.sh` does. (1) The
worker's RSS (process group, sampled every 0.5 s) idle, then while {n:,} requests that are not due (retry delay 1 h)
wait in `bench_retry_waiting_retry_1` and the pump runs every second: nothing is loaded into the worker because
the pump's `JMSTimestamp` selector matches none of them. (2) {n:,} due requests in `bench_retry_due_retry_1`
(sending stopped, so they accumulate in PENDING): beat is started and the time until the RETRY queue is empty is
measured (pump runs of at most 5 s, one per second, moves in transactions of 200 with up to 3 commits pipelined,
history recorded in SQLite).
(3) The same with `RetryPump.pump` called in a loop in the benchmark process (history only logged), run last,
while the broker already holds the 200,000 requests of (1) and (2) beyond its memory limits (so it pages from disk).

{report.table(["measure", "value", "goal"], rows)}
"""
    print(section)
    if not args.no_doc:
        print(f"updated {report.update_section('retry', section)}")
    return 0


if __name__ == "__main__":
    run(main)
