"""Ingress benchmark: accepted-and-persisted requests/s through ``POST /ase/<service>/``
versus raw stomp.py persistent SENDs with a receipt, on the same broker, in the same run.

    .venv/bin/python bench/ingress.py [--seconds 20] [--rounds 3] [--no-doc]

ASE: the web tier as scripts/up.sh starts it (uvicorn ``console.asgi:application``,
2 workers), one service unit per round deployed from a jbi.xml with the
sending process stopped (consumes ``mustBeAutomaticallyStarted=false``), so
only posting is measured. Load: ``wrk -t2 -c16`` with ``bench/ingress.lua``,
1 KiB JSON bodies; only 202 answers count; any other answer or socket error
fails the run. Afterwards the queue depth (statistics plugin, through
``StompConnection.queue_stats``) must equal the number of 202s.

Raw: 16 stomp.py ``Connection12(auto_decode=False)`` connections, one thread
each, SEND with ``persistent:true`` + ``receipt``, waiting for each RECEIPT
before the next SEND; same body, same broker, its own queue per round.

Rounds alternate the order (ASE first, then raw first, ...); the reported
figure is the median of the rounds. Goal (issue): ingress >= 0.8 x raw SEND.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import stomp  # noqa: E402

from bench import report  # noqa: E402
from bench.stack import BROKER_PORT, ROOT, WEB_PORT, BenchError, Stack, run  # noqa: E402

GOAL = 0.8
TAIL_SECONDS = 2  # wrk keeps running this long after the POST phase, sending only GET /healthz


def wrk_missing() -> bool:
    """True (and says how to install it) when the load generator is not on this machine."""
    if shutil.which("wrk") is not None:
        return False
    print("wrk is missing: apt-get install -y wrk", file=sys.stderr)
    return True


def make_body(size: int = 1024) -> bytes:
    """A JSON object of exactly ``size`` bytes."""
    head, tail = b'{"bench":"ingress","pad":"', b'"}'
    body = head + b"x" * (size - len(head) - len(tail)) + tail
    json.loads(body)
    assert len(body) == size
    return body


@dataclass
class Result:
    variant: str
    round: int
    accepted: int
    seconds: float
    depth: int | None
    connections: int
    # CPU time (user + system) of the web tier's process group per accepted request, in microseconds
    # (ASE only): it moves much less with the machine's load than the rate does.
    cpu_us: float | None = None

    @property
    def rate(self) -> float:
        return self.accepted / self.seconds

    @property
    def mean_latency_ms(self) -> float:
        # Little's law: connections in flight / throughput (closed loop, no think time).
        return self.connections / self.rate * 1000


def round_rows(
    first: list[Result], second: list[Result], ratio: Callable[[Result, Result], float]
) -> list[list[object]]:
    """A table row per round of two variants measured side by side: rates, ratio, mean latencies, counts = depths."""
    return [
        [
            a.round,
            f"{a.rate:,.0f}",
            f"{b.rate:,.0f}",
            f"{ratio(a, b):.2f}",
            f"{a.mean_latency_ms:.1f} / {b.mean_latency_ms:.1f}",
            f"{a.accepted:,} = {a.depth:,}",
            f"{b.accepted:,} = {b.depth:,}",
        ]
        for a, b in zip(first, second, strict=True)
    ]


def run_wrk(
    service: str,
    body_file: Path,
    seconds: int,
    connections: int,
    threads: int,
    keyed: bool = False,
    port: int = WEB_PORT,
) -> tuple[dict[str, str], str]:
    """Run ``bench/ingress.lua`` against the web tier on ``port``; ``keyed``: every POST carries an
    Idempotency-Key of its own."""
    cmd = [
        "wrk",
        f"-t{threads}",
        f"-c{connections}",
        f"-d{seconds + TAIL_SECONDS}s",
        "--timeout",
        "10s",
        "-s",
        str(ROOT / "bench" / "ingress.lua"),
        f"http://127.0.0.1:{port}",
        "--",
        f"/ase/{service}/",
        str(body_file),
        str(seconds),
        *(["keyed"] if keyed else []),
    ]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + TAIL_SECONDS + 60)
    if result.returncode != 0:
        raise BenchError(f"wrk failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    line = next((ln for ln in result.stdout.splitlines() if ln.startswith("BENCH ")), None)
    if line is None:
        raise BenchError(f"wrk printed no BENCH line:\n{result.stdout}\n{result.stderr}")
    fields = dict(item.split("=", 1) for item in line[len("BENCH ") :].split(" "))
    return fields, " ".join(cmd) + "\n" + result.stdout + result.stderr


def ase_round(
    stack: Stack,
    service: str,
    queue: str,
    body_file: Path,
    seconds: int,
    connections: int,
    threads: int,
    round_no: int,
    check: bool = True,
    keyed: bool = False,
    web: str = "web",
    port: int = WEB_PORT,
) -> Result:
    """One load phase against the web tier ``web`` (listening on ``port``); ``check``: the queue's depth
    must equal the 202s counted (pass False when the queue holds earlier phases' messages too)."""
    cpu_before = stack.cpu_seconds(web)
    fields, output = run_wrk(service, body_file, seconds, connections, threads, keyed, port)
    cpu_us = (stack.cpu_seconds(web) - cpu_before) * 1e6 / max(int(fields["ok"]), 1)
    (stack.log_dir / f"wrk-{service}.txt").write_text(output)
    ok, bad = int(fields["ok"]), int(fields["bad"])
    socket_errors = {k: int(fields[k]) for k in ("connect", "read", "write", "timeout")}
    depth = stack.depth(queue)
    print(
        f"  ASE  round {round_no}: 202s counted by wrk = {ok}, queue '{queue}' depth = {depth}, "
        f"non-202 = {bad}, socket errors = {socket_errors}"
    )
    if bad or any(socket_errors.values()):
        raise BenchError(
            f"ingress answered {bad} non-202 (first: {fields['bad_sample']}) and had socket errors {socket_errors}\n"
            f"--- wrk:\n{output}\n--- last lines of the web log:\n{stack.log_text(web)[-3000:]}"
        )
    if check and depth != ok:
        raise BenchError(f"queue depth {depth} != 202s counted {ok}")
    variant = "ASE ingress, Idempotency-Key" if keyed else "ASE ingress"
    return Result(variant, round_no, ok, float(fields["last_ok"]) - float(fields["start"]), depth, connections, cpu_us)


class _Receipts(stomp.ConnectionListener):
    def __init__(self) -> None:
        self.event = threading.Event()
        self.receipt: str | None = None
        self.error: str | None = None

    def on_receipt(self, frame: stomp.utils.Frame) -> None:
        self.receipt = frame.headers.get("receipt-id")
        self.event.set()

    def on_error(self, frame: stomp.utils.Frame) -> None:
        self.error = frame.headers.get("message") or "ERROR frame"
        self.event.set()

    def on_disconnected(self) -> None:
        self.error = self.error or "disconnected"
        self.event.set()


def raw_round(
    stack: Stack, queue: str, body: bytes, seconds: int, connections: int, round_no: int, check: bool = True
) -> Result:
    destination = f"/queue/{queue}"
    conns: list[tuple[stomp.Connection12, _Receipts]] = []
    counts = [0] * connections
    last = [0.0] * connections
    failures: list[str] = []
    go = threading.Event()
    t0 = [0.0]

    def sender(index: int) -> None:
        conn, listener = conns[index]
        go.wait()
        deadline = t0[0] + seconds
        n = 0
        try:
            while time.monotonic() < deadline:
                receipt = f"raw-{index}-{n}"
                listener.event.clear()
                conn.send(
                    destination,
                    body,
                    headers={"persistent": "true", "receipt": receipt, "content-type": "application/json"},
                )
                if not listener.event.wait(30):
                    raise BenchError(f"no RECEIPT for {receipt} within 30 s")
                if listener.error or listener.receipt != receipt:
                    raise BenchError(f"{receipt}: {listener.error or 'unexpected receipt ' + str(listener.receipt)}")
                n += 1
                counts[index] = n
                last[index] = time.monotonic()
        except Exception as exc:  # noqa: BLE001 - reported below, fails the run
            failures.append(f"{type(exc).__name__}: {exc}")

    try:
        for _ in range(connections):
            conn = stomp.Connection12([("127.0.0.1", BROKER_PORT)], auto_decode=False, heartbeats=(0, 0))
            listener = _Receipts()
            conn.set_listener("receipts", listener)
            conn.connect(wait=True)
            conns.append((conn, listener))
        workers = [threading.Thread(target=sender, args=(i,), daemon=True) for i in range(connections)]
        for worker in workers:
            worker.start()
        t0[0] = time.monotonic()
        go.set()
        for worker in workers:
            worker.join(seconds + 60)
    finally:
        for conn, _ in conns:
            try:
                conn.disconnect()
            except Exception as exc:  # noqa: BLE001 - closing; the counts are already taken
                print(f"  raw: disconnect failed: {exc}", file=sys.stderr)
    if failures:
        raise BenchError(f"raw SEND failed: {failures[0]}")
    total = sum(counts)
    depth = stack.depth(queue)
    print(f"  raw  round {round_no}: receipts counted = {total}, queue '{queue}' depth = {depth}")
    if check and depth != total:
        raise BenchError(f"queue depth {depth} != receipts counted {total}")
    return Result("raw stomp.py SEND", round_no, total, max(last) - t0[0], depth, connections)


def load_arguments(description: str, seconds: int) -> argparse.Namespace:
    """The command line of the wrk-driven ingress benchmarks (this one and bench/ingress_idempotency.py)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument(
        "--seconds", type=int, default=seconds, help=f"load phase of each measurement (default {seconds})"
    )
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds (default 3)")
    parser.add_argument("--warmup", type=int, default=5, help="warm-up seconds per variant (default 5)")
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--threads", type=int, default=2, help="wrk threads (default 2)")
    parser.add_argument("--no-doc", action="store_true", help="do not update docs/BENCHMARKS.md")
    return parser.parse_args()


def main() -> int:
    args = load_arguments(__doc__.split("\n\n")[0], seconds=20)
    if wrk_missing():
        return 2

    info = report.machine()
    body = make_body()
    ase: list[Result] = []
    raw: list[Result] = []
    started = time.monotonic()
    with Stack("ingress") as stack:
        print("== broker (fresh data)")
        print(f"  started in {stack.start_broker():.1f} s")
        print("== database, service units (posting started, sending stopped)")
        stack.migrate()
        names = ["W"] + [str(r) for r in range(1, args.rounds + 1)]
        for name in names:
            print(
                "  "
                + stack.deploy(
                    f"BenchIngress{name}",
                    f"bench_ingress_{name.lower()}",
                    "http://127.0.0.1:9/unused",
                    posting=True,
                    sending=False,
                ).splitlines()[-1]
            )
        body_file = stack.data_dir / "body.json"
        body_file.write_bytes(body)
        for r in range(1, args.rounds + 1):
            print(f"== round {r}/{args.rounds}")
            order = ("ase", "raw") if r % 2 else ("raw", "ase")
            for variant in order:
                # Each measurement on an empty broker: the 40-100,000 messages a measurement leaves in its
                # queue slow every later send down, which favoured whichever variant went first.
                print(f"  broker restarted with empty data in {stack.start_broker():.1f} s")
                if variant == "ase":
                    stack.stop("web")
                    stack.start_web()
                    ase_round(
                        stack,
                        "BenchIngressW",
                        "bench_ingress_w",
                        body_file,
                        args.warmup,
                        args.connections,
                        args.threads,
                        0,
                    )
                    ase.append(
                        ase_round(
                            stack,
                            f"BenchIngress{r}",
                            f"bench_ingress_{r}",
                            body_file,
                            args.seconds,
                            args.connections,
                            args.threads,
                            r,
                        )
                    )
                else:
                    raw_round(stack, "bench_raw_w", body, args.warmup, args.connections, 0)
                    raw.append(raw_round(stack, f"bench_raw_{r}", body, args.seconds, args.connections, r))
        print("== stopping")
    elapsed = time.monotonic() - started
    info["load average at end"] = report.loadavg()

    rows = round_rows(ase, raw, lambda a, b: a.rate / b.rate)
    ase_median = report.median([a.rate for a in ase])
    raw_median = report.median([b.rate for b in raw])
    ratio_median = report.median([a.rate / b.rate for a, b in zip(ase, raw, strict=True)])
    rows.append(
        [
            "median",
            f"{ase_median:,.0f}",
            f"{raw_median:,.0f}",
            f"{ratio_median:.2f}",
            f"{args.connections / ase_median * 1000:.1f} / {args.connections / raw_median * 1000:.1f}",
            "",
            "",
        ]
    )
    headers = [
        "round",
        "ASE ingress req/s (202)",
        "raw SEND msg/s",
        "ratio ASE/raw",
        "mean latency ms ASE / raw",
        "ASE 202s = depth",
        "raw receipts = depth",
    ]
    text_table = report.table(headers, rows)
    verdict = "met" if ratio_median >= GOAL else "NOT met"
    print()
    print(text_table)
    print(
        f"\nmedian ratio ASE/raw = {ratio_median:.2f} (goal >= {GOAL}: {verdict}); "
        f"ratio of medians = {ase_median / raw_median:.2f}; total run time {elapsed:.0f} s"
    )

    if not args.no_doc:
        section = f"""## Ingress: accepted-and-persisted requests/s

Command: `{report.command_line()}` (total run time {elapsed:.0f} s)

Machine and date:
{report.machine_markdown(info)}

What is measured, {args.rounds} rounds of {args.seconds} s each, alternating which variant goes first; before
each measurement the broker is restarted with empty data (and the web tier with it) and the variant warmed up for
{args.warmup} s; {args.connections} concurrent clients, 1 KiB JSON bodies:

- **ASE ingress**: `POST /ase/<service>/` with `Content-Type: application/json` to the web tier started as
  `scripts/up.sh` does (`uvicorn console.asgi:application --workers 2`), one service unit per round deployed
  with `manage.py ase deploy` from a jbi.xml whose consumes section has `mustBeAutomaticallyStarted=false`
  (sending process stopped: only posting is measured; no Celery worker runs). Load generator:
  `wrk -t{args.threads} -c{args.connections} -d{args.seconds + TAIL_SECONDS}s -s bench/ingress.lua`: for
  {args.seconds} s every request is the ingress POST, then for {TAIL_SECONDS} s only `GET /healthz`, so that every
  ingress request started gets its answer and is counted. Only 202 answers count; any other answer or socket error
  fails the run. Rate = 202s / (last 202 - first request). After each round the queue depth read through
  `StompConnection.queue_stats` (statistics plugin) must equal the 202s counted (it did, column "202s = depth").
- **raw stomp.py SEND**: {args.connections} `stomp.Connection12(auto_decode=False)` connections in one Python
  process, one thread each, `SEND` with `persistent:true`, `receipt` and `content-type` headers, waiting for the
  RECEIPT before the next SEND; the same body, the same broker, a queue of its own per round. Rate = receipts /
  elapsed; the queue depth must equal the receipts counted.

Both answer only after the broker's RECEIPT (KahaDB with journal disk syncs on). The raw client waits for one
per SEND. The ingress uses group commit (`ase_engine/stomp_async.py`): each web process has one posting connection
(`ASE_POSTING_CONNECTIONS=1`) carrying one batch at a time; the requests that come while it waits are written
together as BEGIN + SENDs + COMMIT with a receipt, so the broker syncs once per batch. The ingress additionally
runs HTTP parsing, the unit lookup, the message headers (`ase-*`) and the history event. Mean latency is derived
with Little's law ({args.connections} / rate).

{text_table}

**Median ratio ASE/raw = {ratio_median:.2f}** (ratio of the medians {ase_median / raw_median:.2f}).
Goal: ingress >= {GOAL} x raw SEND: **{verdict}**.
"""
        print(f"updated {report.update_section('ingress', section)}")
    return 0


if __name__ == "__main__":
    run(main)
