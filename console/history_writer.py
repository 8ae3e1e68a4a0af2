"""The history writer process: stores a process's history events in SQLite outside that process.

SQLite runs inside the process that calls it. In a Celery worker, among a dozen busy threads, the
recorder thread spent 20-49 us of CPU per event on it where a quiet process spends 8-10 (per-thread
CPU from /proc; docs/BENCHMARKS.md, "Where the time goes, fifth pass"). With
``ASE_HISTORY_WRITER=process``, the default on SQLite, the recorder thread hands each batch to a
child process instead: ``python -m console.history_writer DATABASE TABLE COLUMNS TIMEOUT``, one per
recording process. Beside a worker, the child and the recorder thread together spent 27-34 us per
event.

The protocol on the child's standard input and output is pickle, one object per step: the parent
writes a batch (a list of tuples of plain values, in COLUMNS' order, ready for SQLite) and reads
the answer ``(stored, error)``: the batch is committed (``error`` is None) or none of it is. The
child has no Django. It opens the database as the project's settings do (a busy timeout, IMMEDIATE
transactions; the database is in WAL mode already) and inserts each batch with one ``executemany``
in one transaction. It ends when its standard input closes: when its parent closes it, exits or is
killed (it ignores SIGINT and SIGTERM, which its parent's process group receives, so that the parent's
last batch, written at exit, is stored).
"""

from __future__ import annotations

import pickle
import signal
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


class HistoryWriterError(RuntimeError):
    """A batch was not stored (the reason is the message): the child refused it or has ended."""


class WriterProcess:
    """The parent's side: one child process, started on the first batch and again after it ended."""

    def __init__(self, database: str, table: str, columns: list[str], timeout: float) -> None:
        self.command = [
            sys.executable,
            "-m",
            "console.history_writer",
            str(Path(database).resolve()),
            table,
            ",".join(columns),
            str(timeout),
        ]
        self._child: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()

    @property
    def pid(self) -> int | None:
        return self._child.pid if self._child is not None else None

    def store(self, rows: list[tuple[object, ...]]) -> int:
        """Store ``rows`` in one transaction of the child; returns how many, or raises ``HistoryWriterError``."""
        with self._lock:
            child = self._child
            if child is not None and child.poll() is not None:
                _close_pipes(child)  # ended between two batches (and reaped by poll)
                child = None
            if child is None:
                child = self._child = subprocess.Popen(
                    self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=ROOT, close_fds=True
                )
            assert child.stdin is not None and child.stdout is not None
            try:
                pickle.dump(rows, child.stdin, protocol=pickle.HIGHEST_PROTOCOL)
                child.stdin.flush()
                stored, error = pickle.load(child.stdout)
            except (OSError, EOFError, pickle.UnpicklingError):
                self._child = None
                child.kill()
                code = child.wait()
                _close_pipes(child)
                raise HistoryWriterError(f"the history writer process ended (exit code {code})") from None
        if error is not None:
            raise HistoryWriterError(error)
        return int(stored)

    def close(self, timeout: float = 5.0) -> None:
        """Close the child's input (it ends after the batch it is storing) and wait for it."""
        with self._lock:
            child, self._child = self._child, None
        if child is None:
            return
        assert child.stdin is not None and child.stdout is not None
        try:
            child.stdin.close()
        except OSError:
            pass
        try:
            child.wait(timeout)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
        child.stdout.close()


def _close_pipes(child: subprocess.Popen[bytes]) -> None:
    """Close the parent's ends of an ended child's pipes (what is left unwritten in them is lost with it)."""
    for pipe in (child.stdin, child.stdout):
        if pipe is not None:
            try:
                pipe.close()
            except OSError:
                pass


def serve(database: str, table: str, columns: list[str], timeout: float) -> int:
    """The child's side: store every batch read from standard input until it closes.

    SIGINT and SIGTERM sent to the process group (Ctrl-C, a service manager stopping the web tier) are
    the parent's to handle: the child goes on until the parent has written its last batch and exited.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    db = sqlite3.connect(database, timeout=timeout, isolation_level=None)
    sql = f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})"
    source, answers = sys.stdin.buffer, sys.stdout.buffer
    while True:
        try:
            rows = pickle.load(source)
        except EOFError:
            db.close()
            return 0
        try:
            db.execute("BEGIN IMMEDIATE")
            db.executemany(sql, rows)
            db.execute("COMMIT")
            answer: tuple[int, str | None] = (len(rows), None)
        except sqlite3.Error as exc:
            if db.in_transaction:
                db.execute("ROLLBACK")
            answer = (0, f"{type(exc).__name__}: {exc}")
        pickle.dump(answer, answers, protocol=pickle.HIGHEST_PROTOCOL)
        answers.flush()


if __name__ == "__main__":
    database, table, columns, timeout = sys.argv[1:5]
    sys.exit(serve(database, table, columns.split(","), float(timeout)))
