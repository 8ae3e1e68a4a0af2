"""Machine description, tables, and the sections of docs/BENCHMARKS.md."""

from __future__ import annotations

import os
import platform
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "BENCHMARKS.md"

INTRO = """# Benchmarks

Measured with the scripts in `bench/` (plain Python scripts, not tests). Each
script starts everything it needs on its own ports and data (ActiveMQ via
`scripts/activemq.sh` with `ASE_BROKER_HOME=var/bench-activemq` on STOMP port
61653 with a wiped data directory, SQLite under `var/bench/`, Redis database 13,
web on 127.0.0.1:8653, benchmark target on 127.0.0.1:8654), runs the ASE
variant and its baselines in the same run on the same machine, prints a table,
rewrites its own section below, and stops everything it started (also on error).
Shared code: `bench/stack.py` (start/stop), `bench/report.py` (this file's
sections), `bench/target_app.py` (the HTTP target).

Numbers from a 2-core machine shared with other work are noisy: each section
gives the machine, the date and the load averages at the start and the end, and where there
are several rounds, every round plus the median. Compare ratios within a run, and prefer the
CPU-per-message figures, which usually move less with the machine's load than the rates do.
"""


def _run(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "?"


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "?"


def machine() -> dict[str, str]:
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    ram = "?"
    try:
        match = re.search(r"MemTotal:\s+(\d+) kB", Path("/proc/meminfo").read_text())
        if match:
            ram = f"{int(match.group(1)) / 1024 / 1024:.1f} GiB"
    except OSError:
        pass
    os_name = "?"
    try:
        match = re.search(r'PRETTY_NAME="([^"]+)"', Path("/etc/os-release").read_text())
        if match:
            os_name = match.group(1)
    except OSError:
        pass
    wrk = _run(["wrk", "-v"]).splitlines()
    return {
        "nproc": _run(["nproc"]),
        "CPU": cpu,
        "RAM": ram,
        "kernel": platform.release(),
        "OS": os_name,
        "ActiveMQ": _run(["dpkg-query", "-W", "-f", "${Version}", "activemq"]),
        "Java": _java(),
        "Python": platform.python_version(),
        "libraries": ", ".join(
            f"{d} {_version(d)}" for d in ("Django", "uvicorn", "stomp.py", "celery", "kombu", "redis", "urllib3")
        ),
        "Redis": _run(["redis-server", "--version"]).split(" v=")[-1].split(" ")[0],
        "wrk": wrk[0].split(" [")[0] if wrk else "?",
        "load average at start": loadavg(),
        "date": time.strftime("%Y-%m-%d %H:%M %Z"),
        "code": code_version(),
    }


def code_version() -> str:
    """The commit measured, and which product files differed from it (others edit the tree in parallel)."""
    commit = _run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"]) or "?"
    changed = _run(["git", "-C", str(ROOT), "status", "--porcelain", "--", "ase_engine", "console", "requirements.txt"])
    # Each line is "XY path"; _run strips the output, so the first line may have lost its leading blank.
    files = sorted(line.strip().split(maxsplit=1)[1] for line in changed.splitlines() if line.strip())
    return f"git {commit}" + (f" + uncommitted changes to {', '.join(files)}" if files else " (clean)")


def _java() -> str:
    try:
        result = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return "?"
    lines = (result.stderr or result.stdout).strip().splitlines()
    return lines[0] if lines else "?"


def loadavg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def machine_markdown(info: dict[str, str]) -> str:
    return "\n".join(f"- {k}: {v}" for k, v in info.items())


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A Markdown table (also readable as plain text)."""
    cells = [[str(h) for h in headers]] + [[_fmt(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = [
        "| " + " | ".join(c.ljust(w) for c, w in zip(cells[0], widths, strict=True)) + " |",
        "| " + " | ".join("-" * w for w in widths) + " |",
    ]
    lines += ["| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |" for r in cells[1:]]
    return "\n".join(lines)


def _fmt(value: object) -> str:
    if isinstance(value, float):
        return f"{value:,.1f}" if abs(value) >= 10 else f"{value:.2f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def command_line() -> str:
    script = Path(sys.argv[0]).resolve()
    try:
        script_text = str(script.relative_to(ROOT))
    except ValueError:
        script_text = str(script)
    return " ".join([".venv/bin/python", script_text, *sys.argv[1:]])


def update_section(key: str, text: str) -> Path:
    """Replace (or append) the section between ``<!-- bench:<key> -->`` markers of docs/BENCHMARKS.md."""
    begin, end = f"<!-- bench:{key}:begin -->", f"<!-- bench:{key}:end -->"
    block = f"{begin}\n{text.strip()}\n{end}\n"
    DOC.parent.mkdir(parents=True, exist_ok=True)
    current = DOC.read_text() if DOC.exists() else INTRO
    if begin in current and end in current:
        head, rest = current.split(begin, 1)
        _, tail = rest.split(end, 1)
        updated = head + block + tail.lstrip("\n")
    else:
        updated = current.rstrip("\n") + "\n\n" + block
    tmp = DOC.with_suffix(".md.tmp")
    tmp.write_text(updated)
    tmp.replace(DOC)
    return DOC
