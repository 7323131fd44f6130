#!/usr/bin/env bash
# Runs Ray's own, unmodified test files against oxray and reports the pass rate of
# the public-API tests. See bench/ray_compat/README.md.
#
#   RAY_SRC=<ray git dir> bash bench/ray_compat/run.sh [test files...] [pytest -k expression]
#
# Arguments ending in .py pick files of files.txt (by path or by name); anything else
# is a pytest -k expression. Environment:
#   RAY_SRC                  a git directory of Ray's source holding the pinned commit (required)
#   RAY_COMMIT               the commit to read the tests from (default 8dcdff8f38)
#   RAYTEST_WORK             the work dir, outside the repository (default /tmp/ray_compat)
#   PYTHON                   the interpreter with oxray installed (default .venv/bin/python)
#   RAY_COMPAT_TEST_TIMEOUT  seconds per test (default 120)
#   RAY_COMPAT_FILE_TIMEOUT  seconds per pytest run of one file (default 1200)
#   RAY_COMPAT_COLLECT_ONLY  1: only collect and classify (fast; no test runs)
#   RAY_COMPAT_TEST_DEPS     0: do not pip-install Ray's test-only dependencies into
#                            $RAYTEST_WORK/test_deps (default 1: once, then reused)
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
if [[ -z ${RAY_SRC:-} ]]; then echo "set RAY_SRC to a git directory of Ray's source (see bench/ray_compat/README.md)" >&2; exit 2; fi
COMMIT=${RAY_COMMIT:-8dcdff8f38}
WORK=${RAYTEST_WORK:-/tmp/ray_compat}
PY=${PYTHON:-$REPO/.venv/bin/python}
TEST_TIMEOUT=${RAY_COMPAT_TEST_TIMEOUT:-120}
FILE_TIMEOUT=${RAY_COMPAT_FILE_TIMEOUT:-1200}
MAX_RESUMES=3

case "$(realpath -m "$WORK")/" in
"$REPO"/*)
    echo "RAYTEST_WORK must be outside the repository" >&2
    exit 2
    ;;
esac
if ! git -C "$RAY_SRC" rev-parse --verify --quiet "$COMMIT^{commit}" >/dev/null; then
    echo "$RAY_SRC has no commit $COMMIT: clone https://github.com/ray-project/ray and fetch it" >&2
    exit 2
fi

# files.txt: one Ray path per line; "+path" lines are support files (extracted, not run).
mapfile -t LINES < <(sed -e 's/#.*//' -e 's/[[:space:]]*$//' -e '/^$/d' "$HERE/files.txt")
TEST_FILES=()
SUPPORT_FILES=()
for line in "${LINES[@]}"; do
    if [[ $line == +* ]]; then SUPPORT_FILES+=("${line#+}"); else TEST_FILES+=("$line"); fi
done

SELECTED=()
KEXPR=()
for arg in "$@"; do
    if [[ $arg == *.py ]]; then
        found=""
        for f in "${TEST_FILES[@]}"; do
            if [[ $f == "$arg" || $(basename "$f") == "$(basename "$arg")" ]]; then SELECTED+=("$f"); found=1; fi
        done
        [[ -n $found ]] || { echo "$arg is not in files.txt" >&2; exit 2; }
    else
        KEXPR+=("$arg")
    fi
done
[[ ${#SELECTED[@]} -gt 0 ]] || SELECTED=("${TEST_FILES[@]}")

# python/ray/tests/x.py -> $WORK/tests/x.py; python/ray/train/v2/tests/x.py -> $WORK/train_v2_tests/x.py
subdir_of() {
    local d
    d=$(dirname "$1")
    d=${d#python/ray/}
    echo "${d//\//_}"
}

echo "extracting Ray $COMMIT test files into $WORK"
rm -rf "$WORK/results" "$WORK/oxray_tmp"
mkdir -p "$WORK/results" "$WORK/oxray_tmp"
chmod 700 "$WORK/oxray_tmp"
TEST_DIRS=()
for f in "${TEST_FILES[@]}" "${SUPPORT_FILES[@]}"; do
    # A support file goes below the folder of the test files whose directory holds it.
    base=$(dirname "$f")
    for t in "${TEST_FILES[@]}"; do
        if [[ $f == "$(dirname "$t")"/* ]]; then base=$(dirname "$t"); fi
    done
    sub=$(subdir_of "$base/x")
    dest="$WORK/$sub/${f#"$base"/}"
    if [[ ! -d "$WORK/$sub" ]] || [[ " ${TEST_DIRS[*]} " != *" $WORK/$sub "* ]]; then
        rm -rf "${WORK:?}/$sub"
        mkdir -p "$WORK/$sub"
        TEST_DIRS+=("$WORK/$sub")
    fi
    mkdir -p "$(dirname "$dest")"
    git -C "$RAY_SRC" show "$COMMIT:$f" >"$dest" || { echo "cannot read $f at $COMMIT" >&2; exit 2; }
    # A support file is also copied into the folders of the test files below its own
    # folder (python/ray/data/tests/util.py into the copy of .../tests/datasource), so
    # that its plain name imports there too.
    if [[ " ${SUPPORT_FILES[*]} " == *" $f "* ]]; then
        for t in "${TEST_FILES[@]}"; do
            if [[ $(dirname "$t") == "$(dirname "$f")"/* ]]; then
                extra="$WORK/$(subdir_of "$t")/$(basename "$f")"
                [[ -e $extra ]] || cp "$dest" "$extra"
            fi
        done
    fi
done
for d in "${TEST_DIRS[@]}"; do
    # The harness's own conftest (never Ray's): train's for Train tests, data's for Ray
    # Data tests, tune's for Ray Tune tests, the core one elsewhere.
    case "${d#"$WORK"/}" in
    train*) conftest=conftest_train.py ;;
    data_tests*) conftest=conftest_data.py ;;
    tune_tests*) conftest=conftest_tune.py ;;
    *) conftest=conftest_core.py ;;
    esac
    cp "$HERE/harness/$conftest" "$d/conftest.py"
done
git -C "$RAY_SRC" rev-parse "$COMMIT^{commit}" >"$WORK/results/ray_commit"
{
    git -C "$REPO" rev-parse HEAD | tr -d '\n'
    git -C "$REPO" diff --quiet HEAD -- python crates || echo -n " (with uncommitted changes to python/ or crates/)"
    echo
} >"$WORK/results/oxray_commit" 2>/dev/null

# Ray's test-only dependencies that the venv lacks (pkg_resources, gone from setuptools
# 81+; python-snappy; for Tune's files freezegun and scikit-learn), installed once into the
# work directory, never into the venv that `make test` uses. The second group is installed
# without its dependencies (numpy, scipy, python-dateutil: the venv has them), so that no
# second copy of those shadows the venv's. A failed install (no network) only leaves the
# files needing them uncollected, as before.
TEST_DEPS="$WORK/test_deps"
TEST_DEPS_SPEC=("setuptools<81" "python-snappy")
TEST_DEPS_NODEPS_SPEC=("freezegun" "scikit-learn" "joblib" "threadpoolctl" "narwhals")
if [[ ${RAY_COMPAT_TEST_DEPS:-1} == 1 && "$(cat "$TEST_DEPS/.installed" 2>/dev/null)" != "${TEST_DEPS_SPEC[*]} ${TEST_DEPS_NODEPS_SPEC[*]}" ]]; then
    echo "installing Ray's test-only dependencies (${TEST_DEPS_SPEC[*]} ${TEST_DEPS_NODEPS_SPEC[*]}) into $TEST_DEPS"
    rm -rf "$TEST_DEPS"
    if "$PY" -m pip install --quiet --disable-pip-version-check --no-warn-conflicts \
        --target "$TEST_DEPS" "${TEST_DEPS_SPEC[@]}" &&
        "$PY" -m pip install --quiet --disable-pip-version-check --no-warn-conflicts --no-deps \
            --target "$TEST_DEPS" "${TEST_DEPS_NODEPS_SPEC[@]}"; then
        echo "${TEST_DEPS_SPEC[*]} ${TEST_DEPS_NODEPS_SPEC[*]}" >"$TEST_DEPS/.installed"
    else
        echo "warning: could not install ${TEST_DEPS_SPEC[*]} ${TEST_DEPS_NODEPS_SPEC[*]}; test_filter.py, test_binary.py," \
            "Tune's test_tuner.py and test_stopper.py will not collect" >&2
    fi
fi

# The shim (`import ray` is oxray in every process) and the harness's modules come first
# on PYTHONPATH; oxray's node agents and workers inherit it. `ray` on PATH is oxray's CLI.
# The test-only dependencies come last, so they cannot shadow oxray or the shim.
export PYTHONPATH="$HERE/shim:$HERE/harness${PYTHONPATH:+:$PYTHONPATH}"
[[ -f $TEST_DEPS/.installed ]] && PYTHONPATH="$PYTHONPATH:$TEST_DEPS"
export PATH="$HERE/shim/bin:$PATH"
export RAY_COMPAT_PYTHON="$PY"
export RAY_COMPAT_TEST_DIRS
RAY_COMPAT_TEST_DIRS=$(IFS=:; echo "${TEST_DIRS[*]}")
export RAY_COMPAT_OUT="$WORK/results"
export RAY_COMPAT_WORK="$WORK"
export OXRAY_TEMP_DIR="$WORK/oxray_tmp"
unset RAY_ADDRESS OXRAY_ADDRESS OXRAY_TOKEN

cleanup() {
    "$PY" "$HERE/cleanup.py" "$WORK"
}
trap 'cleanup; exit 130' INT TERM

for f in "${SELECTED[@]}"; do
    sub=$(subdir_of "$f")
    name=$(basename "$f")
    stem="${sub}__${name%.py}"
    export RAY_COMPAT_STEM="$stem" RAY_COMPAT_RAY_PATH="$f"
    rm -f "$WORK/results/$stem".*
    # kmock (a library of oxray's own tests) registers a pytest plugin that needs pytest-asyncio.
    PYTEST_ARGS=(-p ray_compat_plugin -p no:cacheprovider -p no:kmock -rA -q --timeout "$TEST_TIMEOUT")
    [[ ${#KEXPR[@]} -gt 0 ]] && PYTEST_ARGS+=(-k "${KEXPR[*]}")
    [[ ${RAY_COMPAT_COLLECT_ONLY:-} == 1 ]] && PYTEST_ARGS+=(--collect-only)
    attempt=0
    unset RAY_COMPAT_RESUME
    while :; do
        start=$(date +%s)
        (cd "$WORK/$sub" && timeout -k 30 "$FILE_TIMEOUT" "$PY" -m pytest "${PYTEST_ARGS[@]}" \
            --junit-xml="$WORK/results/$stem.$attempt.xml" "$name") >"$WORK/results/$stem.$attempt.log" 2>&1
        rc=$?
        cleanup
        printf '%-60s rc=%-3s %4ss\n' "$f" "$rc" "$(($(date +%s) - start))"
        # Killed by the file timeout: the test that was running counts as failed, and the
        # rest of the file runs in a new pytest (RAY_COMPAT_RESUME skips recorded tests).
        if [[ $rc -ne 124 && $rc -ne 137 ]] || [[ $attempt -ge $MAX_RESUMES ]]; then break; fi
        "$PY" "$HERE/summarize.py" --mark-hung "$WORK/results/$stem" "killed: pytest ran past the file timeout (${FILE_TIMEOUT}s) in this test"
        attempt=$((attempt + 1))
        export RAY_COMPAT_RESUME=1
    done
done

"$PY" "$HERE/summarize.py" "$WORK" "$HERE/files.txt"
