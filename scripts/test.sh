#!/usr/bin/env bash
# scripts/test.sh — run the whole ASE test suite: ./scripts/test.sh [pytest args]
#
# Installs/starts what is missing (scripts/bootstrap.sh), makes sure the test
# PostgreSQL database exists, then runs pytest from the repository root.
# The suite starts its own ActiveMQ (a pytest fixture, via scripts/activemq.sh,
# home var/test-activemq, port 61623); this script does not start one.
#
# Environment (exported to the tests):
#   DATABASE_URL  default postgres://postgres@127.0.0.1:5432/ase
#                 (the database is created if missing)
#   REDIS_URL     default redis://127.0.0.1:6379/0
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"

./scripts/bootstrap.sh

export DATABASE_URL="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/ase}"
export REDIS_URL="${REDIS_URL:-redis://127.0.0.1:6379/0}"

# Create the PostgreSQL database named in DATABASE_URL if it does not exist.
ensure_database() {
    local parts db admin_url
    case "$DATABASE_URL" in
        postgres://* | postgresql://*) ;;
        *) return 0 ;; # not PostgreSQL: nothing to create
    esac
    # "<db name>\n<same URL on the maintenance database 'postgres'>"
    parts="$(python3 - "$DATABASE_URL" <<'PY'
import sys
from urllib.parse import unquote, urlsplit
url = urlsplit(sys.argv[1])
print(unquote(url.path.lstrip("/")) or "postgres")
print(url._replace(scheme="postgresql", path="/postgres").geturl())
PY
)"
    db="${parts%%$'\n'*}"
    admin_url="${parts#*$'\n'}"
    # (SQL on stdin, not -c: psql interpolates :'db' / :"db" only there.)
    db_exists() {
        [[ "$(psql "$admin_url" -Atq -v ON_ERROR_STOP=1 -v db="$db" \
            <<<"select 1 from pg_database where datname = :'db'")" == 1 ]]
    }
    if db_exists; then
        return 0
    fi
    echo "test: creating PostgreSQL database $db"
    # Tolerate a concurrent run creating it first.
    psql "$admin_url" -q -v ON_ERROR_STOP=1 -v db="$db" <<<'create database :"db"' || db_exists
}
ensure_database

exec "$REPO/.venv/bin/python" -m pytest "$@"
