"""What recording the message history costs the ingress, counted in CPU instructions rather than timed:
the web tier under valgrind's callgrind, history on (as deployed) and off (``ASE_HISTORY_ENABLED=false``).

    flock /tmp/ase-bench.lock .venv/bin/python bench/history_instructions.py [--requests 1000] [--repeats 2]
        [--postgresql postgres://postgres@127.0.0.1:5432/ase_bench]

Why: on this 2-core virtual machine the rate of one ingress round (bench/history_overhead.py) moves by
more than history costs, both ways. An instruction count of the same requests does not depend on the
machine's load, so it says what recording adds to each request, which the rates cannot resolve.

How: the web tier's command (uvicorn ``console.asgi:application``, one worker) runs under
``valgrind --tool=callgrind --trace-children=yes --instr-atstart=no``, so the history writer process
it starts on SQLite is counted too. After start-up and a warm-up (the poster's connection, the
recorder and its writer started, one flush), ``callgrind_control -i on`` starts the count; R requests
(1 KiB JSON, 8 keep-alive connections, every answer must be 202) are sent; the count goes on for
one more flush interval so that the requests' history events are written while counting; then
``callgrind_control -d`` dumps it. The flush interval is 20 s instead of the deployed 1 s: under
callgrind the web tier runs some 50 times slower, and batches of the size it writes at full speed
(about a thousand events) keep the per-batch work (a transaction, a WAL sync) at its real weight.
Instructions per request = instructions of every process of the web tier / R. ``PYTHONHASHSEED=0``.
The broker (Java) and PostgreSQL's server are not counted.
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

from bench import report  # noqa: E402
from bench.ingress import make_body  # noqa: E402
from bench.stack import PY, WEB_PORT, BenchError, Stack, run  # noqa: E402

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


def measure(stack: Stack, service: str, queue: str, body: bytes, count: int, on: bool, out: Path) -> dict[str, int]:
    """Instructions of a web tier under callgrind for ``count`` requests: {"web": ..., "writer": ...}."""
    out.mkdir(parents=True)
    env = {
        **stack.env,
        "ASE_HISTORY_ENABLED": "true" if on else "false",
        "ASE_HISTORY_FLUSH_INTERVAL": str(FLUSH_INTERVAL),
        "PYTHONHASHSEED": "0",
    }
    command = [
        "valgrind",
        "--tool=callgrind",
        "--trace-children=yes",
        "--instr-atstart=no",
        f"--callgrind-out-file={out}/cg.%p",
        PY,
        "-m",
        "uvicorn",
        "console.asgi:application",
        "--host",
        "127.0.0.1",
        "--port",
        str(WEB_PORT),
        "--workers",
        "1",
        "--no-access-log",
    ]
    stack.spawn("web", command, env)
    try:
        stack.wait_http("web", f"http://127.0.0.1:{WEB_PORT}/healthz", timeout=900)
        post_requests(service, body, WARMUP)
        time.sleep(FLUSH_INTERVAL + 2)
        callgrind_control("-i", "on")
        started = time.monotonic()
        post_requests(service, body, count)
        took = time.monotonic() - started
        # Every event of the counted requests written while counting: the recorder's next flush comes within
        # FLUSH_INTERVAL; a batch holds at most 5,000.
        time.sleep(FLUSH_INTERVAL + 2)
        before = set(out.iterdir())
        callgrind_control("-d")
        dumps = sorted(set(out.iterdir()) - before)
    finally:
        stack.stop("web")
    depth = stack.depth(queue)
    if depth != WARMUP + count:
        raise BenchError(f"queue '{queue}' depth {depth} != {WARMUP + count} requests answered 202")
    counts = {"web": 0, "writer": 0}
    for dump in dumps:
        command_line = re.search(r"^cmd:\s*(.*)$", dump.read_text(errors="replace"), re.MULTILINE)
        role = "writer" if command_line and "console.history_writer" in command_line.group(1) else "web"
        counts[role] += instructions(dump)
    if not counts["web"]:
        raise BenchError(f"callgrind wrote no dump in {out}")
    print(f"  {count} requests in {took:.1f} s under callgrind ({count / took:.0f}/s)")
    return counts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=1000, help="requests counted per measurement (default 1000)")
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
    body = make_body()
    results: dict[str, list[dict[str, int]]] = {"on": [], "off": []}
    started = time.monotonic()
    with Stack("history_instructions") as stack:
        print(f"== broker started in {stack.start_broker():.1f} s")
        if args.postgresql:
            stack.use_postgresql(args.postgresql)
        stack.migrate()
        # off, on, on, off, ...: a drift (there should be none) would show as a difference between repeats.
        order = [v for r in range(args.repeats) for v in (("off", "on") if r % 2 == 0 else ("on", "off"))]
        for index, variant in enumerate(order):
            service, queue = f"BenchInstr{index}", f"bench_instr_{index}"
            stack.deploy(service, queue, "http://127.0.0.1:9/unused", sending=False)
            counts = measure(
                stack, service, queue, body, args.requests, variant == "on", stack.data_dir / f"callgrind-{index}"
            )
            results[variant].append(counts)
            per_request = {k: v / args.requests for k, v in counts.items()}
            print(
                f"  history {variant}: {per_request['web']:,.0f} instructions/request in the web process, "
                f"{per_request['writer']:,.0f} in its writer process"
            )
    elapsed = time.monotonic() - started

    def per_request(variant: str) -> list[float]:
        return [(c["web"] + c["writer"]) / args.requests for c in results[variant]]

    def spread(values: list[float]) -> float:
        return (max(values) - min(values)) / min(values)

    on, off = per_request("on"), per_request("off")
    mean_on, mean_off = sum(on) / len(on), sum(off) / len(off)
    writer = [c["writer"] / args.requests for c in results["on"]]
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
    table = report.table(["web tier", "instructions per request, per measurement", "mean", "on/off"], rows)
    print()
    print(table)
    added = mean_on / mean_off - 1
    print(f"\nrecording adds {added:.1%} of the web tier's instructions per request; total {elapsed:.0f} s")
    if not args.no_doc:
        store = "PostgreSQL" if args.postgresql else "SQLite"
        section = f"""## History recording: instructions per ingress request ({store})

Command: `{report.command_line()}` (total run time {elapsed:.0f} s)

Machine and date:
{report.machine_markdown(info)}

The web tier (uvicorn `console.asgi:application`, one worker, the stack's {store} database) under
`valgrind --tool=callgrind --trace-children=yes --instr-atstart=no`, `PYTHONHASHSEED=0`; counted: {args.requests:,}
`POST /ase/<service>/` (1 KiB JSON, {CONNECTIONS} keep-alive connections, all 202, queue depth checked) after a
warm-up of {WARMUP}, plus {FLUSH_INTERVAL + 2:g} s for their history to be written
(`ASE_HISTORY_FLUSH_INTERVAL={FLUSH_INTERVAL:g}`: batches of the size a web worker writes at full speed with the
deployed 1 s). Instructions of every process of the
web tier (with history on{" and SQLite" if not args.postgresql else ""}, its history writer process too) divided by
the requests. Not counted: the broker and {"PostgreSQL's server" if args.postgresql else "the client"}.

{table}

Recording the history adds **{added:.1%}** to the web tier's instructions per request. Unlike the
rates (section "History recording: what it costs the ingress and the delivery"), this count does not move with
the machine's load: the repeats of one variant differ by at most {spread(on):.1%} (on) and {spread(off):.1%} (off).
"""
        key = "history_instructions_postgresql" if args.postgresql else "history_instructions"
        print(f"updated {report.update_section(key, section)}")
    return 0


if __name__ == "__main__":
    run(main)
