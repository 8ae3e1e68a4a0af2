#!/usr/bin/env bash
# scripts/bootstrap.sh — install and start whatever ASE needs on this machine
# (Debian 12, root). Idempotent: a second run only checks, and is fast.
#
#   scripts/bootstrap.sh [--packages-only]
#
#   1. Debian packages: activemq libxstream-java redis-server postgresql
#      default-jre-headless chromium (the console's browser tests drive it
#      headless) libpostgresql-jdbc-java libxerial-sqlite-jdbc-java (the JDBC
#      drivers Spark reads the history with) (+ python3-venv for Debian's own
#      python3); `apt-get update` only if one is missing.
#   2. Redis on 127.0.0.1:6379 and PostgreSQL on 127.0.0.1:5432 (trust auth for
#      user postgres), started if not answering.
#   3. The virtualenv .venv (python3, 3.11), and `pip install -r requirements.txt`
#      whenever requirements.txt changed since the last install.
#
#   --packages-only   step 1 only (scripts/activemq.sh uses it)
#   --with-browser    accepted for compatibility: chromium is always installed
#
# Environment: ASE_PYTHON  interpreter for the venv (default python3)
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$REPO/.venv"
PYTHON="${ASE_PYTHON:-python3}"

packages_only=0
for arg in "$@"; do
    case "$arg" in
        --with-browser) ;;
        --packages-only) packages_only=1 ;;
        -h | --help)
            sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
            exit 0
            ;;
        *)
            echo "bootstrap: unknown argument: $arg" >&2
            exit 2
            ;;
    esac
done

say() { echo "bootstrap: $*"; }
did_something=0
did() {
    did_something=1
    say "$*"
}

# ---------------------------------------------------------------- packages --
installed() {
    [[ "$(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null || true)" == installed ]]
}

install_packages() {
    # libpostgresql-jdbc-java, libxerial-sqlite-jdbc-java: JDBC drivers Spark reads the history with.
    local wanted=(activemq libxstream-java redis-server postgresql default-jre-headless chromium
        libpostgresql-jdbc-java libxerial-sqlite-jdbc-java)
    local missing=() pkg
    # Debian's own python3 can only make venvs with python3-venv (ensurepip).
    if [[ "$(command -v "$PYTHON" || true)" == /usr/bin/* ]]; then
        wanted+=(python3-venv)
    fi
    for pkg in "${wanted[@]}"; do
        installed "$pkg" || missing+=("$pkg")
    done
    if ((${#missing[@]} == 0)); then
        return 0
    fi
    if ((EUID != 0)); then
        echo "bootstrap: missing Debian packages (${missing[*]}) and not root" >&2
        exit 1
    fi
    did "installing Debian packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q "${missing[@]}"
}

# ------------------------------------------------------------------- redis --
start_redis() {
    if redis-cli -h 127.0.0.1 -p 6379 ping 2>/dev/null | grep -q PONG; then
        return 0
    fi
    did "starting Redis on 127.0.0.1:6379"
    mkdir -p /var/lib/redis /var/log/redis
    redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" \
        --appendonly no --dir /var/lib/redis --logfile /var/log/redis/ci.log

    for _ in $(seq 50); do
        redis-cli -h 127.0.0.1 -p 6379 ping 2>/dev/null | grep -q PONG && return 0
        sleep 0.2
    done
    echo "bootstrap: Redis did not answer; see /var/log/redis/ci.log" >&2
    exit 1
}

# -------------------------------------------------------------- postgresql --
pg_version() {
    # shellcheck disable=SC2012  # plain version-number directory names
    ls /etc/postgresql | sort -V | tail -n 1
}

pg_can_login() {
    PGCONNECT_TIMEOUT=5 psql -h 127.0.0.1 -U postgres -d postgres -Atqc 'select 1' \
        >/dev/null 2>&1 </dev/null
}

start_postgres() {
    local ver hba
    if ! pg_isready -q -h 127.0.0.1 -p 5432; then
        ver="$(pg_version)"
        if [[ -z "$ver" ]]; then
            echo "bootstrap: no PostgreSQL cluster under /etc/postgresql" >&2
            exit 1
        fi
        did "starting PostgreSQL $ver/main"
        pg_ctlcluster --skip-systemctl-redirect "$ver" main start || true
        for _ in $(seq 60); do
            pg_isready -q -h 127.0.0.1 -p 5432 && break
            sleep 0.5
        done
        if ! pg_isready -q -h 127.0.0.1 -p 5432; then
            echo "bootstrap: PostgreSQL did not start; see /var/log/postgresql/" >&2
            exit 1
        fi
    fi
    if pg_can_login; then
        return 0
    fi
    # A fresh Debian install asks for a password over TCP: trust user postgres
    # on the loopback addresses (first matching line of pg_hba.conf wins).
    ver="$(pg_version)"
    hba="/etc/postgresql/$ver/main/pg_hba.conf"
    did "allowing trust auth for postgres@127.0.0.1 and ::1 in $hba"
    local tmp
    tmp="$(mktemp)"
    {
        echo "# ASE (scripts/bootstrap.sh): local development and tests"
        echo "host    all    postgres    127.0.0.1/32    trust"
        echo "host    all    postgres    ::1/128         trust"
        cat "$hba"
    } >"$tmp"
    cat "$tmp" >"$hba" # keeps the file's owner and mode
    rm -f "$tmp"
    pg_ctlcluster --skip-systemctl-redirect "$ver" main reload
    for _ in $(seq 20); do
        pg_can_login && return 0
        sleep 0.5
    done
    echo "bootstrap: still cannot log in as postgres@127.0.0.1 (see $hba)" >&2
    exit 1
}

# ---------------------------------------------------------------- python ---
setup_venv() {
    local req="$REPO/requirements.txt" stamp="$VENV/.requirements.sha256" sum
    if ! "$VENV/bin/python" -c 'import sys' >/dev/null 2>&1; then
        if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
            echo "bootstrap: $PYTHON is older than Python 3.11" >&2
            exit 1
        fi
        did "creating virtualenv .venv with $("$PYTHON" --version 2>&1)"
        rm -rf "$VENV"
        "$PYTHON" -m venv "$VENV"
    fi
    if [[ ! -f "$req" ]]; then
        say "no requirements.txt yet, skipping pip install"
        return 0
    fi
    sum="$(sha256sum "$req" | cut -d' ' -f1)"
    if [[ -f "$stamp" && "$(cat "$stamp")" == "$sum" ]]; then
        return 0
    fi
    did "pip install -r requirements.txt (changed since last install)"
    "$VENV/bin/python" -m pip install --disable-pip-version-check -q -r "$req"
    echo "$sum" >"$stamp"
}

# -------------------------------------------------------------------- main --
install_packages
if ((!packages_only)); then
    start_redis
    start_postgres
    setup_venv
fi
if ((did_something)); then
    say "done"
else
    say "everything already in place"
fi
