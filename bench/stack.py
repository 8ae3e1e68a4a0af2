"""Start and stop the real ASE stack for a benchmark, on the benchmarks' own ports and data.

Everything runs as in ``scripts/up.sh`` (same commands, same settings module),
but isolated from a running product and from the test suite:

- ActiveMQ through ``scripts/activemq.sh`` with ``ASE_BROKER_HOME=var/bench-activemq``
  and STOMP on 127.0.0.1:61653; its data directory is wiped before the start;
- SQLite under ``var/bench/<bench>/`` (``ASE_DATA_DIR`` + ``DATABASE_URL``);
- Redis database 13 (``REDIS_URL``);
- web (uvicorn) on 127.0.0.1:8653, the benchmark target on 127.0.0.1:8654.

Each process runs in its own session (process group); ``Stack.close`` (also
reached on an exception, Ctrl-C or SIGTERM through ``with Stack(...)``) sends
SIGTERM to every group it started, SIGKILL after a grace period, then stops
the broker.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

PY = str(ROOT / ".venv" / "bin" / "python")
BROKER_HOME = ROOT / "var" / "bench-activemq"
BROKER_PORT = 61653
WEB_PORT = 8653
TARGET_PORT = 8654
REDIS_URL = "redis://127.0.0.1:6379/13"
DATA_ROOT = ROOT / "var" / "bench"


class BenchError(RuntimeError):
    """A benchmark could not run as designed (fail loudly, never report a number)."""


def port_in_use(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def http_get_json(url: str, timeout: float = 5.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return json.loads(response.read())


def http_post(url: str, timeout: float = 5.0) -> int:
    request = urllib.request.Request(url, data=b"", method="POST")
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return int(response.status)


def descriptor(service: str, queue: str, target_url: str, *, posting: bool, sending: bool, extra: str = "") -> str:
    """A Petals JBI service-unit descriptor (format of DESIGN.md)."""
    flag = {True: "true", False: "false"}
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<jbi:jbi version="1.0" xmlns:jbi="http://java.sun.com/xml/ns/jbi"
    xmlns:petalsCDK="http://petals.ow2.org/components/extensions/version-5"
    xmlns:ase="http://petals.ow2.org/components/ase/version-1" xmlns:b="http://example.org/bench">
  <jbi:services binding-component="false">
    <jbi:provides interface-name="b:BenchInterface" service-name="b:{service}" endpoint-name="{service}Endpoint">
      <ase:mustBeAutomaticallyStarted>{flag[posting]}</ase:mustBeAutomaticallyStarted>
      <ase:stop-timeout>10</ase:stop-timeout>
    </jbi:provides>
    <jbi:consumes interface-name="b:BenchInterface" service-name="b:{service}Target"
        endpoint-name="{service}TargetEndpoint">
      <petalsCDK:mep>InOnly</petalsCDK:mep>
      <petalsCDK:timeout>10000</petalsCDK:timeout>
      <ase:target-url>{target_url}</ase:target-url>
      <ase:mustBeAutomaticallyStarted>{flag[sending]}</ase:mustBeAutomaticallyStarted>
      <ase:is-idempotent>true</ase:is-idempotent>
      <ase:persistence-area-name>{queue}</ase:persistence-area-name>
      {extra}
    </jbi:consumes>
  </jbi:services>
</jbi:jbi>
"""


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


class Stack:
    """The processes of one benchmark run; use as a context manager."""

    def __init__(self, bench: str) -> None:
        self.bench = bench
        self.data_dir = DATA_ROOT / bench
        self.log_dir = self.data_dir / "logs"
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self._logs: dict[str, Any] = {}
        self._broker_started = False
        db = self.data_dir / "ase.sqlite3"
        self.env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "console.settings",
            "PYTHONUNBUFFERED": "1",
            "ASE_DATA_DIR": str(self.data_dir),
            "DATABASE_URL": f"sqlite:///{db}",
            "REDIS_URL": REDIS_URL,
            "ASE_BROKER_URL": f"127.0.0.1:{BROKER_PORT}",
            "ASE_BROKER_PORT": str(BROKER_PORT),
            "ASE_BROKER_HOME": str(BROKER_HOME),
        }
        # The benchmark's own settings must not leak from the caller's shell.
        for name in ("ASE_VAR_DIR", "ASE_CELERY_BROKER_URL", "ASE_CELERY_RESULT_BACKEND"):
            self.env.pop(name, None)

    # -- context -------------------------------------------------------------

    def __enter__(self) -> Stack:
        self._old_term = signal.signal(signal.SIGTERM, _raise_interrupt)
        shutil.rmtree(self.data_dir, ignore_errors=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        try:
            self.close()
        finally:
            signal.signal(signal.SIGTERM, self._old_term)
        if exc is not None and not isinstance(exc, KeyboardInterrupt):
            print(f"\nlogs of this run: {self.log_dir} and {BROKER_HOME}/activemq.log", file=sys.stderr)

    # -- processes -----------------------------------------------------------

    def spawn(self, name: str, cmd: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        if name in self.procs and self.procs[name].poll() is None:
            raise BenchError(f"{name} is already running")
        log = (self.log_dir / f"{name}.log").open("ab")
        log.write(f"=== {time.strftime('%Y-%m-%dT%H:%M:%S')} {' '.join(cmd)}\n".encode())
        log.flush()
        proc = subprocess.Popen(
            cmd,
            cwd=ROOT,
            env=env or self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.procs[name] = proc
        self._logs[name] = log
        return proc

    def log_text(self, name: str) -> str:
        path = self.log_dir / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def check_alive(self, name: str) -> None:
        proc = self.procs[name]
        if proc.poll() is not None:
            raise BenchError(f"{name} exited with {proc.returncode}:\n{self.log_text(name)[-3000:]}")

    def stop(self, name: str, timeout: float = 30.0) -> None:
        """SIGTERM to the process group, SIGKILL after ``timeout``; returns when the leader is gone."""
        proc = self.procs.pop(name, None)
        if proc is None:
            return
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                print(f"  {name}: still running after {timeout:g}s, SIGKILL", file=sys.stderr)
        # Whatever is left in the group (uvicorn's worker processes, ...) goes now.
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if proc.poll() is None:
            proc.wait(10)
        log = self._logs.pop(name, None)
        if log is not None:
            log.close()

    def close(self) -> None:
        for name in reversed(list(self.procs)):
            try:
                self.stop(name)
            except Exception as exc:  # noqa: BLE001 - keep stopping the others
                print(f"  {name}: stop failed: {exc}", file=sys.stderr)
        if self._broker_started:
            self._broker_started = False
            result = self.broker_script("stop", check=False)
            if result.returncode != 0:
                print(result.stdout + result.stderr, file=sys.stderr)

    # -- broker --------------------------------------------------------------

    def broker_script(self, verb: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [str(ROOT / "scripts" / "activemq.sh"), verb],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=180,
        )
        if check and result.returncode != 0:
            raise BenchError(f"activemq.sh {verb} failed:\n{result.stdout}\n{result.stderr}")
        return result

    def start_broker(self) -> float:
        """Stop a leftover bench broker, wipe its data, start it; returns the start time in seconds."""
        self.broker_script("stop", check=False)
        if port_in_use(BROKER_PORT):
            raise BenchError(f"port {BROKER_PORT} is taken by a process that is not the bench broker")
        shutil.rmtree(BROKER_HOME / "data", ignore_errors=True)
        started = time.monotonic()
        self._broker_started = True
        self.broker_script("start")
        return time.monotonic() - started

    def component(self) -> Any:
        from ase_engine.config import ComponentConfig

        return ComponentConfig(broker_url=f"127.0.0.1:{BROKER_PORT}", receipt_timeout=30)

    def stomp(self, name: str = "bench") -> Any:
        from ase_engine.broker import StompConnection

        conn = StompConnection(self.component(), name=f"{name}-{os.getpid()}")
        conn.connect(timeout=10)
        return conn

    def depth(self, queue_name: str) -> int | None:
        """Queue depth from the statistics plugin (``StompConnection.queue_stats``)."""
        conn = self.stomp("depth")
        try:
            stats = conn.queue_stats([queue_name], timeout=5)[queue_name]
        finally:
            conn.disconnect()
        return None if stats is None else int(stats["size"])

    # -- Django side ---------------------------------------------------------

    def manage(self, *args: str, timeout: float = 180) -> str:
        result = subprocess.run(
            [PY, "manage.py", *args], cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=timeout
        )
        if result.returncode != 0:
            raise BenchError(f"manage.py {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")
        return result.stdout

    def migrate(self) -> None:
        self.manage("migrate", "--noinput")

    def use_postgresql(self, url: str) -> None:
        """Keep the Django database in PostgreSQL at ``url`` instead of the bench's SQLite file: the
        database named there is dropped and created empty (call before ``migrate``)."""
        import psycopg

        name = url.rsplit("/", 1)[1]
        if not name.startswith("ase_bench"):
            raise BenchError(f"refusing to recreate database '{name}': its name must start with ase_bench")
        with psycopg.connect(url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            admin.execute(f'CREATE DATABASE "{name}"')
        self.env["DATABASE_URL"] = url

    def deploy(
        self, service: str, queue: str, target_url: str, *, posting: bool = True, sending: bool = True, extra: str = ""
    ) -> str:
        path = self.data_dir / f"{service}.jbi.xml"
        path.write_text(descriptor(service, queue, target_url, posting=posting, sending=sending, extra=extra))
        return self.manage("ase", "deploy", str(path)).strip()

    # -- services --------------------------------------------------------------

    def wait_http(self, name: str, url: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check_alive(name)
            try:
                with urllib.request.urlopen(url, timeout=2) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.2)
        raise BenchError(f"{name}: {url} did not answer 200 within {timeout:g}s:\n{self.log_text(name)[-3000:]}")

    def wait_log(self, name: str, text: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check_alive(name)
            if text in self.log_text(name):
                return
            time.sleep(0.2)
        raise BenchError(f"{name}: '{text}' not in its log within {timeout:g}s:\n{self.log_text(name)[-3000:]}")

    def start_web(
        self,
        workers: int = 2,
        name: str = "web",
        port: int = WEB_PORT,
        env: dict[str, str] | None = None,
        wrap: Sequence[str] = (),
        timeout: float = 60.0,
    ) -> None:
        """The web tier exactly as scripts/up.sh starts it (uvicorn, 2 workers); several run side by side
        under different ``name`` and ``port``, each with its own ``env`` (default: the stack's). ``wrap``:
        a command that runs it (a profiler); ``timeout``: seconds for it to answer."""
        if port_in_use(port):
            raise BenchError(f"port {port} is already in use")
        self.spawn(
            name,
            [
                *wrap,
                PY,
                "-m",
                "uvicorn",
                "console.asgi:application",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--workers",
                str(workers),
                "--no-access-log",
            ],
            env,
        )
        self.wait_http(name, f"http://127.0.0.1:{port}/healthz", timeout)

    def start_worker(
        self,
        name: str = "worker",
        node: str = "ase-bench",
        wait: bool = True,
        env: dict[str, str] | None = None,
        wrap: Sequence[str] = (),
    ) -> None:
        """A Celery worker hosting the sending process, with scripts/up.sh's command line; ``env`` and
        ``wrap`` as for ``start_web``."""
        self.spawn(
            name,
            [
                *wrap,
                PY,
                "-m",
                "celery",
                "-A",
                "console",
                "worker",
                "--pool",
                "threads",
                "--concurrency",
                "4",
                "-n",
                f"{node}@%h",
                "--loglevel",
                "INFO",
            ],
            env,
        )
        if wait:
            self.wait_log(name, "ready.")

    def cpu_seconds(self, name: str) -> float:
        """User + system CPU time of every live process in the process group of ``name``."""
        proc = self.procs.get(name)
        if proc is None:
            return 0.0
        tick = os.sysconf("SC_CLK_TCK")
        total = 0.0
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                fields = (Path("/proc") / entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == proc.pid:  # process group id (the leader ran setsid)
                total += (int(fields[11]) + int(fields[12])) / tick
        return total

    def start_target(self) -> str:
        """The benchmark target (bench/target_app.py) under uvicorn, one process."""
        if port_in_use(TARGET_PORT):
            raise BenchError(f"port {TARGET_PORT} is already in use")
        self.spawn(
            "target",
            [
                PY,
                "-m",
                "uvicorn",
                "bench.target_app:app",
                "--host",
                "127.0.0.1",
                "--port",
                str(TARGET_PORT),
                "--no-access-log",
                "--log-level",
                "warning",
            ],
        )
        base = f"http://127.0.0.1:{TARGET_PORT}"
        self.wait_http("target", f"{base}/_stats")
        return base


def run(main: Callable[[], int]) -> None:
    """Run a benchmark's ``main`` as a script: a clear message and exit status on failure or Ctrl-C."""
    try:
        sys.exit(main())
    except BenchError as exc:
        print(f"\nBENCHMARK FAILED: {exc}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        sys.exit(130)
