#!/usr/bin/env bash
# synclib entry point.
#   ./spark-submit.sh [spark-submit options] [jobs/forwarder.py options]   run the forwarder (default conf/local.yaml)
#   ./spark-submit.sh jobs/benchmark.py [options]                         run another job
#   ./spark-submit.sh status --config FILE [--json]                       per-partition status, no Spark
#   ./spark-submit.sh test [pytest options]                               run the test suite
# On first use it creates .venv (Python >= 3.10) with synclib and its dependencies;
# later runs reuse it and reinstall only when pyproject.toml changes.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="${SYNCLIB_VENV:-$ROOT/.venv}"

die() { echo "spark-submit.sh: $*" >&2; exit 1; }

find_python() {
  local candidate
  for candidate in "${PYTHON:-}" python3.11 python3.12 python3.13 python3.10 python3; do
    [ -n "$candidate" ] || continue
    if command -v "$candidate" >/dev/null 2>&1 &&
       "$candidate" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)' 2>/dev/null; then
      echo "$candidate"; return 0
    fi
  done
  return 1
}

check_java() {
  local java="${JAVA_HOME:+$JAVA_HOME/bin/}java" version
  command -v "$java" >/dev/null 2>&1 || die "Java 17 or newer is required (no 'java' on PATH and JAVA_HOME unset)."
  version="$("$java" -version 2>&1 | awk -F'"' '/version/ {print $2; exit}')"
  [ "${version%%.*}" -ge 17 ] 2>/dev/null || die "Java 17 or newer is required; found '$version' ($java)."
}

prepare_env() {
  local python stamp want
  stamp="$VENV/.synclib-installed"
  want="$(cat "$ROOT/pyproject.toml" | cksum)"
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then return 0; fi
  python="$(find_python)" || die "Python 3.10 or newer is required (set PYTHON=/path/to/python3)."
  echo "spark-submit.sh: preparing $VENV (first run; reused afterwards)" >&2
  [ -x "$VENV/bin/python" ] || "$python" -m venv "$VENV"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -e "$ROOT[test]"
  echo "$want" > "$stamp"
}

check_java
prepare_env
export PYSPARK_PYTHON="$VENV/bin/python" PYSPARK_DRIVER_PYTHON="$VENV/bin/python"
export PATH="$VENV/bin:$PATH"
cd "$ROOT"

case "${1:-}" in
  test)
    shift; exec "$VENV/bin/python" -m pytest "$@" ;;
  status)
    shift; exec "$VENV/bin/python" -m synclib status "$@" ;;
esac

# Spark options (--master, --conf ...) come first, then the job file, then its arguments.
spark_args=(); job=""
while [ $# -gt 0 ]; do
  case "$1" in
    *.py) job="$1"; shift; break ;;
    --*=*|--verbose|--supervise) spark_args+=("$1"); shift ;;
    --*) [ $# -ge 2 ] || die "option $1 needs a value"; spark_args+=("$1" "$2"); shift 2 ;;
    *) break ;;
  esac
done
job_args=("$@")
if [ -z "$job" ]; then
  job="$ROOT/jobs/forwarder.py"
fi
if [ "$(basename "$job")" = "forwarder.py" ] && [[ " ${job_args[*]:-} " != *" --config "* ]]; then
  job_args=(--config "$ROOT/conf/local.yaml" "${job_args[@]}")
fi
# Ship synclib to executors (a no-op in local mode, needed for cluster deploy modes).
zip_path="$VENV/synclib.zip"
(cd "$ROOT" && "$VENV/bin/python" -c 'import sys, zipfile, pathlib
with zipfile.ZipFile(sys.argv[1], "w") as z:
    for p in sorted(pathlib.Path("synclib").rglob("*.py")): z.write(p)' "$zip_path")
exec "$VENV/bin/spark-submit" \
  --conf "spark.pyspark.python=$VENV/bin/python" \
  --conf "spark.pyspark.driver.python=$VENV/bin/python" \
  --py-files "$zip_path" \
  "${spark_args[@]}" "$job" "${job_args[@]}"
