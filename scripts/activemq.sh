#!/usr/bin/env bash
# scripts/activemq.sh — run a private ActiveMQ broker (STOMP only) for ASE.
#
#   scripts/activemq.sh start|stop|status|kill|wait
#
#   start   start the broker in the background (nothing if one already answers
#           STOMP on the port), then `wait`
#   wait    poll until the broker answers a real STOMP CONNECT; on timeout print
#           the log tail and exit 1
#   stop    SIGTERM, wait up to ASE_BROKER_STOP_TIMEOUT s, then SIGKILL
#   kill    SIGKILL at once (crash tests)
#   status  exit 0 if answering, 1 if the process is up but not answering,
#           3 if not running
#
# Environment:
#   ASE_BROKER_PORT           STOMP port (default 61613)
#   ASE_BROKER_HOME           broker home: pid file, logs, KahaDB
#                             (default <repo>/var/activemq; any directory works)
#   ASE_BROKER_START_TIMEOUT  seconds `wait` waits (default 90)
#   ASE_BROKER_STOP_TIMEOUT   seconds `stop` waits before SIGKILL (default 30)
#   ASE_BROKER_JAVA_OPTS      JVM heap options (default "-Xms256m -Xmx512m")
#
# Debian's /usr/bin/activemq launcher is not used: it su's to user activemq
# and drops the environment the broker configuration reads. We run the
# Debian jars with java directly, with deploy/activemq as activemq.conf.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CONF_DIR="$REPO/deploy/activemq"
AMQ_HOME=/usr/share/activemq

PORT="${ASE_BROKER_PORT:-61613}"
BROKER_HOME="${ASE_BROKER_HOME:-${ASE_VAR_DIR:-$REPO/var}/activemq}"
START_TIMEOUT="${ASE_BROKER_START_TIMEOUT:-90}"
STOP_TIMEOUT="${ASE_BROKER_STOP_TIMEOUT:-30}"
JAVA_OPTS="${ASE_BROKER_JAVA_OPTS:--Xms256m -Xmx512m}"

# Absolute path, so the pid file and the process's -Dactivemq.base match
# however the caller spelled it.
mkdir -p "$BROKER_HOME"
BROKER_HOME="$(cd "$BROKER_HOME" && pwd)"
PIDFILE="$BROKER_HOME/activemq.pid"
DATA_DIR="$BROKER_HOME/data"
LOG_FILE="$BROKER_HOME/activemq.log"
CONSOLE_LOG="$BROKER_HOME/console.log"

say() { echo "activemq[$PORT]: $*"; }
err() { echo "activemq[$PORT]: $*" >&2; }

# True if the broker answers a real STOMP CONNECT with CONNECTED.
stomp_answers() {
    python3 - "$PORT" <<'PY' 2>/dev/null
import socket, sys
try:
    with socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=2) as s:
        s.settimeout(3)
        s.sendall(b"CONNECT\naccept-version:1.2\nhost:localhost\n\n\0")
        data = b""
        while b"\0" not in data and len(data) < 65536:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
        ok = data.lstrip(b"\r\n").startswith(b"CONNECTED")
        if ok:
            s.sendall(b"DISCONNECT\n\n\0")
except OSError:
    sys.exit(1)
sys.exit(0 if ok else 1)
PY
}

# True if $1 is a live process (a zombie counts as dead: PID 1 here may not
# reap the orphans we leave behind).
pid_alive() {
    local pid="$1" state
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    state="$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null || true)"
    [[ -n "$state" && "$state" != Z ]]
}

# True if $1 is a live process of *this* broker home.
is_our_broker() {
    local pid="$1"
    pid_alive "$pid" || return 1
    tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null | grep -qxF -- "-Dactivemq.base=$BROKER_HOME"
}

# Print the pid of this home's broker (pid file first, else a /proc scan, which
# finds a broker started by hand or whose pid file was lost). Empty if none.
broker_pid() {
    local pid p
    if [[ -f "$PIDFILE" ]]; then
        pid="$(tr -dc '0-9' <"$PIDFILE")"
        if is_our_broker "$pid"; then echo "$pid"; return; fi
    fi
    for p in /proc/[0-9]*; do
        pid="${p#/proc/}"
        [[ "$(cat "$p/comm" 2>/dev/null || true)" == java ]] || continue
        if is_our_broker "$pid"; then echo "$pid"; return; fi
    done
}

log_tail() {
    local f
    for f in "$LOG_FILE" "$CONSOLE_LOG"; do
        if [[ -f "$f" ]]; then
            echo "----- last lines of $f -----" >&2
            tail -n 40 "$f" >&2
        fi
    done
}

ensure_installed() {
    if ! command -v java >/dev/null 2>&1 || [[ ! -f "$AMQ_HOME/bin/activemq.jar" ]] \
        || [[ ! -f /usr/share/java/xstream.jar ]]; then
        say "java or ActiveMQ missing: running bootstrap --packages-only"
        "$REPO/scripts/bootstrap.sh" --packages-only
    fi
}

cmd_wait() {
    local deadline=$((SECONDS + START_TIMEOUT)) pid
    while ((SECONDS < deadline)); do
        if stomp_answers; then
            say "answering STOMP (pid $(broker_pid || true))"
            return 0
        fi
        # Fail fast if the process we started has already died. (Only
        # liveness: right after the launch the pid may not have exec'd java yet.)
        if [[ -f "$PIDFILE" ]]; then
            pid="$(tr -dc '0-9' <"$PIDFILE")"
            if ! pid_alive "$pid"; then
                err "broker process $pid exited during start-up"
                log_tail
                return 1
            fi
        fi
        sleep 0.5
    done
    err "no STOMP answer on 127.0.0.1:$PORT after ${START_TIMEOUT}s"
    log_tail
    return 1
}

cmd_start() {
    local pid
    if stomp_answers; then
        say "already answering STOMP, nothing to do"
        return 0
    fi
    pid="$(broker_pid)"
    if [[ -n "$pid" ]]; then
        say "already starting (pid $pid), waiting"
        echo "$pid" >"$PIDFILE"
        cmd_wait
        return
    fi
    ensure_installed

    mkdir -p "$BROKER_HOME/lib" "$DATA_DIR"
    # The statisticsBrokerPlugin's replies need XStream (+ XPP3) on the classpath;
    # activemq.base/lib is on it.
    ln -sf /usr/share/java/xstream.jar /usr/share/java/xpp3.jar "$BROKER_HOME/lib/"
    if [[ -f "$CONSOLE_LOG" ]]; then mv -f "$CONSOLE_LOG" "$CONSOLE_LOG.1"; fi

    say "starting (home $BROKER_HOME)"
    # shellcheck disable=SC2086  # JAVA_OPTS is a list of words
    ASE_BROKER_DATA="$DATA_DIR" ASE_BROKER_PORT="$PORT" setsid java \
        $JAVA_OPTS \
        --add-reads=java.xml=java.logging \
        --add-opens java.base/java.lang=ALL-UNNAMED \
        --add-opens java.base/java.util=ALL-UNNAMED \
        --add-opens java.base/java.util.concurrent=ALL-UNNAMED \
        -Djava.awt.headless=true \
        -Dlog4j.configuration="file:$CONF_DIR/log4j.properties" \
        -Dactivemq.home="$AMQ_HOME" \
        -Dactivemq.base="$BROKER_HOME" \
        -Dactivemq.conf="$CONF_DIR" \
        -Dactivemq.data="$DATA_DIR" \
        -jar "$AMQ_HOME/bin/activemq.jar" start "xbean:file:$CONF_DIR/activemq.xml" \
        >"$CONSOLE_LOG" 2>&1 </dev/null &
    echo $! >"$PIDFILE"
    say "pid $(cat "$PIDFILE")"
    cmd_wait
}

# Send signal $1 to the broker; wait up to $2 s for it to exit. Returns 1 if
# it is still alive afterwards.
signal_and_wait() {
    local sig="$1" timeout="$2" pid deadline
    pid="$(broker_pid)"
    [[ -n "$pid" ]] || return 0
    kill "-$sig" "$pid" 2>/dev/null || true
    deadline=$((SECONDS + timeout))
    while is_our_broker "$pid"; do
        ((SECONDS < deadline)) || return 1
        sleep 0.2
    done
}

cmd_stop() {
    local pid
    pid="$(broker_pid)"
    if [[ -z "$pid" ]]; then
        say "not running"
        rm -f "$PIDFILE"
        return 0
    fi
    say "stopping pid $pid (SIGTERM)"
    if ! signal_and_wait TERM "$STOP_TIMEOUT"; then
        err "still running after ${STOP_TIMEOUT}s: SIGKILL"
        signal_and_wait KILL 10 || { err "pid $pid survived SIGKILL"; return 1; }
    fi
    rm -f "$PIDFILE"
    say "stopped"
}

cmd_kill() {
    local pid
    pid="$(broker_pid)"
    if [[ -z "$pid" ]]; then
        say "not running"
        rm -f "$PIDFILE"
        return 0
    fi
    say "killing pid $pid (SIGKILL)"
    signal_and_wait KILL 10 || { err "pid $pid survived SIGKILL"; return 1; }
    rm -f "$PIDFILE"
}

cmd_status() {
    local pid
    pid="$(broker_pid)"
    if stomp_answers; then
        say "running (pid ${pid:-unknown}), answering STOMP"
        return 0
    elif [[ -n "$pid" ]]; then
        say "process $pid up but not answering STOMP"
        return 1
    fi
    say "not running"
    return 3
}

case "${1:-}" in
    start) cmd_start ;;
    stop) cmd_stop ;;
    kill) cmd_kill ;;
    status) cmd_status ;;
    wait) cmd_wait ;;
    *)
        echo "usage: $0 start|stop|status|kill|wait" >&2
        exit 2
        ;;
esac
