"""What recording the message history costs the core paths: the ingress and the delivery benchmarks,
each with the history recorded (as deployed) and with it switched off (``ASE_HISTORY_ENABLED=false``),
in the same run, alternating.

    flock /tmp/ase-bench.lock .venv/bin/python bench/history_overhead.py [--rounds 5] [--seconds 10] [--phases 2]
        [--messages 5000] [--postgresql postgres://postgres@127.0.0.1:5432/ase_bench] [--calibrate]

Ingress: bench/ingress.py's machinery (uvicorn ``console.asgi:application --workers 2``, sending
stopped, ``wrk -t2 -c16``, 1 KiB bodies, only 202s count, queue depth = 202s); recorded: one
``posted`` event per request. Each round restarts the broker with empty data and starts two web tiers
side by side, one per variant, on two ports; after a warm-up of each (on a fresh broker, the rate
climbs for about a minute), the load alternates between them
in phases of S seconds (on, off, off, on, or the reverse in the next round). On this 2-core virtual
machine, the speed of the whole machine (broker included) moves by 20-50% from one minute or broker
start to the next; measured minutes apart, on separate broker starts, one variant's rate said more
about when it ran than about history (docs/BENCHMARKS.md, "Where the time goes, sixth pass").
``--calibrate`` runs the same method with history off in both tiers: what it reads for no change.

Delivery: bench/delivery.py's ASE variant (N preloaded messages, a Celery worker started as
scripts/up.sh does, the rate taken by the target), each variant twice on the round's broker (on,
off, off, on or the reverse); recorded: ``attempt`` and ``acked`` per message. The history store is the stack's
SQLite database, the embedded default, as in the core benchmarks; with ``--postgresql`` it is a
PostgreSQL database (dropped and created empty), as a production deployment and CI run it.

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
from bench.stack import WEB_PORT, BenchError, Stack, run  # noqa: E402

GOAL = 0.9
VARIANTS = ("on", "off")
SECOND_PORT = WEB_PORT + 3  # the second web tier (8656; the target is on WEB_PORT + 1)


def history_setting(variant: str, args: argparse.Namespace) -> str:
    """``ASE_HISTORY_ENABLED`` for ``variant``: history is on in the "on" variant, unless calibrating."""
    return "true" if variant == "on" and not args.calibrate else "false"


def abba(r: int) -> list[str]:
    """The order of round ``r``'s measurements: on, off, off, on; the reverse in the next round."""
    pair = list(VARIANTS) if r % 2 else list(VARIANTS[::-1])
    return pair + pair[::-1]


def delivery_round(stack: Stack, args: argparse.Namespace, r: int) -> dict[str, tuple[float, float]]:
    """Each variant twice on the round's broker (on, off, off, on, or the reverse): {variant: (messages per
    second over its two measurements, worker CPU us per message)}. The first delivery after the ingress phases
    ran 20% faster than the second in a calibration run, whatever the variant."""
    seconds = dict.fromkeys(VARIANTS, 0.0)
    cpu = dict.fromkeys(VARIANTS, 0.0)
    for variant in abba(r):
        stack.env["ASE_HISTORY_ENABLED"] = history_setting(variant, args)
        delivered = delivery.run_ase(stack, args.messages, r, 300.0)
        seconds[variant] += args.messages / delivered.rate
        cpu[variant] += delivered.cpu_ms_per_msg * 1000 * args.messages
        print(f"  delivery history {variant}: {delivered.rate:,.0f} msg/s")
    return {v: (2 * args.messages / seconds[v], cpu[v] / (2 * args.messages)) for v in VARIANTS}


def ingress_round(stack: Stack, args: argparse.Namespace, r: int, body_file: Path) -> dict[str, tuple[float, float]]:
    """Both web tiers side by side, load phases alternating between them (on, off, off, on, ...):
    {variant: (202s per second over its phases, web CPU us per 202)}."""
    ports = dict(zip(VARIANTS, (WEB_PORT, SECOND_PORT) if r % 2 else (SECOND_PORT, WEB_PORT), strict=True))
    for variant in VARIANTS:
        env = {**stack.env, "ASE_HISTORY_ENABLED": history_setting(variant, args)}
        stack.start_web(name=f"web-{variant}", port=ports[variant], env=env)
    accepted = dict.fromkeys(VARIANTS, 0)
    seconds = dict.fromkeys(VARIANTS, 0.0)
    cpu = dict.fromkeys(VARIANTS, 0.0)
    try:
        for variant in VARIANTS:
            name, web, port = f"{variant}{r}", f"web-{variant}", ports[variant]
            ase_round(
                stack, f"BenchHist{name}W", f"bench_hist_{name}_w", body_file, args.warmup, 16, 2, r, web=web, port=port
            )
        for variant in abba(r) * (args.phases // 2):
            name, web, port = f"{variant}{r}", f"web-{variant}", ports[variant]
            result = ase_round(
                stack,
                f"BenchHist{name}",
                f"bench_hist_{name}",
                body_file,
                args.seconds,
                16,
                2,
                r,
                False,
                web=web,
                port=port,
            )
            accepted[variant] += result.accepted
            seconds[variant] += result.seconds
            cpu[variant] += (result.cpu_us or 0.0) * result.accepted
            print(f"  ingress history {variant}: {result.rate:,.0f} req/s, web CPU {result.cpu_us:.0f} us/request")
    finally:
        for variant in VARIANTS:
            stack.stop(f"web-{variant}")
    for variant in VARIANTS:
        depth = stack.depth(f"bench_hist_{variant}{r}")
        if depth != accepted[variant]:
            raise BenchError(f"queue bench_hist_{variant}{r}: depth {depth} != {accepted[variant]} 202s counted")
    return {v: (accepted[v] / seconds[v], cpu[v] / accepted[v]) for v in VARIANTS}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="rounds, each measures both variants (default 5)")
    parser.add_argument("--seconds", type=int, default=10, help="seconds of one ingress load phase (default 10)")
    parser.add_argument(
        "--phases",
        type=int,
        default=2,
        help="ingress load phases per variant and round, even (default 2: on, off, off, on)",
    )
    parser.add_argument(
        "--warmup",
        type=int,
        default=20,
        help="ingress warm-up seconds of each web tier, on the fresh broker (default 20)",
    )
    parser.add_argument(
        "--calibrate", action="store_true", help="history off in both variants: what the method measures for no change"
    )
    parser.add_argument("--messages", type=int, default=5000, help="delivery: N messages per measurement")
    parser.add_argument(
        "--postgresql", metavar="URL", help="Django database (and history) in PostgreSQL at URL (recreated empty)"
    )
    parser.add_argument("--no-doc", action="store_true", help="do not update docs/BENCHMARKS.md")
    args = parser.parse_args()
    if args.phases < 2 or args.phases % 2:
        parser.error("--phases must be even")
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
        for r in range(1, args.rounds + 1):
            print(f"== round {r}/{args.rounds}")
            # Each round on an empty broker: the 30-40,000 messages a load phase leaves in its queue slow every
            # later send down (the rates fell by half over 5 rounds otherwise).
            print(f"  broker restarted with empty data in {stack.start_broker():.1f} s")
            measured = ingress_round(stack, args, r, body_file)
            for variant in VARIANTS:
                ingress[variant].append(measured[variant][0])
                ingress_cpu[variant].append(measured[variant][1])
            for variant, (rate, cpu_us) in delivery_round(stack, args, r).items():
                deliver[variant].append(rate)
                deliver_cpu[variant].append(cpu_us)
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
        variants = (
            f"""**on**: as deployed (the `posted` event per accepted request, `attempt` + `acked` per delivered message,
written in batches into the stack's {store} database, {writer}); **off**: `ASE_HISTORY_ENABLED=false`, nothing
recorded."""
            if not args.calibrate
            else """**Calibration (`--calibrate`): both variants run with `ASE_HISTORY_ENABLED=false`**, the same code
twice; "on" and "off" only name the two web tiers and the two workers' turns."""
        )
        verdict = (
            f"""Goal (issue 6): recording slows neither path by more than 10% (median on/off >= {GOAL}): ingress
**{verdicts["ingress"]}**, delivery **{verdicts["delivery"]}**. The CPU rows say what recording costs the process that
records (median CPU per request or message, on against off): {cpu_share["ingress"]:.0%} of the web tier's CPU per
request, {cpu_share["delivery"]:.0%} of the worker's CPU per message."""
            if not args.calibrate
            else """Both variants are the same code: every ratio above is what this method reads for no change, its
noise on this machine."""
        )
        title = "calibration, no change" if args.calibrate else store
        section = f"""## History recording: what it costs the ingress and the delivery ({title})

Command: `{report.command_line()}` (total run time {elapsed:.0f} s)

Machine and date:
{report.machine_markdown(info)}

{args.rounds} rounds, each on a broker restarted with empty data. {variants} Ingress: two web tiers
side by side (uvicorn, 2 workers each, one per variant), each warmed up {args.warmup} s (on a fresh broker the rate
climbs for about a minute), then bench/ingress.py's
load (`wrk -t2 -c16 -d{args.seconds + TAIL_SECONDS}s`, 1 KiB bodies) alternating between them,
{2 * args.phases} phases of {args.seconds} s per round (on, off, off, on; the reverse in the next round); a variant's
rate is its 202s over its phases' seconds; 202s = queue depth checked. The last second of a phase's history
events is written after it, while wrk sends only `GET /healthz` for {TAIL_SECONDS} s. Delivery: bench/delivery.py's
ASE variant with N = {args.messages:,}, on the round's broker, each variant twice (on, off, off, on; the reverse in the
next round), a fresh Celery worker each time; a variant's rate is its messages over its two measurements' seconds.

{text_table}

{verdict} What the web tier and the worker execute per request
and message, counted by callgrind: "History recording: instructions per ingress request" and "... per delivered
message". Why the method: "Where the time goes, sixth pass".
"""
        key = "history_overhead_postgresql" if args.postgresql else "history_overhead"
        if args.calibrate:
            key += "_calibration"
        print(f"updated {report.update_section(key, section)}")
    return 0


if __name__ == "__main__":
    run(main)
