#!/usr/bin/env bash
# Runs one test with a kernel level forced: isa_forced.sh LEVEL COMMAND...
# (INFERD_ISA=LEVEL for the command and everything it starts). Exits 77,
# which ctest reports as skipped, when this CPU lacks the level: inferd
# itself refuses such a level before doing anything else.
set -u
level=$1; shift
msg=$(INFERD_ISA=$level "$INFERD_BIN" model info /dev/null 2>&1 >/dev/null)
if grep -q "^inferd: INFERD_ISA" <<<"$msg"; then
    echo "skip: $msg"
    exit 77
fi
export INFERD_ISA=$level
exec "$@"
