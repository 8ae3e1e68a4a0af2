#!/usr/bin/env bash
# scripts/down.sh — stop everything scripts/up.sh started (Celery beat, the
# Celery worker, the web server, the demo target; then ActiveMQ). Each gets
# SIGTERM, up to ASE_STOP_TIMEOUT seconds (default 30), then SIGKILL.
# Data under var/ is kept.
#
# Environment: ASE_STOP_TIMEOUT, ASE_BROKER_PORT (default 61613).
set -euo pipefail

# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$REPO"

STOP_TIMEOUT="${ASE_STOP_TIMEOUT:-30}"

echo "== services"
for ((i = ${#SERVICES[@]} - 1; i >= 0; i--)); do
    stop_service "${SERVICES[i]}" "$STOP_TIMEOUT"
done

echo "== ActiveMQ"
./scripts/activemq.sh stop
