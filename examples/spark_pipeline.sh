#!/usr/bin/env bash
# One command from a fresh clone: create .venv (make venv: hightide with its Spark and
# test extras) and run the streaming pipeline example. Arguments go to the script
# (e.g. --seconds 30, --remote sc://host:15002, --out DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
make -s venv
exec .venv/bin/python examples/spark_pipeline.py "$@"
