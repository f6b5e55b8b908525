#!/usr/bin/env bash
# The GPU check, in one call of at most 8 minutes, on a machine with an NVIDIA GPU and no network.
# NOT RUN ON A GPU YET: written and dry-run on a CPU only. Steps, each bounded in time:
#   0. the wheels in .whl/ (made here by `python -m scripts.gpu_check.wheels`: transformers and gguf
#      in this project's versions, for Python 3.12) installed into $SPECDEC_SITE, put first on
#      PYTHONPATH; then the preflight: the versions requirements.txt needs, and one pass through each
#      cache the engine runs, which must be used. One line and exit 1 when either is wrong.
#   1. the tests that matter on CUDA (tiny-random, built in code), at most $TESTS_S seconds; a
#      failure is reported and the check goes on;
#   2. python -m scripts.gpu_check (scripts/gpu_check/__init__.py): the runners on the real shapes of
#      the 1.5B/0.5B and 7B/0.5B pairs with random weights. Its JSON record (--out PATH, else
#      $OUT/gpu_check.json when $OUT is set) is written after every section: a crash or the time
#      limit ($CHECK_S seconds) keeps what ran.
# The exact call on the device machine is in docs/benchmarks.md ("The GPU check").
#
# Usage:  scripts/gpu_check.sh [--skip-tests] [options of python -m scripts.gpu_check: --out PATH --device
#         --dtype --layers --tiny --runners --loop-runner --k --tokens --prompt-len --context --repeats]
# The dry run on a CPU (CUDA calls stubbed, torch.compile stands in for CUDA graphs):
#         scripts/gpu_check.sh --skip-tests --device cpu --layers 2 --tokens 8 --prompt-len 16 --repeats 2
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
SITE=${SPECDEC_SITE:-/tmp/specdec-site}
TESTS_S=${TESTS_S:-180}
CHECK_S=${CHECK_S:-240}
export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH}

if compgen -G ".whl/*.whl" >/dev/null; then
  "$PY" -m pip install --quiet --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl/*.whl \
    || { echo "gpu_check: the wheels in .whl/ did not install into $SITE"; exit 1; }
  export PYTHONPATH="$SITE:$PYTHONPATH"
fi
"$PY" -m scripts.gpu_check.preflight || exit 1

if [ "${1:-}" = "--skip-tests" ]; then
  shift
else
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  # tests/conftest.py builds the tiny pair on $SPECDEC_TEST_DEVICE (default cpu); the race sampler's
  # chi-square tests run on every device present.
  # Stopped at the limit with SIGINT, pytest still prints its summary of the failures so far.
  SPECDEC_TEST_DEVICE=cuda timeout -s INT -k 10 "$TESTS_S" "$PY" -m pytest -q -rfE --tb=short -p no:cacheprovider \
    tests/test_parity.py tests/test_cache.py tests/test_distribution.py tests/test_runners.py tests/test_compiled.py \
    tests/test_attention.py tests/test_lean_pass.py \
    -k "not embedded" \
    || echo "gpu_check: the tests above failed or ran past ${TESTS_S} s (exit $?); the check goes on"
fi

timeout -s INT -k 10 "$CHECK_S" "$PY" -m scripts.gpu_check "$@"
status=$?
[ "$status" = 124 ] && echo "gpu_check: the check ran past ${CHECK_S} s; its record holds the sections that finished"
exit "$status"
