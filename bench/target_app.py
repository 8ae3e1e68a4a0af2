"""The benchmark target: a bare ASGI app that answers 200 to every POST and counts them.

    uvicorn bench.target_app:app --port 8654      (one process: the counters live in memory)

- ``POST <path>`` (any path not starting with ``/_``): 200 ``{"ok":true}``;
  recorded per path with its arrival time and its message id (the
  ``X-ASE-Message-Id`` header ASE sends, or ``X-Bench-Id`` for the baselines),
  so duplicates are seen and the time of the Nth *distinct* message is known.
- ``GET /_stats?path=/x&n=5000``: ``{"count", "distinct", "first", "nth", "last"}``
  (wall-clock ``time.time()`` seconds; ``nth`` is when the n-th distinct id arrived).
- ``POST /_reset``: forget everything.

No framework, no logging: as fast a target as this machine can run in Python,
and the same one for every variant.
"""

from __future__ import annotations

import json
import time
from typing import Any
from urllib.parse import parse_qs

_OK = b'{"ok":true}'
_HEADERS = [(b"content-type", b"application/json"), (b"content-length", str(len(_OK)).encode())]
_ID_HEADERS = (b"x-ase-message-id", b"x-bench-id")


class _PathStats:
    __slots__ = ("count", "seen", "distinct_times", "first", "last")

    def __init__(self) -> None:
        self.count = 0
        self.seen: set[bytes] = set()
        self.distinct_times: list[float] = []
        self.first = 0.0
        self.last = 0.0


_stats: dict[str, _PathStats] = {}


async def _send(send: Any, status: int, body: bytes, headers: list[tuple[bytes, bytes]] | None = None) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": headers
            or [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["type"] != "http":
        return
    more = True
    while more:
        message = await receive()
        more = message.get("more_body", False)
    path: str = scope["path"]
    method: str = scope["method"]
    if method == "POST" and not path.startswith("/_"):
        now = time.time()
        stats = _stats.get(path)
        if stats is None:
            stats = _stats[path] = _PathStats()
            stats.first = now
        stats.count += 1
        stats.last = now
        ident = b""
        for name, value in scope["headers"]:
            if name in _ID_HEADERS:
                ident = value
                break
        if ident not in stats.seen:
            stats.seen.add(ident)
            stats.distinct_times.append(now)
        await _send(send, 200, _OK, _HEADERS)
        return
    if path == "/_stats":
        query = parse_qs(scope.get("query_string", b"").decode())
        wanted = query.get("path", [""])[0]
        n = int(query.get("n", ["0"])[0] or 0)
        stats = _stats.get(wanted)
        if stats is None:
            body = {"count": 0, "distinct": 0, "first": None, "nth": None, "last": None}
        else:
            times = stats.distinct_times
            body = {
                "count": stats.count,
                "distinct": len(stats.seen),
                "first": stats.first,
                "nth": times[n - 1] if 0 < n <= len(times) else None,
                "last": stats.last,
            }
        await _send(send, 200, json.dumps(body).encode())
        return
    if path == "/_reset" and method == "POST":
        _stats.clear()
        await _send(send, 200, _OK, _HEADERS)
        return
    await _send(send, 404, b'{"error":"not found"}')
