#!/usr/bin/env bash
# Run the official Array API conformance suite (data-apis/array-api-tests) on limn_array.
#
#   ARRAY_API_TESTS_DIR=/path/to/array-api-tests tests/run_array_api_tests.sh [pytest args]
#
# The checkout must have its array-api/ submodule (the spec repository at the commit the
# suite pins). Without ARRAY_API_TESTS_DIR the run is skipped. LIMN_ARRAY_DEVICE picks the
# device (default numpy); MAX_EXAMPLES the hypothesis examples per test (default 20).
# Hypothesis is derandomized and deadlines are off, so a first-use compile is no failure.
# tests/array_api_xfails.txt lists what limn deliberately does not support, with reasons.
set -euo pipefail

if [ -z "${ARRAY_API_TESTS_DIR:-}" ]; then
    echo "array-api-tests: skipped (set ARRAY_API_TESTS_DIR to a checkout of data-apis/array-api-tests)"
    exit 0
fi
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
DEVICE="${LIMN_ARRAY_DEVICE:-numpy}"

export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export ARRAY_API_TESTS_MODULE=limn_array
export LIMN_DEVICE="$DEVICE"  # limn's default device, so every array the suite makes is there

cd "$ARRAY_API_TESTS_DIR"
case " $* " in
    *" array_api_tests"*) ;;  # the caller named test files
    *) set -- "$@" array_api_tests/ ;;
esac
exec "$PY" -m pytest --rootdir "$ARRAY_API_TESTS_DIR" "$@" \
    --derandomize --disable-deadline --max-examples="${MAX_EXAMPLES:-20}" \
    --xfails-file="$ROOT/tests/array_api_xfails.txt" \
    -p no:cacheprovider -q -rf
