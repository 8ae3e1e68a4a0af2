"""The "raw stomp.py loop" baseline of bench/delivery.py (run as its own process).

    python bench/raw_consumer.py --port 61653 --queue Q --url URL --expect N [--prefetch 8] [--threads 8]

One stomp.py ``Connection12`` (``auto_decode=False``) subscribed with
``ack:client-individual`` and ``activemq.prefetchSize`` = prefetch; the
receiver thread puts each MESSAGE on an in-process queue; ``threads`` worker
threads take one, POST its body with a shared urllib3 pool (the HTTP client ASE uses), and ACK it
on a 2xx (NACK otherwise). Exits after ``expect`` ACKs (or ``--timeout``),
with a DISCONNECT that waits for the broker's receipt, so every ACK is in.
"""

from __future__ import annotations

import argparse
import queue
import sys
import threading
import time
from typing import Any

import stomp
import urllib3


class _Inbox(stomp.ConnectionListener):
    def __init__(self) -> None:
        self.frames: queue.Queue[Any] = queue.Queue()
        self.error: str | None = None

    def on_message(self, frame: Any) -> None:
        self.frames.put(frame)

    def on_error(self, frame: Any) -> None:
        self.error = frame.headers.get("message") or "ERROR frame"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--queue", required=True)
    parser.add_argument("--url", required=True)
    parser.add_argument("--expect", type=int, required=True)
    parser.add_argument("--prefetch", type=int, default=8)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--timeout", type=float, default=240.0)
    args = parser.parse_args()

    conn = stomp.Connection12([("127.0.0.1", args.port)], auto_decode=False, heartbeats=(0, 0))
    inbox = _Inbox()
    conn.set_listener("inbox", inbox)
    conn.connect(wait=True)
    client = urllib3.PoolManager(maxsize=16, timeout=urllib3.Timeout(10.0), retries=False)
    acked = [0]
    failed = [0]
    lock = threading.Lock()
    done = threading.Event()

    def work() -> None:
        while not done.is_set():
            try:
                frame = inbox.frames.get(timeout=0.2)
            except queue.Empty:
                continue
            headers = frame.headers
            try:
                response = client.request(
                    "POST",
                    args.url,
                    body=frame.body,
                    headers={
                        "Content-Type": headers.get("content-type", "application/octet-stream"),
                        "X-Bench-Id": headers.get("bench-id", ""),
                    },
                )
                ok = 200 <= response.status < 300
            except urllib3.exceptions.HTTPError:
                ok = False
            if ok:
                conn.ack(headers["ack"])
                with lock:
                    acked[0] += 1
                    if acked[0] >= args.expect:
                        done.set()
            else:
                conn.nack(headers["ack"])
                with lock:
                    failed[0] += 1

    workers = [threading.Thread(target=work, daemon=True, name=f"raw-{i}") for i in range(args.threads)]
    for worker in workers:
        worker.start()
    conn.subscribe(
        f"/queue/{args.queue}", id="raw", ack="client-individual", headers={"activemq.prefetchSize": str(args.prefetch)}
    )
    finished = done.wait(args.timeout)
    done.set()
    for worker in workers:
        worker.join(15)
    conn.disconnect(receipt=f"bye-{time.monotonic_ns()}")
    client.close()
    print(f"raw consumer: acked={acked[0]} failed={failed[0]} error={inbox.error}", flush=True)
    return 0 if finished else 1


if __name__ == "__main__":
    sys.exit(main())
