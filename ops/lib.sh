# Shared by the ops/ scripts: where things live, and small helpers. Sourced, not run.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SERVICES="$ROOT/.services"        # ignored by git: downloads, installs, data, logs, pids
VENV="$ROOT/.venv"
export OPENSEARCH_JAVA_HOME=${OPENSEARCH_JAVA_HOME:-/usr/lib/jvm/java-17-openjdk-amd64}
mkdir -p "$SERVICES/logs" "$SERVICES/run"

say() { printf '\033[1m[situate]\033[0m %s\n' "$*" >&2; }

python_bin() {
  # Python 3.11 is what the project targets; fall back to python3 if it is 3.11+.
  for p in python3.11 python3; do
    if command -v "$p" >/dev/null && "$p" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
      echo "$p"; return
    fi
  done
  say "Python 3.11+ is required"; exit 1
}

redis_url() { echo "${SITUATE_REDIS_URL:-redis://127.0.0.1:6379/0}"; }
opensearch_url() { echo "${SITUATE_OPENSEARCH_URL:-http://127.0.0.1:9200}"; }
