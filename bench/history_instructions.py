"""What recording the message history costs the ingress and the sending process, counted in CPU
instructions rather than timed: the web tier, or the Celery worker, under valgrind's callgrind, history
on (as deployed) and off (``ASE_HISTORY_ENABLED=false``).

    flock /tmp/ase-bench.lock .venv/bin/python bench/history_instructions.py [--path ingress|delivery]
        [--count 1000] [--repeats 2] [--postgresql postgres://postgres@127.0.0.1:5432/ase_bench]

Why: on this 2-core virtual machine the rates of bench/history_overhead.py move by more than history
costs, both ways (its calibration run). An instruction count of the same work does not depend on the
machine's load, so it says what recording adds to each request or message.

How: the process runs under ``valgrind --tool=callgrind --trace-children=yes --instr-atstart=no``, so
the history writer process it starts on SQLite is counted too. Ingress: the web tier's command
(uvicorn ``console.asgi:application``, one worker); delivery: the Celery worker's (scripts/up.sh's
command line) with the bench target (bench/target_app.py) as the service. After start-up and a
warm-up (connections opened, the recorder and its writer started, one flush), ``callgrind_control -i
on`` starts the count; C requests are posted (1 KiB JSON, 8 keep-alive connections, every answer
must be 202) or C messages put in the service's queue and delivered (the target must see each); the
count goes on for one more flush interval so that their history events are written while counting;
then ``callgrind_control -d`` dumps it. The flush interval is 20 s instead of the deployed 1 s: under
callgrind the process runs some 50 times slower, and batches of the size it writes at full speed
(about a thousand events) keep the per-batch work (a transaction, a WAL sync) at its real weight.
Instructions per request or message = instructions of the process and its writer process / C; both
variants count the same idle seconds. ``PYTHONHASHSEED=0``. Not counted: the broker (Java), the
client or the target, PostgreSQL's server.
"""

from __future__ import annotations

import argparse
import http.client
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import delivery, report  # noqa: E402
from bench.ingress import make_body  # noqa: E402
from bench.stack import WEB_PORT, BenchError, Stack, run  # noqa: E402

CONNECTIONS = 8
WARMUP = 200
# Under callgrind the web tier runs some 50 times slower than at full speed: with the deployed flush interval
# (1 s) its batches would hold a few dozen events instead of the 1,000-1,500 a web worker writes at a time under
# load (bench/history_overhead.py), and the per-batch work (a transaction, a WAL sync) would weigh 30 times more.
FLUSH_INTERVAL = 20.0


def post_requests(service: str, body: bytes, count: int) -> None:
    """``count`` POSTs over ``CONNECTIONS`` keep-alive connections; raises unless every answer is 202."""
    failures: list[str] = []
    shares = [count // CONNECTIONS + (1 if i < count % CONNECTIONS else 0) for i in range(CONNECTIONS)]

    def client(n: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", WEB_PORT, timeout=600)
        try:
            for _ in range(n):
                conn.request("POST", f"/ase/{service}/", body, {"Content-Type": "application/json"})
                response = conn.getresponse()
                text = response.read()
                if response.status != 202:
                    failures.append(f"{response.status} {text[:200]!r}")
                    return
        except OSError as exc:
            failures.append(f"{type(exc).__name__}: {exc}")
        finally:
            conn.close()

    threads = [threading.Thread(target=client, args=(n,)) for n in shares]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise BenchError(f"{len(failures)} clients failed, first: {failures[0]}")


def callgrind_control(*args: str) -> str:
    result = subprocess.run(["callgrind_control", *args], capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        raise BenchError(f"callgrind_control {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")
    return result.stdout


def instructions(dump: Path) -> int:
    """The ``summary:`` (or ``totals:``) instruction count of one callgrind dump."""
    match = re.search(r"^(?:summary|totals):\s+(\d+)", dump.read_text(errors="replace"), re.MULTILINE)
    if match is None:
        raise BenchError(f"no instruction total in {dump}")
    return int(match.group(1))


def callgrind(out: Path) -> list[str]:
    """The command that runs a process under callgrind, counting nothing until ``callgrind_control -i on``."""
    return [
        "valgrind",
        "--tool=callgrind",
        "--trace-children=yes",
        "--instr-atstart=no",
        f"--callgrind-out-file={out}/cg.%p",
    ]


def variant_env(stack: Stack, on: bool) -> dict[str, str]:
    return {
        **stack.env,
        "ASE_HISTORY_ENABLED": "true" if on else "false",
        "ASE_HISTORY_FLUSH_INTERVAL": str(FLUSH_INTERVAL),
        "PYTHONHASHSEED": "0",
    }


def dump(out: Path) -> dict[str, int]:
    """Dump every callgrind run's count; {"process": ..., "writer": ...} (the history writer process apart)."""
    before = set(out.iterdir())
    callgrind_control("-d")
    counts = {"process": 0, "writer": 0}
    for path in sorted(set(out.iterdir()) - before):
        command_line = re.search(r"^cmd:\s*(.*)$", path.read_text(errors="replace"), re.MULTILINE)
        role = "writer" if command_line and "console.history_writer" in command_line.group(1) else "process"
        counts[role] += instructions(path)
    if not counts["process"]:
        raise BenchError(f"callgrind wrote no dump in {out}")
    return counts


def measure_ingress(stack: Stack, index: int, count: int, on: bool, out: Path) -> dict[str, int]:
    """Instructions of a web tier for ``count`` requests (a service unit of its own, sending stopped)."""
    service, queue = f"BenchInstr{index}", f"bench_instr_{index}"
    stack.deploy(service, queue, "http://127.0.0.1:9/unused", sending=False)
    body = make_body()
    stack.start_web(workers=1, env=variant_env(stack, on), wrap=callgrind(out), timeout=900)
    try:
        post_requests(service, body, WARMUP)
        time.sleep(FLUSH_INTERVAL + 2)
        callgrind_control("-i", "on")
        started = time.monotonic()
        post_requests(service, body, count)
        took = time.monotonic() - started
        # Every event of the counted requests written while counting: the recorder's next flush comes within
        # FLUSH_INTERVAL; a batch holds at most 5,000.
        time.sleep(FLUSH_INTERVAL + 2)
        counts = dump(out)
    finally:
        stack.stop("web")
    depth = stack.depth(queue)
    if depth != WARMUP + count:
        raise BenchError(f"queue '{queue}' depth {depth} != {WARMUP + count} requests answered 202")
    print(f"  {count} requests in {took:.1f} s under callgrind ({count / took:.0f}/s)")
    return counts


def measure_delivery(stack: Stack, index: int, count: int, on: bool, out: Path) -> dict[str, int]:
    """Instructions of a Celery worker delivering ``count`` messages to the bench target."""
    path = delivery.PATHS["ase"]
    delivery.http_post(f"{delivery.BASE}/_reset")
    delivery.preload(stack, delivery.ASE_QUEUE, WARMUP, ase=True)
    stack.start_worker(node=f"ase-instr-{index}", wait=False, env=variant_env(stack, on), wrap=callgrind(out))
    try:
        delivery.wait_delivered(stack, "worker", path, WARMUP, 900)
        time.sleep(FLUSH_INTERVAL + 2)
        callgrind_control("-i", "on")
        started = time.monotonic()
        delivery.preload(stack, delivery.ASE_QUEUE, count, ase=True)
        delivery.wait_delivered(stack, "worker", path, WARMUP + count, 900)
        took = time.monotonic() - started
        time.sleep(FLUSH_INTERVAL + 2)
        counts = dump(out)
    finally:
        stack.stop("worker")
    seen = delivery.stats(path, WARMUP + count)
    left = delivery.depth_settled(stack, delivery.ASE_QUEUE)
    if seen["distinct"] != WARMUP + count or left:
        raise BenchError(f"the target saw {seen['distinct']} of {WARMUP + count} messages, {left} left in the queue")
    print(f"  {count} messages delivered in {took:.1f} s under callgrind ({count / took:.0f}/s)")
    return counts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--path", choices=("ingress", "delivery"), default="ingress", help="what is counted")
    parser.add_argument(
        "--count", "--requests", type=int, default=1000, help="requests or messages per measurement (default 1000)"
    )
    parser.add_argument("--repeats", type=int, default=2, help="measurements per variant (default 2)")
    parser.add_argument(
        "--postgresql", metavar="URL", help="Django database (and history) in PostgreSQL at URL (recreated empty)"
    )
    parser.add_argument("--no-doc", action="store_true", help="do not update docs/BENCHMARKS.md")
    args = parser.parse_args()
    for tool in ("valgrind", "callgrind_control"):
        if subprocess.run(["which", tool], capture_output=True).returncode != 0:
            print(f"{tool} is missing: apt-get install -y valgrind", file=sys.stderr)
            return 2

    info = report.machine()
    results: dict[str, list[dict[str, int]]] = {"on": [], "off": []}
    ingress = args.path == "ingress"
    unit = "request" if ingress else "message"
    started = time.monotonic()
    with Stack("history_instructions") as stack:
        print(f"== broker started in {stack.start_broker():.1f} s")
        if args.postgresql:
            stack.use_postgresql(args.postgresql)
        stack.migrate()
        if not ingress:
            stack.start_target()
            stack.deploy(delivery.SERVICE, delivery.ASE_QUEUE, f"{delivery.BASE}{delivery.PATHS['ase']}")
        # off, on, on, off, ...: a drift (there should be none) would show as a difference between repeats.
        order = [v for r in range(args.repeats) for v in (("off", "on") if r % 2 == 0 else ("on", "off"))]
        for index, variant in enumerate(order):
            measure = measure_ingress if ingress else measure_delivery
            out = stack.data_dir / f"callgrind-{index}"
            out.mkdir(parents=True)
            counts = measure(stack, index, args.count, variant == "on", out)
            results[variant].append(counts)
            each = {k: v / args.count for k, v in counts.items()}
            print(
                f"  history {variant}: {each['process']:,.0f} instructions/{unit} in the "
                f"{'web' if ingress else 'worker'} process, {each['writer']:,.0f} in its writer process"
            )
    elapsed = time.monotonic() - started

    def per_request(variant: str) -> list[float]:
        return [(c["process"] + c["writer"]) / args.count for c in results[variant]]

    def spread(values: list[float]) -> float:
        return (max(values) - min(values)) / min(values)

    on, off = per_request("on"), per_request("off")
    mean_on, mean_off = sum(on) / len(on), sum(off) / len(off)
    writer = [c["writer"] / args.count for c in results["on"]]
    rows = [
        ["history off", " / ".join(f"{v:,.0f}" for v in off), f"{mean_off:,.0f}", ""],
        ["history on", " / ".join(f"{v:,.0f}" for v in on), f"{mean_on:,.0f}", f"{mean_on / mean_off:.3f}"],
        [
            "  of which its writer process",
            " / ".join(f"{v:,.0f}" for v in writer),
            f"{sum(writer) / len(writer):,.0f}",
            "",
        ],
    ]
    who = "web tier" if ingress else "Celery worker"
    table = report.table([who, f"instructions per {unit}, per measurement", "mean", "on/off"], rows)
    print()
    print(table)
    added = mean_on / mean_off - 1
    print(f"\nrecording adds {added:.1%} of the {who}'s instructions per {unit}; total {elapsed:.0f} s")
    if not args.no_doc:
        store = "PostgreSQL" if args.postgresql else "SQLite"
        counted = (
            f"""The web tier (uvicorn `console.asgi:application`, one worker) under callgrind; counted: {args.count:,}
`POST /ase/<service>/` (1 KiB JSON, {CONNECTIONS} keep-alive connections, all 202, queue depth checked) after a
warm-up of {WARMUP}"""
            if ingress
            else f"""The Celery worker (scripts/up.sh's command line, the sending process of one service unit) under
callgrind; counted: {args.count:,} messages (1 KiB JSON) put in the unit's queue and delivered to the bench target
(each seen there, the queue empty afterwards) after a warm-up of {WARMUP}"""
        )
        what = "ingress request" if ingress else "delivered message"
        section = f"""## History recording: instructions per {what} ({store})

Command: `{report.command_line()}` (total run time {elapsed:.0f} s)

Machine and date:
{report.machine_markdown(info)}

{counted}, plus {FLUSH_INTERVAL + 2:g} s for their history to be written
(`ASE_HISTORY_FLUSH_INTERVAL={FLUSH_INTERVAL:g}`: batches of the size written at full speed with the deployed 1 s).
`valgrind --tool=callgrind --trace-children=yes --instr-atstart=no`, `PYTHONHASHSEED=0`, the stack's {store}
database. Instructions of the process and, with history on{" and SQLite" if not args.postgresql else ""}, of its
history writer process, divided by the {unit}s. Not counted: the broker and
{"PostgreSQL's server" if args.postgresql else ("the client" if ingress else "the target")}.

{table}

Recording the history adds **{added:.1%}** to the {who}'s instructions per {unit}. Unlike the rates (section
"History recording: what it costs the ingress and the delivery"), this count does not move with the machine's
load: the repeats of one variant differ by at most {spread(on):.1%} (on) and {spread(off):.1%} (off).
"""
        key = "history_instructions" + ("" if ingress else "_delivery") + ("_postgresql" if args.postgresql else "")
        print(f"updated {report.update_section(key, section)}")
    return 0


if __name__ == "__main__":
    run(main)
