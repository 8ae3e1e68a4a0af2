#!/usr/bin/env python3
"""Demo target service for ASE: a tiny HTTP server that ASE forwards to.

    python demo/target.py [--host 127.0.0.1] [--port 9000]

Any request (any method) is answered by what its path contains:

    "fault"  -> 400 {"fault": "demo business fault"}   (a business fault)
    "error"  -> 503 {"error": "demo unavailable"}      (retried by ASE)
    "slow"   -> sleeps ?seconds= (default 5), then 200 {"ok": true}
    else     -> 200 {"ok": true}

GET /received returns the last 100 requests (newest last) as JSON;
DELETE /received forgets them. Each request is logged to stdout.
Standard library only; stops cleanly on SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
import time
from collections import deque
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType
from typing import Any
from urllib.parse import parse_qs, urlsplit

log = logging.getLogger("demo-target")

MAX_RECEIVED = 100
# Request headers kept in /received (lower-case); X-* headers are kept too.
KEPT_HEADERS = {"content-type", "content-length", "user-agent", "host", "accept"}
MAX_SLOW_SECONDS = 600.0


class Received:
    """Thread-safe ring buffer of the last requests."""

    def __init__(self, size: int = MAX_RECEIVED) -> None:
        self._items: deque[dict[str, Any]] = deque(maxlen=size)
        self._lock = threading.Lock()

    def add(self, item: dict[str, Any]) -> None:
        with self._lock:
            self._items.append(item)

    def snapshot(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._items)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


class TargetServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False  # don't wait for in-flight (slow) requests on shutdown
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int]) -> None:
        super().__init__(address, TargetHandler)
        self.received = Received()


class TargetHandler(BaseHTTPRequestHandler):
    server: TargetServer
    protocol_version = "HTTP/1.1"
    server_version = "ASEDemoTarget/1.0"

    # -- plumbing ---------------------------------------------------------
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass  # we log one line per request ourselves

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            chunks: list[bytes] = []
            while True:
                size_line = self.rfile.readline(65537)
                size = int(size_line.split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline(65537)  # CRLF after the chunk
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def _send_json(self, status: int, payload: Any) -> None:
        data = json.dumps(payload, indent=None).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    # -- requests ---------------------------------------------------------
    def _handle(self) -> None:
        body = self._read_body()
        url = urlsplit(self.path)
        path = url.path

        if path == "/received" and self.command == "GET":
            self._send_json(200, self.server.received.snapshot())
            return
        if path == "/received" and self.command == "DELETE":
            self.server.received.clear()
            self._send_json(200, {"ok": True})
            return

        status: int
        payload: dict[str, Any]
        if "fault" in path:
            status, payload = 400, {"fault": "demo business fault"}
        elif "error" in path:
            status, payload = 503, {"error": "demo unavailable"}
        elif "slow" in path:
            seconds = _seconds(parse_qs(url.query).get("seconds", ["5"])[0])
            time.sleep(seconds)
            status, payload = 200, {"ok": True, "slept": seconds}
        else:
            status, payload = 200, {"ok": True}

        self.server.received.add(
            {
                "time": datetime.now(UTC).isoformat(),
                "method": self.command,
                "path": self.path,
                "body": body.decode("utf-8", errors="replace"),
                "headers": {
                    k: v for k, v in self.headers.items() if k.lower() in KEPT_HEADERS or k.lower().startswith("x-")
                },
                "status": status,
            }
        )
        log.info("%s %s %d bytes -> %d", self.command, self.path, len(body), status)
        self._send_json(status, payload)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _handle


def _seconds(raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        return 5.0
    return min(max(value, 0.0), MAX_SLOW_SECONDS)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9000)
    args = parser.parse_args(argv)

    logging.basicConfig(
        stream=sys.stdout,
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    server = TargetServer((args.host, args.port))
    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        log.info("signal %d: shutting down", signum)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    thread = threading.Thread(target=server.serve_forever, name="http", daemon=True)
    thread.start()
    log.info("demo target listening on http://%s:%d/", args.host, args.port)
    try:
        while not stop.wait(0.5):
            pass
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
    log.info("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
