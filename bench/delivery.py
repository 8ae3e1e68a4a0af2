"""Delivery benchmark: end-to-end delivered messages/s from a preloaded queue to a fast HTTP target.

    .venv/bin/python bench/delivery.py [--messages 5000] [--rounds 3] [--no-doc]

Same target (bench/target_app.py under uvicorn, answers 200 and timestamps each
distinct message), same 1 KiB JSON bodies, same machine, same run. Each
variant first gets its N messages queued, then its consumer process is
started; the rate is (N - 1) / (time of the N-th distinct delivery - time
of the first delivery), both taken at the target.

- ASE: N ASE messages (``ase_engine.message.Message.to_frame``, persistent,
  with receipts) in the PENDING queue of a service unit deployed from a
  jbi.xml with its sending process started; then a Celery worker started
  exactly as scripts/up.sh does (``celery -A console worker --pool threads
  --concurrency 4``), whose sending process (``ASE_SENDING_CONCURRENCY``,
  default 8: prefetch 16, 8 threads) delivers them.
- raw stomp.py loop (bench/raw_consumer.py, its own process): N persistent
  messages in another queue; one connection, ``client-individual`` ack,
  prefetch 16, 8 threads: MESSAGE -> urllib3 POST -> ACK.
- plain Celery task (bench/plain_celery.py): N ``deliver.delay(...)`` on Redis
  db 13, then ``celery -A bench.plain_celery worker --pool threads
  --concurrency 8``; ``acks_late=True``, ``autoretry_for`` transport errors and 4xx/5xx.

Goals (issue): ASE >= 0.7 x raw loop and >= 1.5 x plain Celery task.
"""

from __future__ import annotations

import argparse
import sys
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import report  # noqa: E402
from bench.stack import BROKER_PORT, PY, REDIS_URL, TARGET_PORT, BenchError, Stack, http_get_json, http_post, run  # noqa: E402

GOAL_RAW = 0.7
GOAL_CELERY = 1.5
SERVICE = "BenchDelivery"
ASE_QUEUE = "bench_delivery"
RAW_QUEUE = "bench_raw_delivery"
BASE = f"http://127.0.0.1:{TARGET_PORT}"
VARIANTS = {"ase": "ASE (Celery worker + sending process)", "raw": "raw stomp.py loop", "celery": "plain Celery task"}
PATHS = {"ase": "/ase", "raw": "/raw", "celery": "/celery"}


def make_body(seq: int, size: int = 1024) -> bytes:
    """A JSON object of exactly ``size`` bytes."""
    head, tail = f'{{"bench":"delivery","seq":{seq},"pad":"'.encode(), b'"}'
    body = head + b"x" * (size - len(head) - len(tail)) + tail
    assert len(body) == size
    return body


@dataclass
class Result:
    variant: str
    round: int
    n: int
    seconds: float
    received: int
    distinct: int
    cpu_ms_per_msg: float
    depth_after: int | None

    @property
    def rate(self) -> float:
        return (self.n - 1) / self.seconds


def preload(stack: Stack, queue_name: str, n: int, ase: bool, window: int = 200) -> float:
    """Put ``n`` persistent messages in ``queue_name`` (pipelined SENDs, each with a receipt)."""
    from ase_engine.broker import queue, wait
    from ase_engine.message import Message, new_id

    conn = stack.stomp("preload")
    started = time.monotonic()
    try:
        futures = []
        for seq in range(n):
            body = make_body(seq)
            if ase:
                headers, payload = Message(
                    id=new_id(), service=SERVICE, payload=body, content_type="application/json"
                ).to_frame()
            else:
                headers = {"persistent": "true", "content-type": "application/json", "bench-id": f"raw-{seq}"}
                payload = body
            futures.append(conn.send(queue(queue_name), headers, payload))
            if len(futures) >= window:
                for future in futures:
                    wait(future, 30)
                futures.clear()
        for future in futures:
            wait(future, 30)
    finally:
        conn.disconnect()
    return time.monotonic() - started


def enqueue_celery(n: int) -> float:
    """Empty the task queue, then ``deliver.delay(...)`` n times."""
    from bench.plain_celery import QUEUE, app, deliver

    with app.connection_for_write() as connection:
        connection.default_channel.client.delete(QUEUE, "unacked", "unacked_index")
    started = time.monotonic()
    for seq in range(n):
        deliver.delay(f"celery-{seq}", make_body(seq).decode())
    return time.monotonic() - started


def stats(path: str, n: int) -> dict[str, float | int | None]:
    query = urllib.parse.urlencode({"path": path, "n": n})
    return http_get_json(f"{BASE}/_stats?{query}")  # type: ignore[no-any-return]


def wait_delivered(stack: Stack, proc_name: str, path: str, n: int, timeout: float) -> tuple[dict, float]:
    """Poll the target until the n-th distinct message arrived; returns its stats and consumer CPU ms/message."""
    deadline = time.monotonic() + timeout
    first: tuple[float, int] | None = None
    while time.monotonic() < deadline:
        current = stats(path, n)
        count = int(current["distinct"] or 0)
        if first is None and count > 0:
            first = (stack.cpu_seconds(proc_name), count)
        if count >= n:
            cpu = stack.cpu_seconds(proc_name)
            done = max(1, count - first[1]) if first else count
            cpu_ms = (cpu - first[0]) * 1000 / done if first and count > first[1] else float("nan")
            return current, cpu_ms
        if proc_name in stack.procs and stack.procs[proc_name].poll() is not None and count < n:
            raise BenchError(
                f"{proc_name} exited after {count} of {n} deliveries:\n{stack.log_text(proc_name)[-3000:]}"
            )
        time.sleep(0.1)
    raise BenchError(f"only {stats(path, n)['distinct']} of {n} delivered within {timeout:g}s")


def depth_settled(stack: Stack, queue_name: str, timeout: float = 10.0) -> int | None:
    deadline = time.monotonic() + timeout
    depth = stack.depth(queue_name)
    while depth and time.monotonic() < deadline:
        time.sleep(0.5)
        depth = stack.depth(queue_name)
    return depth


def run_ase(stack: Stack, n: int, round_no: int, timeout: float) -> Result:
    http_post(f"{BASE}/_reset")
    took = preload(stack, ASE_QUEUE, n, ase=True)
    depth = stack.depth(ASE_QUEUE)
    print(f"  ASE    round {round_no}: preloaded {n} in {took:.1f} s (queue depth {depth}); starting the worker")
    if depth != n:
        raise BenchError(f"queue {ASE_QUEUE} holds {depth} messages, expected {n}")
    stack.start_worker(name="ase-worker", node=f"ase-bench-{round_no}", wait=False)
    try:
        current, cpu_ms = wait_delivered(stack, "ase-worker", PATHS["ase"], n, timeout)
    finally:
        stack.stop("ase-worker")
    return _result("ase", round_no, n, current, cpu_ms, depth_settled(stack, ASE_QUEUE))


def run_raw(stack: Stack, n: int, round_no: int, timeout: float) -> Result:
    http_post(f"{BASE}/_reset")
    took = preload(stack, RAW_QUEUE, n, ase=False)
    depth = stack.depth(RAW_QUEUE)
    print(f"  raw    round {round_no}: preloaded {n} in {took:.1f} s (queue depth {depth}); starting the consumer")
    if depth != n:
        raise BenchError(f"queue {RAW_QUEUE} holds {depth} messages, expected {n}")
    cmd = [
        PY,
        str(Path(__file__).with_name("raw_consumer.py")),
        "--port",
        str(BROKER_PORT),
        "--queue",
        RAW_QUEUE,
        "--url",
        f"{BASE}{PATHS['raw']}",
        "--expect",
        str(n),
        "--prefetch",
        "16",
        "--threads",
        "8",
        "--timeout",
        str(timeout),
    ]
    stack.spawn("raw-consumer", cmd)
    try:
        current, cpu_ms = wait_delivered(stack, "raw-consumer", PATHS["raw"], n, timeout)
        stack.procs["raw-consumer"].wait(30)
    finally:
        stack.stop("raw-consumer")
    return _result("raw", round_no, n, current, cpu_ms, depth_settled(stack, RAW_QUEUE))


def run_celery(stack: Stack, n: int, round_no: int, timeout: float) -> Result:
    http_post(f"{BASE}/_reset")
    took = enqueue_celery(n)
    print(f"  celery round {round_no}: enqueued {n} tasks in {took:.1f} s; starting the worker")
    env = {**stack.env, "BENCH_CELERY_BROKER": REDIS_URL, "BENCH_TARGET_URL": f"{BASE}{PATHS['celery']}"}
    stack.spawn(
        "celery-worker",
        [
            PY,
            "-m",
            "celery",
            "-A",
            "bench.plain_celery",
            "worker",
            "--pool",
            "threads",
            "--concurrency",
            "8",
            "-n",
            f"plain-{round_no}@%h",
            "--loglevel",
            "WARNING",
        ],
        env=env,
    )
    try:
        current, cpu_ms = wait_delivered(stack, "celery-worker", PATHS["celery"], n, timeout)
    finally:
        stack.stop("celery-worker")
    from bench.plain_celery import app

    with app.connection_for_write() as connection:
        left = connection.default_channel.client.llen("bench_plain")
    return _result("celery", round_no, n, current, cpu_ms, int(left))


def _result(variant: str, round_no: int, n: int, current: dict, cpu_ms: float, depth_after: int | None) -> Result:
    seconds = float(current["nth"]) - float(current["first"])  # type: ignore[arg-type]
    result = Result(variant, round_no, n, seconds, int(current["count"]), int(current["distinct"]), cpu_ms, depth_after)
    print(
        f"         -> {result.rate:,.0f} msg/s ({n} in {seconds:.2f} s), received {result.received} "
        f"({result.received - result.distinct} duplicates), consumer CPU {cpu_ms:.2f} ms/msg, "
        f"left in queue afterwards: {depth_after}"
    )
    if result.distinct < n:
        raise BenchError(f"{variant}: only {result.distinct} distinct messages of {n}")
    if depth_after:
        raise BenchError(f"{variant}: {depth_after} messages still queued after all {n} were delivered")
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=5000, help="N messages per measurement (default 5000)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, each runs every variant (default 3)")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds allowed per delivery phase")
    parser.add_argument("--no-doc", action="store_true", help="do not update docs/BENCHMARKS.md")
    args = parser.parse_args()
    n = args.messages

    info = report.machine()
    results: dict[str, list[Result]] = {v: [] for v in VARIANTS}
    runners = {"ase": run_ase, "raw": run_raw, "celery": run_celery}
    started = time.monotonic()
    with Stack("delivery") as stack:
        print("== broker (fresh data), Redis db 13, target")
        print(f"  broker started in {stack.start_broker():.1f} s")
        import redis

        redis.Redis.from_url(REDIS_URL).flushdb()
        stack.start_target()
        print("== database, service unit (sending started)")
        stack.migrate()
        print(
            "  "
            + stack.deploy(SERVICE, ASE_QUEUE, f"{BASE}{PATHS['ase']}", posting=True, sending=True).splitlines()[-1]
        )
        conn = stack.stomp("create")
        conn.ensure_queues([RAW_QUEUE])
        conn.disconnect()
        order = list(VARIANTS)
        for r in range(1, args.rounds + 1):
            print(f"== round {r}/{args.rounds}")
            for variant in order:
                results[variant].append(runners[variant](stack, n, r, args.timeout))
            order = order[1:] + order[:1]  # rotate who goes first
        print("== stopping")
    elapsed = time.monotonic() - started
    info["load average at end"] = report.loadavg()

    med = {v: report.median([x.rate for x in results[v]]) for v in VARIANTS}
    cpu_med = {v: report.median([x.cpu_ms_per_msg for x in results[v]]) for v in VARIANTS}
    cpu_line = (
        f"Consumer CPU per message (median): ASE {cpu_med['ase']:.2f} ms, raw loop {cpu_med['raw']:.2f} ms, "
        f"plain Celery {cpu_med['celery']:.2f} ms; raw/ASE = {cpu_med['raw'] / cpu_med['ase']:.2f}, "
        f"Celery/ASE = {cpu_med['celery'] / cpu_med['ase']:.2f} "
        "(the throughput ratios to expect when the consumer process is the bottleneck; they usually vary less with "
        "the machine's load than the rates)."
    )
    rows = []
    for v, label in VARIANTS.items():
        rounds = " / ".join(f"{x.rate:,.0f}" for x in results[v])
        cpu = report.median([x.cpu_ms_per_msg for x in results[v]])
        dups = sum(x.received - x.distinct for x in results[v])
        rows.append([label, f"{med[v]:,.0f}", rounds, f"{cpu:.2f}", dups, f"{med['ase'] / med[v]:.2f}"])
    headers = ["variant", "median delivered/s", "per round", "consumer CPU ms/msg", "duplicates", "ASE / variant"]
    text_table = report.table(headers, rows)
    ratio_raw = med["ase"] / med["raw"]
    ratio_celery = med["ase"] / med["celery"]
    round_ratios_raw = [a.rate / b.rate for a, b in zip(results["ase"], results["raw"], strict=True)]
    round_ratios_celery = [a.rate / b.rate for a, b in zip(results["ase"], results["celery"], strict=True)]
    verdict_raw = "met" if ratio_raw >= GOAL_RAW else "NOT met"
    verdict_celery = "met" if ratio_celery >= GOAL_CELERY else "NOT met"
    print()
    print(text_table)
    print(
        f"\nASE / raw loop = {ratio_raw:.2f} (goal >= {GOAL_RAW}: {verdict_raw}; per round "
        f"{', '.join(f'{x:.2f}' for x in round_ratios_raw)})"
    )
    print(
        f"ASE / plain Celery = {ratio_celery:.2f} (goal >= {GOAL_CELERY}: {verdict_celery}; per round "
        f"{', '.join(f'{x:.2f}' for x in round_ratios_celery)})"
    )
    print(cpu_line)
    print(f"total run time {elapsed:.0f} s")

    if not args.no_doc:
        section = f"""## Delivery: end-to-end delivered messages/s

Command: `{report.command_line()}` (total run time {elapsed:.0f} s)

Machine and date:
{report.machine_markdown(info)}

What is measured: N = {n:,} messages of 1 KiB (JSON) per variant and round, {args.rounds} rounds, the variant that
goes first rotating each round. For each variant the N messages are queued first, then its consumer process is
started; the rate is (N - 1) / (time of the N-th distinct delivery - time of the first delivery), both taken by the
target, so process start-up is not counted. Target: `bench/target_app.py` under uvicorn (one process, a bare ASGI
app answering 200 `{{"ok":true}}` to every POST and recording arrival time and message id), the same for all.

- **ASE**: the N messages are `ase_engine.message.Message(...).to_frame()` frames sent (persistent, with receipts)
  to the PENDING queue `{ASE_QUEUE}` of a service unit deployed with `manage.py ase deploy` (sending process
  started, `target-url` = the target). Then a Celery worker is started as `scripts/up.sh` does
  (`celery -A console worker --pool threads --concurrency 4 --loglevel INFO`); its sending process
  (`ASE_SENDING_CONCURRENCY` = 8: one subscription with prefetch 16, 8 threads) invokes the target and ACKs each
  message, recording the history events (attempt, acked) in SQLite.
- **raw stomp.py loop** (`bench/raw_consumer.py`, its own process): N persistent messages in queue
  `{RAW_QUEUE}`; one `Connection12(auto_decode=False)`, `ack:client-individual`,
  `activemq.prefetchSize:16` (as ASE), 8 threads: MESSAGE -> urllib3 POST (shared pool, the client ASE uses)
  -> ACK. No history, no classification beyond 2xx.
- **plain Celery task** (`bench/plain_celery.py`): N `deliver.delay(id, body)` on Redis db 13 (queue
  `bench_plain`, JSON, no result backend), then `celery -A bench.plain_celery worker --pool threads
  --concurrency 8 --loglevel WARNING`; the task posts the body with a shared urllib3 pool (the client ASE
  uses), `acks_late=True`, `autoretry_for` urllib3 errors and 4xx/5xx answers. Redis runs as the machine's default
  (no AOF fsync), so this baseline does not pay a disk sync per message.

"consumer CPU ms/msg" is the CPU time (user + system) of the consumer's process group between the first and the
N-th delivery, divided by the messages delivered in between. After each measurement the variant's queue must be
empty (checked) and every message must have arrived (counted by distinct id at the target).

{text_table}

**ASE / raw loop = {ratio_raw:.2f}** (goal >= {GOAL_RAW}: **{verdict_raw}**; per round
{", ".join(f"{x:.2f}" for x in round_ratios_raw)}).
**ASE / plain Celery = {ratio_celery:.2f}** (goal >= {GOAL_CELERY}: **{verdict_celery}**; per round
{", ".join(f"{x:.2f}" for x in round_ratios_celery)}).

{cpu_line}
"""
        print(f"updated {report.update_section('delivery', section)}")
    return 0


if __name__ == "__main__":
    run(main)
