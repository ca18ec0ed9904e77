#!/usr/bin/env bash
# Idempotent set-up for Ballast: a pinned Python virtual environment (.venv) and the Java side
# (Kafka broker + Connect, Spark's Kafka and Avro connectors) resolved by Maven into .cache/jars.
# Each half is skipped when a stamp records that its inputs (requirements, pyproject, poms) have
# not changed, so a second run takes seconds. Needs only python3 (3.11), java (17+) and mvn.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${VENV:-.venv}
CACHE=${CACHE:-.cache}
JARS="$CACHE/jars"
mkdir -p "$CACHE"

say() { printf '[setup] %s\n' "$*"; }
need() { command -v "$1" >/dev/null 2>&1 || { echo "[setup] error: '$1' not found on PATH; $2" >&2; exit 1; }; }
need python3 "install Python 3.11+"
need java "install a JDK 17+ (Kafka 4 brokers need Java 17)"
need mvn "install Apache Maven (it resolves Kafka, Connect and Spark's connectors)"

stamp_of() { cat "$@" | sha256sum | cut -c1-16; }

# --- Python ---------------------------------------------------------------------------------
py_stamp=$(stamp_of requirements.txt requirements-dev.txt pyproject.toml)
if [ "$(cat "$VENV/.ballast-stamp" 2>/dev/null)" != "$py_stamp" ]; then
  say "creating $VENV with pinned requirements (first run downloads pyspark, ~450 MB)"
  [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check --upgrade pip==25.3 setuptools==80.9.0 wheel==0.45.1
  "$VENV/bin/pip" install -q --disable-pip-version-check -r requirements-dev.txt
  "$VENV/bin/pip" install -q --disable-pip-version-check --no-build-isolation --no-deps -e .
  echo "$py_stamp" > "$VENV/.ballast-stamp"
else
  say "python environment up to date ($VENV)"
fi

# --- Java (Maven) -----------------------------------------------------------------------------
resolve() {  # name pom-dir
  local name=$1 dir=$2 out="$JARS/$1"
  local st; st=$(stamp_of "$dir/pom.xml")
  if [ "$(cat "$out/.ballast-stamp" 2>/dev/null)" = "$st" ]; then
    say "$name jars up to date ($out)"; return
  fi
  say "resolving $name jars with Maven into $out"
  rm -rf "$out.tmp" && mkdir -p "$out.tmp"
  mvn -q -B -f "$dir/pom.xml" dependency:copy-dependencies -DincludeScope=runtime \
      -DoutputDirectory="$PWD/$out.tmp"
  rm -rf "$out" && mv "$out.tmp" "$out" && echo "$st" > "$out/.ballast-stamp"
  say "$name: $(ls "$out" | grep -c '\.jar$') jars"
}
resolve kafka deploy/maven/kafka
resolve spark deploy/maven/spark
say "ready"
