# scripts/common.sh — helpers shared by scripts/up.sh and scripts/down.sh
# (sourced, not run). Each background service runs in its own session/process
# group (setsid), has a pid file var/run/<name>.pid and a log var/log/<name>.log.
# shellcheck shell=bash

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# ASE_VAR_DIR moves all state (pids, logs, data, broker) elsewhere, e.g. for a test run.
VAR_DIR="${ASE_VAR_DIR:-$REPO/var}"
RUN_DIR="$VAR_DIR/run"
LOG_DIR="$VAR_DIR/log"

# The services up.sh starts, in start order: name and a string its command
# line contains (so a stale pid file whose pid was reused is not trusted).
# shellcheck disable=SC2034  # used by up.sh and down.sh
SERVICES=(target web worker beat)
declare -A SERVICE_MARKER=(
    [target]="demo/target.py"
    [web]="uvicorn console.asgi:application"
    [worker]="celery -A console worker"
    [beat]="celery -A console beat"
)

# True if pid $1 is a live process (zombies count as dead: PID 1 on these
# machines may not reap orphans).
pid_alive() {
    local pid="$1" line state
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    read -r line 2>/dev/null <"/proc/$pid/stat" || return 1
    read -r state _ <<<"${line##*) }"
    [[ "$state" != Z ]]
}

# True if any live process is in process group $1.
group_alive() {
    local pgid="$1" f line state pgrp
    for f in /proc/[0-9]*/stat; do
        read -r line 2>/dev/null <"$f" || continue
        read -r state _ pgrp _ <<<"${line##*) }"
        if [[ "$pgrp" == "$pgid" && "$state" != Z ]]; then
            return 0
        fi
    done
    return 1
}

# Pid of service $1 if it is running (pid file + command line check), else "".
service_pid() {
    local name="$1" pidfile="$RUN_DIR/$1.pid" pid
    [[ -f "$pidfile" ]] || return 0
    pid="$(tr -dc '0-9' <"$pidfile")"
    if pid_alive "$pid" \
        && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "${SERVICE_MARKER[$name]}"; then
        echo "$pid"
    fi
}

# Start service $1 with the command "${@:2}" unless it is already running.
start_service() {
    local name="$1" pid
    shift
    pid="$(service_pid "$name")"
    if [[ -n "$pid" ]]; then
        echo "  $name: already running (pid $pid)"
        return 0
    fi
    mkdir -p "$RUN_DIR" "$LOG_DIR"
    echo "=== $(date -Is) starting: $*" >>"$LOG_DIR/$name.log"
    setsid "$@" >>"$LOG_DIR/$name.log" 2>&1 </dev/null &
    echo $! >"$RUN_DIR/$name.pid"
    echo "  $name: started (pid $!), log var/log/$name.log"
}

# Stop service $1: SIGTERM to its process group, wait up to $2 s, then SIGKILL.
stop_service() {
    local name="$1" timeout="$2" pid deadline
    pid="$(service_pid "$name")"
    if [[ -z "$pid" ]]; then
        echo "  $name: not running"
        rm -f "$RUN_DIR/$name.pid"
        return 0
    fi
    # setsid made the service its own process group leader: pgid == pid.
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    deadline=$((SECONDS + timeout))
    while group_alive "$pid"; do
        if ((SECONDS >= deadline)); then
            echo "  $name: still running after ${timeout}s, SIGKILL"
            kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
            sleep 0.5
            break
        fi
        sleep 0.2
    done
    rm -f "$RUN_DIR/$name.pid"
    echo "  $name: stopped (was pid $pid)"
}
