"""What recording the message history costs the core paths: the ingress and the delivery benchmarks,
each with the history recorded (as deployed) and with it switched off (``ASE_HISTORY_ENABLED=false``),
in the same run, alternating.

    flock /tmp/ase-bench.lock .venv/bin/python bench/history_overhead.py [--rounds 5] [--seconds 15] [--messages 5000]
        [--postgresql postgres://postgres@127.0.0.1:5432/ase_bench]

Ingress: bench/ingress.py's machinery (uvicorn ``console.asgi:application --workers 2`` restarted
with the variant's setting before each round, sending stopped, ``wrk -t2 -c16``, 1 KiB bodies, only
202s count, queue depth = 202s); recorded: one ``posted`` event per request. Delivery:
bench/delivery.py's ASE variant (N preloaded messages, a Celery worker started as scripts/up.sh does,
the rate taken by the target); recorded: ``attempt`` and ``acked`` per message. The history store is
the stack's SQLite database, the embedded default, as in the core benchmarks; with ``--postgresql`` it is
a PostgreSQL database (dropped and created empty), as a production deployment and CI run it.

Goal (issue 6): recording costs at most 10% of the throughput of either path (on / off >= 0.9).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import delivery, report  # noqa: E402
from bench.ingress import TAIL_SECONDS, ase_round, make_body, wrk_missing  # noqa: E402
from bench.stack import Stack, run  # noqa: E402

GOAL = 0.9
VARIANTS = ("on", "off")


def with_history(stack: Stack, on: bool) -> None:
    stack.env["ASE_HISTORY_ENABLED"] = "true" if on else "false"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="rounds, each measures both variants (default 5)")
    parser.add_argument("--seconds", type=int, default=15, help="ingress load phase per measurement (default 15)")
    parser.add_argument("--warmup", type=int, default=3, help="ingress warm-up seconds after each web start")
    parser.add_argument("--messages", type=int, default=5000, help="delivery: N messages per measurement")
    parser.add_argument(
        "--postgresql", metavar="URL", help="Django database (and history) in PostgreSQL at URL (recreated empty)"
    )
    parser.add_argument("--no-doc", action="store_true", help="do not update docs/BENCHMARKS.md")
    args = parser.parse_args()
    if wrk_missing():
        return 2

    info = report.machine()
    ingress: dict[str, list[float]] = {v: [] for v in VARIANTS}
    ingress_cpu: dict[str, list[float]] = {v: [] for v in VARIANTS}
    deliver_cpu: dict[str, list[float]] = {v: [] for v in VARIANTS}
    deliver: dict[str, list[float]] = {v: [] for v in VARIANTS}
    started = time.monotonic()
    with Stack("history_overhead") as stack:
        print("== broker (fresh data), target, database")
        print(f"  broker started in {stack.start_broker():.1f} s")
        stack.start_target()
        if args.postgresql:
            stack.use_postgresql(args.postgresql)
        stack.migrate()
        names = [f"{v}{r}" for r in range(1, args.rounds + 1) for v in VARIANTS]
        for name in names:
            stack.deploy(f"BenchHist{name}", f"bench_hist_{name}", "http://127.0.0.1:9/unused", sending=False)
            stack.deploy(f"BenchHist{name}W", f"bench_hist_{name}_w", "http://127.0.0.1:9/unused", sending=False)
        stack.deploy(delivery.SERVICE, delivery.ASE_QUEUE, f"{delivery.BASE}{delivery.PATHS['ase']}")
        body_file = stack.data_dir / "body.json"
        body_file.write_bytes(make_body())
        order = list(VARIANTS)
        for r in range(1, args.rounds + 1):
            print(f"== round {r}/{args.rounds}")
            for variant in order:
                with_history(stack, variant == "on")
                # Each measurement on an empty broker: the 30-40,000 messages an ingress measurement leaves
                # in its queue slow every later send down (the rates fell by half over 5 rounds otherwise).
                print(f"  broker restarted with empty data in {stack.start_broker():.1f} s")
                stack.start_web()
                try:
                    name = f"{variant}{r}"
                    ase_round(stack, f"BenchHist{name}W", f"bench_hist_{name}_w", body_file, args.warmup, 16, 2, r)
                    result = ase_round(
                        stack, f"BenchHist{name}", f"bench_hist_{name}", body_file, args.seconds, 16, 2, r
                    )
                finally:
                    stack.stop("web")
                ingress[variant].append(result.rate)
                ingress_cpu[variant].append(result.cpu_us or float("nan"))
                print(f"  ingress history {variant}: {result.rate:,.0f} req/s, web CPU {result.cpu_us:.0f} us/request")
                delivered = delivery.run_ase(stack, args.messages, r, 300.0)
                deliver[variant].append(delivered.rate)
                deliver_cpu[variant].append(delivered.cpu_ms_per_msg * 1000)
                print(f"  delivery history {variant}: {delivered.rate:,.0f} msg/s")
            order.reverse()
        print("== stopping")
    elapsed = time.monotonic() - started
    info["load average at end"] = report.loadavg()

    def ratios(values: dict[str, list[float]]) -> list[float]:
        return [on / off for on, off in zip(values["on"], values["off"], strict=True)]

    rows = []
    measured = (
        ("ingress req/s (202)", ingress),
        ("delivery msg/s", deliver),
        ("ingress: web CPU us/request", ingress_cpu),
        ("delivery: worker CPU us/msg", deliver_cpu),
    )
    for name, values in measured:
        rows.append(
            [
                name,
                " / ".join(f"{v:,.0f}" for v in values["on"]),
                " / ".join(f"{v:,.0f}" for v in values["off"]),
                " / ".join(f"{x:.2f}" for x in ratios(values)),
                f"{report.median(ratios(values)):.2f}",
            ]
        )
    cpu_share = {
        path: 1 - report.median(values["off"]) / report.median(values["on"])
        for path, values in (("ingress", ingress_cpu), ("delivery", deliver_cpu))
    }
    text_table = report.table(
        ["path", "history on, per round", "history off, per round", "on/off per round", "median on/off"], rows
    )
    verdicts = {
        name: "met" if report.median(ratios(values)) >= GOAL else "NOT met"
        for name, values in (("ingress", ingress), ("delivery", deliver))
    }
    print()
    print(text_table)
    outcome = f"ingress {verdicts['ingress']}, delivery {verdicts['delivery']}"
    print(f"\ngoal on/off >= {GOAL}: {outcome}; total {elapsed:.0f} s")
    if not args.no_doc:
        store = "PostgreSQL" if args.postgresql else "SQLite"
        writer = "COPY from the recorder thread" if args.postgresql else "by a writer process of each recording process"
        section = f"""## History recording: what it costs the ingress and the delivery ({store})

Command: `{report.command_line()}` (total run time {elapsed:.0f} s)

Machine and date:
{report.machine_markdown(info)}

{args.rounds} rounds; in each, both variants, the order alternating. **on**: as deployed (the `posted` event per
accepted request, `attempt` + `acked` per delivered message, written in batches into the stack's {store} database,
{writer}); **off**: `ASE_HISTORY_ENABLED=false`, nothing recorded. Ingress: bench/ingress.py's
load (`wrk -t2 -c16 -d{args.seconds + TAIL_SECONDS}s`, 1 KiB bodies, the web tier restarted with the variant's
setting and warmed up {args.warmup} s before each measurement, the broker restarted with empty data before each
measurement; 202s = queue depth checked). Delivery:
bench/delivery.py's ASE variant with N = {args.messages:,} (a fresh Celery worker per measurement).

{text_table}

Goal (issue 6): recording slows neither path by more than 10% (median on/off >= {GOAL}): ingress
**{verdicts["ingress"]}**, delivery **{verdicts["delivery"]}**. The CPU rows say what recording costs the process that
records (median CPU per request or message, on against off): {cpu_share["ingress"]:.0%} of the web tier's CPU per
request, {cpu_share["delivery"]:.0%} of the worker's CPU per message. On this 2-core machine the rates of one round
vary by more than the effect measured; the CPU figures vary less. Other runs, and the CPU measured in the code
that records: "Where the time goes, fifth pass".
"""
        key = "history_overhead_postgresql" if args.postgresql else "history_overhead"
        print(f"updated {report.update_section(key, section)}")
    return 0


if __name__ == "__main__":
    run(main)
