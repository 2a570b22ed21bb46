#!/usr/bin/env bash
# Include directions: every #include "dir/..." in src/ and include/ goes down
# the layer graph the build links by (CMakeLists.txt, inferd_layer; the
# graph is in $INFERD_LAYERS). The same check runs before every build; here
# it also runs on copies of the tree with a wrong-way include planted, to
# show each kind of mistake is caught and named by file, line and rule.
source "$(dirname "$0")/../lib.sh"
: "${INFERD_LAYERS:?}"
check="$INFERD_SRC/scripts/check_layers.sh"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT

if out=$(bash "$check" "$INFERD_LAYERS" "$INFERD_SRC" 2>&1); then ok "the tree: every include points down"
else fail "the tree:"; echo "$out"; fi

# plant ROOT FILE LINE: appends LINE to ROOT/FILE (made if missing)
plant() { mkdir -p "$(dirname "$1/$2")"; printf '%s\n' "$3" >>"$1/$2"; }
# expect NAME ROOT PATTERN: the check fails on ROOT and prints PATTERN
expect() {
    local rc=0 out
    out=$(bash "$check" "$INFERD_LAYERS" "$2" 2>&1) || rc=$?
    if [ "$rc" -eq 1 ] && grep -qF -- "$3" <<<"$out"; then ok "$1"
    else fail "$1: exit $rc: $out"; fi
}
fresh() { rm -rf "$work/t"; mkdir -p "$work/t"; cp -r "$INFERD_SRC/src" "$INFERD_SRC/include" "$work/t/"; }

# a copy of the real tree: still clean, then one wrong include in a real file
fresh
n=$(wc -l <"$work/t/src/kv/pool.c")
bash "$check" "$INFERD_LAYERS" "$work/t" >/dev/null && ok "a copy of the tree is clean" || fail "copy not clean"
plant "$work/t" src/kv/pool.c '#include "engine/forward.h"'
expect "up: kv includes engine" "$work/t" \
    "src/kv/pool.c:$((n + 1)): #include \"engine/forward.h\": layer kv may not include layer engine (kv uses only: model gguf base kernels"
fresh
plant "$work/t" src/base/log.c '#include "serve/serve.h"'
expect "up: base includes serve" "$work/t" "layer base may not include layer serve (base uses only: nothing"
fresh
plant "$work/t" src/gguf/gguf_read.c '#include "kernels/kernels.h"'
expect "sideways: gguf includes kernels" "$work/t" "layer gguf may not include layer kernels"
fresh
plant "$work/t" src/net/sse.c '#include "api/api.h"'
expect "up: net includes api" "$work/t" "layer net may not include layer api"
fresh
plant "$work/t" include/inferd/inferd.h '#include "serve/serve.h"'
expect "the public API header is the engine's" "$work/t" "include/inferd/inferd.h"
fresh
plant "$work/t" src/kv/prefix.c '#include "../engine/forward.h"'
expect "relative climb" "$work/t" "climbs out of its directory"
fresh
plant "$work/t" src/tenant/keys.c '#include "base/err.h"'
expect "a directory in no layer" "$work/t" "src/tenant belongs to no layer"
fresh
plant "$work/t" src/engine/engine.c '#include "nosuch/x.h"'
expect "an include of no layer" "$work/t" "nosuch/ is in no layer"
# the right way: allowed includes stay allowed
fresh
plant "$work/t" src/serve/server.c '#include "kernels/kernels.h"'
plant "$work/t" src/cmd/main.c '#include "bench/peak.h"'
plant "$work/t" src/engine/engine.c '#include "inferd/inferd.h"'
bash "$check" "$INFERD_LAYERS" "$work/t" >/dev/null && ok "includes down several layers pass" \
    || fail "downward includes refused"
finish
