#!/usr/bin/env bash
# scripts/up.sh — bring the whole ASE product up on this machine, with the demo
# service units and the demo target, and print the console URL and login.
#
# Installs what is missing (scripts/bootstrap.sh), starts ActiveMQ
# (scripts/activemq.sh), migrates the SQLite database under var/, runs
# `manage.py ase_demo`, then starts in the background (pid files in var/run,
# logs in var/log): the demo target, the web server (uvicorn), a Celery worker
# and Celery beat. Idempotent: a running service is not started twice.
# Stop everything with scripts/down.sh.
#
# Environment:
#   ASE_HTTP_PORT          console/web port (default 8000)
#   ASE_WEB_WORKERS        uvicorn workers (default 2)
#   ASE_DEMO_TARGET_PORT   demo target port (default 9000)
#   ASE_BROKER_PORT        ActiveMQ STOMP port (default 61613)
#   ASE_DATA_DIR           data folder, SQLite file (default <repo>/var)
#   ASE_HEALTH_TIMEOUT     seconds to wait for /healthz (default 60)
set -euo pipefail

# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$REPO"

HTTP_PORT="${ASE_HTTP_PORT:-8000}"
WEB_WORKERS="${ASE_WEB_WORKERS:-2}"
TARGET_PORT="${ASE_DEMO_TARGET_PORT:-9000}"
HEALTH_TIMEOUT="${ASE_HEALTH_TIMEOUT:-60}"
PY="$REPO/.venv/bin/python"

export DJANGO_SETTINGS_MODULE=console.settings
export ASE_BROKER_PORT="${ASE_BROKER_PORT:-61613}"
export ASE_DATA_DIR="${ASE_DATA_DIR:-$VAR_DIR}"
export ASE_BROKER_HOME="${ASE_BROKER_HOME:-$VAR_DIR/activemq}"
# Where the demo service units should point (read by manage.py ase_demo if it
# wants to).
export ASE_DEMO_TARGET_URL="http://127.0.0.1:$TARGET_PORT"
export PYTHONUNBUFFERED=1

mkdir -p "$ASE_DATA_DIR" "$RUN_DIR" "$LOG_DIR"

echo "== install what is missing"
./scripts/bootstrap.sh

echo "== ActiveMQ"
./scripts/activemq.sh start

echo "== database and demo setup"
"$PY" manage.py migrate --noinput
"$PY" manage.py collectstatic --noinput -v 0
demo_out="$LOG_DIR/ase_demo.out"
"$PY" manage.py ase_demo --target "$ASE_DEMO_TARGET_URL" | tee "$demo_out"

echo "== services"
services_started=$SECONDS
start_service target "$PY" demo/target.py --port "$TARGET_PORT"
start_service web "$PY" -m uvicorn console.asgi:application \
    --host 127.0.0.1 --port "$HTTP_PORT" --workers "$WEB_WORKERS" --no-access-log
start_service worker "$PY" -m celery -A console worker \
    --pool threads --concurrency 4 -n 'ase1@%h' --loglevel INFO
start_service beat "$PY" -m celery -A console beat \
    --loglevel INFO --schedule "$RUN_DIR/celerybeat-schedule"

echo "== waiting for http://127.0.0.1:$HTTP_PORT/healthz"
deadline=$((SECONDS + HEALTH_TIMEOUT))
until "$PY" - "http://127.0.0.1:$HTTP_PORT/healthz" <<'PY' 2>/dev/null; do
import sys, urllib.request
with urllib.request.urlopen(sys.argv[1], timeout=3) as r:
    sys.exit(0 if r.status == 200 else 1)
PY
    if [[ -z "$(service_pid web)" ]] || ((SECONDS >= deadline)); then
        echo "up: the console did not answer /healthz with 200 within ${HEALTH_TIMEOUT}s" >&2
        echo "----- last lines of var/log/web.log -----" >&2
        tail -n 40 "$LOG_DIR/web.log" >&2 || true
        echo "(scripts/down.sh stops what was started)" >&2
        exit 1
    fi
    sleep 0.5
done

# A service that dies on start-up (bad settings, port taken) shows by now.
while ((SECONDS - services_started < 3)); do sleep 0.5; done
dead=0
for name in "${SERVICES[@]}"; do
    if [[ -z "$(service_pid "$name")" ]]; then
        dead=1
        echo "up: $name is not running; last lines of var/log/$name.log:" >&2
        tail -n 20 "$LOG_DIR/$name.log" >&2 || true
    fi
done
if ((dead)); then
    echo "up: some services died (scripts/down.sh stops the rest)" >&2
    exit 1
fi

base="http://127.0.0.1:$HTTP_PORT"
cat <<EOF

ASE is up.

  Console:      $base/
  Admin login:  as printed by manage.py ase_demo:
$(sed 's/^/                /' "$demo_out")
  Demo target:  $ASE_DEMO_TARGET_URL/  (GET /received lists what it got)
  Broker:       STOMP on 127.0.0.1:$ASE_BROKER_PORT
  Logs:         $LOG_DIR/*.log, $ASE_BROKER_HOME/activemq.log
  Stop:         ./scripts/down.sh

Try it:

  curl -i -X POST -H 'Content-Type: application/json' -d '{"order": 1}' $base/ase/OrderServiceAssured/

  # lands in the fault area:
  curl -i -X POST -H 'Content-Type: application/json' -d '{"order": 1}' $base/ase/FaultyServiceAssured/
EOF
