# Shared helpers for script tests (sourced). Environment from ctest:
# INFERD_BIN, INFERD_SRC, INFERD_SCRATCH.
set -euo pipefail
: "${INFERD_BIN:?}" "${INFERD_SRC:?}" "${INFERD_SCRATCH:?}"
mkdir -p "$INFERD_SCRATCH/models"
export INFERD_NODE_MODULES="$INFERD_SRC/node_modules"
PY=/usr/bin/python3   # Debian's python3, which has python3-numpy

# model NAME ARGS...: path of a generated model, made once per build tree
# (tests run in parallel: a lock keeps one maker per name).
model() {
    local name=$1; shift
    local path="$INFERD_SCRATCH/models/$name.gguf"
    (
        flock 9
        if [ ! -f "$path" ]; then
            "$INFERD_BIN" model make "$@" -o "$path.tmp" >/dev/null
            mv "$path.tmp" "$path"
        fi
    ) 9>"$path.lock"
    echo "$path"
}

passed=0; failed=0
ok()   { echo "ok   $*"; passed=$((passed + 1)); }
fail() { echo "FAIL $*"; failed=$((failed + 1)); }
finish() {
    echo "$passed passed, $failed failed"
    [ "$failed" -eq 0 ]
}
