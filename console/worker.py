"""The sending process inside a Celery worker: a worker bootstep and a remote-control command.

Each worker process is one component instance (the spec's "the component can
be instantiated several times"): starting N workers gives N consumers on the
same queues. The bootstep starts the engine's ``SendingProcess`` when the
worker starts and stops it (waiting for in-flight calls) when it stops. A
``Syncer`` thread re-reads which units have their sending process started,
applies it, refreshes the hot-updatable runtime parameters and writes this
instance's heartbeat.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from typing import Any

from celery import bootsteps
from celery.worker.control import control_command
from django.conf import settings
from django.db import close_old_connections
from django.utils import timezone

from ase_engine.sending import SendingProcess

log = logging.getLogger("ase.worker")

_syncer: Syncer | None = None


class Syncer:
    def __init__(self, process: SendingProcess, interval: float) -> None:
        self.process = process
        self.interval = interval
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ase-sync", daemon=True)
        self.started_at = timezone.now()

    def start(self) -> None:
        self.sync()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(self.interval + 5)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.sync()
            except Exception as exc:  # noqa: BLE001 - the loop must survive a database outage
                log.error("sync of instance %s failed: %s: %s", self.process.instance, type(exc).__name__, exc)

    def sync(self) -> dict[str, Any]:
        """Apply the shared state to this instance; returns what stopping left in flight."""
        from console.component import component_config
        from console.models import ServiceUnit

        with self._lock:
            close_old_connections()
            self.process.component = component_config()
            units = [u.to_config() for u in ServiceUnit.objects.filter(sending_started=True)]
            reports = self.process.apply(units)
            self.heartbeat()
            return {
                "instance": self.process.instance,
                "sending": self.process.services,
                "left_in_flight": {r.service: r.left_in_flight for r in reports},
            }

    def heartbeat(self) -> None:
        from console.models import WorkerInstance

        now = timezone.now()
        WorkerInstance.objects.update_or_create(
            name=self.process.instance,
            defaults={
                "hostname": socket.gethostname(),
                "pid": os.getpid(),
                "started_at": self.started_at,
                "last_heartbeat": now,
                "connection_status": self.process.connection_status,
                "last_connection_error": self.process.last_connection_error or "",
                "sending_services": self.process.services,
                "in_flight": self.process.in_flight(),
            },
        )


class SendingProcessStep(bootsteps.StartStopStep):
    """Runs the sending process for the lifetime of the worker."""

    def start(self, worker: Any) -> None:
        global _syncer
        from console.component import component_config
        from console.history import recorder
        from console.protection import ordered_groups, protection

        process = SendingProcess(
            component_config(),
            recorder(),
            concurrency=settings.ASE_SENDING_CONCURRENCY,
            instance=worker.hostname,
            protection=protection(worker.hostname),
            groups=ordered_groups(),
        )
        process.start()
        _syncer = Syncer(process, settings.ASE_WORKER_SYNC_INTERVAL)
        _syncer.start()

    def stop(self, worker: Any) -> None:
        global _syncer
        syncer, _syncer = _syncer, None
        if syncer is None:
            return
        syncer.stop()
        syncer.process.stop()
        from console.history import recorder
        from console.models import WorkerInstance

        try:
            WorkerInstance.objects.filter(name=syncer.process.instance).update(
                connection_status="stopped", sending_services=[], in_flight={}
            )
            recorder().flush()
        except Exception as exc:  # noqa: BLE001 - shutting down; report and go on
            log.warning("instance %s: final state not saved: %s", syncer.process.instance, exc)


@control_command(args=[("wait", bool)], signature="[wait=False]")
def ase_sync(state: Any, wait: bool = False) -> dict[str, Any]:
    """Remote control: apply the shared process state now (reply once stopped units drained)."""
    syncer = _syncer
    if syncer is None:
        return {"error": "no sending process in this worker"}
    try:
        return syncer.sync()
    except Exception as exc:  # noqa: BLE001 - answer the caller; the periodic sync will try again
        log.error("instance %s: sync failed: %s: %s", syncer.process.instance, type(exc).__name__, exc)
        return {"instance": syncer.process.instance, "error": f"{type(exc).__name__}: {exc}"}
