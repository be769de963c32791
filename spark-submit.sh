#!/usr/bin/env bash
# synclib entry point.
#   ./spark-submit.sh [run] [spark-submit options] [forwarder options]  the forwarder (default --config conf/local.yaml)
#   ./spark-submit.sh dead-letters [spark-submit options] {list,replay} --config FILE [...]  dead letters
#   ./spark-submit.sh [spark-submit options] JOB.py [job options]    another job, e.g. jobs/benchmark.py
#   ./spark-submit.sh status --config FILE [--json]                  per-partition status, no Spark
#   ./spark-submit.sh maintain --config FILE                         one table maintenance pass, no Spark
#   ./spark-submit.sh test [pytest options]                          the test suite
#   ./spark-submit.sh lint                                           ruff check . then mypy (pyproject.toml)
#   ./spark-submit.sh docs [mkdocs build options]                    the documentation site into site/ (mkdocs.yml)
#   ./spark-submit.sh --help                                         this help and the forwarder's options
# run, status, maintain and dead-letters are the `synclib` command's subcommands (synclib/cli.py).
# spark-submit's own options go to spark-submit; any other argument (before or after them) and
# everything after JOB.py go to the job, which checks its options itself; spark-submit's own help is
# `.venv/bin/spark-submit --help`.
# On first use it creates .venv (or $SYNCLIB_VENV) with synclib and its dependencies;
# later runs reuse it and reinstall only when pyproject.toml changes.
# Ctrl-C or SIGTERM: the forwarder stops after the batch in flight, prints its summary and
# exits 0; a second one stops it at once.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="${SYNCLIB_VENV:-$ROOT/.venv}"

die() { echo "spark-submit.sh: $*" >&2; exit 1; }

find_python() {
  local candidate
  for candidate in "${PYTHON:-}" python3 python3.13 python3.12 python3.11 python3.10; do
    [ -n "$candidate" ] || continue
    if command -v "$candidate" >/dev/null 2>&1 &&
       "$candidate" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)' 2>/dev/null; then
      echo "$candidate"; return 0
    fi
  done
  return 1
}

check_java() {
  local java="${JAVA_HOME:+$JAVA_HOME/bin/}java" version major
  command -v "$java" >/dev/null 2>&1 ||
    die "Java 17 or newer is required: no 'java' on PATH${JAVA_HOME:+ or in JAVA_HOME=$JAVA_HOME}. Install a JDK 17+ (e.g. apt-get install openjdk-17-jdk-headless, brew install openjdk@17)."
  version="$("$java" -version 2>&1 | awk -F'"' '/version/ {print $2; exit}')"
  major="${version%%.*}"
  [ "$major" = "1" ] && major="$(echo "$version" | cut -d. -f2)"  # 1.8.0_x is Java 8
  [ "$major" -ge 17 ] 2>/dev/null ||
    die "Java 17 or newer is required; $(command -v "$java") is version '${version:-unknown}'. Set JAVA_HOME to a JDK 17+."
}

prepare_env() {
  local python stamp want
  stamp="$VENV/.synclib-installed"
  want="$(cksum < "$ROOT/pyproject.toml")"
  if [ -x "$VENV/bin/python" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then return 0; fi
  python="$(find_python)" ||
    die "Python 3.10 or newer is required: none of python3, python3.1x on PATH is. Install one or set PYTHON=/path/to/python3.10+."
  echo "spark-submit.sh: preparing $VENV with $("$python" --version) (first run, a few minutes; reused afterwards)" >&2
  [ -x "$VENV/bin/python" ] || "$python" -m venv "$VENV" ||
    die "cannot create a virtual environment with $python (on Debian/Ubuntu: apt-get install python3-venv)"
  if ! { "$VENV/bin/python" -m pip install --disable-pip-version-check --upgrade pip &&
         "$VENV/bin/python" -m pip install --disable-pip-version-check -e "$ROOT[test]"; } > "$VENV/install.log" 2>&1; then
    tail -n 25 "$VENV/install.log" >&2
    die "installing the dependencies into $VENV failed (full log: $VENV/install.log; PyPI must be reachable)"
  fi
  echo "$want" > "$stamp"
}

# Local mode: Spark puts SPARK_HOME/python/lib/pyspark.zip first on the PYTHONPATH of every Python
# process it starts (the driver, the data source's planner daemons, the executors' workers), and
# Python compiles each module it imports from a zip anew in each of them (zipimport writes no
# bytecode): about 0.5 s of CPU a process, 1-3 s of a query's start. Here every one of them runs
# the venv's Python, whose PySpark is installed with its bytecode: a SPARK_HOME of links to that
# PySpark's bin/, sbin/ and jars/, without python/, makes them import it. A SPARK_HOME already
# set (the user's own Spark, or the caller's) is kept; so is cluster mode, which ships pyspark.zip.
use_venv_spark_home() {
  local home="$VENV/spark-home" pyspark entry
  [ -z "${SPARK_HOME:-}" ] || return 0
  if [ ! -e "$home/jars" ]; then  # new, or its links dangle after the venv was rebuilt
    pyspark="$("$VENV/bin/python" -c 'import importlib.util as u; print(u.find_spec("pyspark").submodule_search_locations[0])')"
    mkdir -p "$home"
    for entry in bin sbin jars; do
      if [ -e "$pyspark/$entry" ]; then ln -sfn "$pyspark/$entry" "$home/$entry"; fi
    done
  fi
  export SPARK_HOME="$home"
}

# JVM artifacts (jvm/ivy.xml) from Maven Central into $SYNCLIB_JVM_DIR, each configuration once.
export SYNCLIB_JVM_DIR="${SYNCLIB_JVM_DIR:-$ROOT/.jvm}"
prepare_jvm() { "$ROOT/jvm/fetch" "$VENV/bin/python" "$@"; }

check_java
prepare_env
export PYSPARK_PYTHON="$VENV/bin/python" PYSPARK_DRIVER_PYTHON="$VENV/bin/python"
export PATH="$VENV/bin:$PATH"
cd "$ROOT"

case "${1:-}" in
  test)
    # Delta, S3A and Spark's Kafka source for the Spark session; Apache Kafka 4.x and 3.9 as test
    # brokers; S3Proxy as the tests' S3 server.
    prepare_jvm delta spark-kafka s3a kafka kafka-3.9 s3proxy || die "the tests need the JVM artifacts of jvm/ivy.xml"
    use_venv_spark_home
    shift; exec "$VENV/bin/python" -m pytest "$@" ;;
  status|maintain)
    exec "$VENV/bin/python" -m synclib "$@" ;;
  run)
    shift ;;  # the forwarder: jobs/forwarder.py under spark-submit, below
  dead-letters)
    shift; command_job="$ROOT/jobs/dead_letters.py" ;;  # its options split as the forwarder's
  lint)
    "$VENV/bin/ruff" check . || exit 1; exec "$VENV/bin/mypy" ;;
  docs)
    # --strict: a broken link or anchor, or a page missing from the nav, fails the build.
    shift; exec "$VENV/bin/mkdocs" build --strict "$@" ;;
esac

# Split: spark-submit's own options (as `spark-submit --help` lists them) go to spark-submit;
# the job file (the first *.py) and every other argument go to the job, whose argparse owns them.
spark_switches=" --verbose -v --version --supervise --load-spark-defaults "
spark_valued=" --master --deploy-mode --class --name --jars --packages --exclude-packages --repositories "
spark_valued+="--py-files --files --archives --conf -c --properties-file --driver-memory --driver-java-options "
spark_valued+="--driver-library-path --driver-class-path --executor-memory --proxy-user --remote --driver-cores "
spark_valued+="--kill --status --total-executor-cores --executor-cores --num-executors --principal --keytab --queue "
spark_args=(); job="${command_job:-}"; job_args=(); master=""; deploy_mode=""; py_files=""; jars=""
while [ $# -gt 0 ]; do
  name="${1%%=*}"
  if [[ "$1" == -* && "$spark_switches" == *" $1 "* ]]; then
    spark_args+=("$1"); shift
  elif [[ "$1" == -* && "$spark_valued" == *" $name "* ]]; then
    if [ "$name" = "$1" ]; then
      [ $# -ge 2 ] || die "option $1 needs a value"; value="$2"; shift 2
    else
      value="${1#*=}"; shift
    fi
    case "$name" in
      --py-files) py_files=",$value"; continue ;;  # added to synclib's own below
      --jars) jars="$value"; continue ;;  # added to Delta's below
      --master) master="$value" ;;
      --deploy-mode) deploy_mode="$value" ;;
    esac
    spark_args+=("$name" "$value")
  elif [[ "$1" == *.py ]]; then
    job="$1"; shift; break
  else
    job_args+=("$1"); shift
  fi
done
job_args+=("$@")
if [ -z "$job" ] && [[ " ${job_args[*]-} " == *" --help "* || " ${job_args[*]-} " == *" -h "* ]]; then
  # The forwarder's own help, without starting Spark; spark-submit's is `.venv/bin/spark-submit --help`.
  sed -n '2,/^set -euo/p' "$ROOT/spark-submit.sh" | sed '$d; s/^# \{0,1\}//'
  echo
  exec "$VENV/bin/python" "$ROOT/jobs/forwarder.py" --help
fi
job="${job:-$ROOT/jobs/forwarder.py}"  # its --config defaults to conf/local.yaml

# Defaults first: spark-submit options given by the user come later and win.
defaults=(--conf spark.log.level=WARN)
# Delta's writer (sink.engine auto then picks delta-spark), S3A (s3:// and s3a:// locations) and
# Spark's Kafka source, when fetched.
if prepare_jvm delta spark-kafka s3a; then
  jars="$(printf "%s\n" "$SYNCLIB_JVM_DIR"/delta/*.jar "$SYNCLIB_JVM_DIR"/spark-kafka/*.jar "$SYNCLIB_JVM_DIR"/s3a/*.jar | paste -sd, -)${jars:+,$jars}"
  defaults+=(--conf spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension
             --conf spark.sql.catalog.spark_catalog=org.apache.spark.sql.delta.catalog.DeltaCatalog)
else
  echo "spark-submit.sh: going on without Delta's jars: sink.engine auto uses delta-rs" >&2
fi
[ "$deploy_mode" = cluster ] || defaults+=(--conf "spark.pyspark.driver.python=$VENV/bin/python")
case "$master" in
  ""|local*) defaults+=(--conf "spark.pyspark.python=$VENV/bin/python"); use_venv_spark_home ;;
  # A cluster: executors need a Python with the dependencies, e.g. --archives env.tar.gz#env
  # --conf spark.pyspark.python=./env/bin/python (see docs/operations/cluster.md).
esac
# Ship synclib to executors (a no-op in local mode, needed on a cluster).
zip_path="$VENV/synclib.zip"
"$VENV/bin/python" - "$zip_path" <<'EOF'
import os, pathlib, sys, zipfile
tmp = pathlib.Path(f"{sys.argv[1]}.{os.getpid()}.tmp")
with zipfile.ZipFile(tmp, "w") as archive:
    for path in sorted(pathlib.Path("synclib").rglob("*.py")):
        archive.write(path)
tmp.replace(sys.argv[1])
EOF

# Run spark-submit in its own process group and forward Ctrl-C/SIGTERM to it as one SIGTERM:
# a terminal's Ctrl-C would otherwise also reach the Python processes Spark runs next to the
# driver (the source's planner), which must not die before the driver has stopped the query.
set -m
"$VENV/bin/spark-submit" "${defaults[@]}" --py-files "$zip_path$py_files" ${jars:+--jars "$jars"} \
  ${spark_args[@]+"${spark_args[@]}"} "$job" ${job_args[@]+"${job_args[@]}"} &
child=$!
trap 'kill -TERM "$child" 2>/dev/null || true' INT TERM
status=0
while :; do
  wait "$child" && status=0 || status=$?
  kill -0 "$child" 2>/dev/null || break
done
exit "$status"
