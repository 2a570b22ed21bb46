#!/usr/bin/env bash
# check_layers.sh LAYERS SRCDIR: every #include "dir/..." under SRCDIR/src and
# SRCDIR/include must go down the layer graph, never up or sideways.
#
# LAYERS is written by CMake (CMakeLists.txt, inferd_layer) at configure time,
# so the rule checked is the one the build links by:
#   dir PREFIX LAYER         #include "PREFIX/..." is a header of LAYER, and
#                            files under src/PREFIX (include/PREFIX) belong to it
#   uses LAYER L1 L2 ...     LAYER may include itself and L1 L2 ... (the layers
#                            it links, directly or through another)
# An include of a header with no directory ("impl.h") names a file next to
# the includer and is always allowed; one that climbs out ("../x.h") is not.
#
# Prints one line per offending include (file:line, the include, the rule)
# and exits 1; exits 0 when every include goes the right way. The build runs
# it before compiling (target inferd_layer_check), tests/lint/test_layers.sh
# runs it from ctest.
set -euo pipefail
layers=${1:?usage: check_layers.sh LAYERS SRCDIR}
root=${2:?usage: check_layers.sh LAYERS SRCDIR}
[ -r "$layers" ] || { echo "check_layers: cannot read '$layers'"; exit 1; }
layers=$(realpath "$layers")
cd "$root"
mapfile -t files < <(find src include -name '*.[ch]' 2>/dev/null | LC_ALL=C sort)
[ ${#files[@]} -gt 0 ] || { echo "check_layers: no sources under $root/src"; exit 1; }
awk -v layers="$layers" '
BEGIN {
    while ((getline line < layers) > 0) {
        n = split(line, f, " ")
        if (f[1] == "dir") {
            layer_of[f[2]] = f[3]
        } else if (f[1] == "uses") {
            for (i = 3; i <= n; i++) uses[f[2], f[i]] = 1
            list[f[2]] = ""
            for (i = 3; i <= n; i++) if (f[i] != f[2]) list[f[2]] = list[f[2]] " " f[i]
        }
    }
    close(layers)
    bad = 0
}
FNR == 1 {
    split(FILENAME, p, "/")   # src/kv/pool.c -> kv ; include/inferd/inferd.h -> inferd
    own = layer_of[p[2]]
    if (own == "") {
        printf "%s: directory %s/%s belongs to no layer (declare it with inferd_layer in CMakeLists.txt)\n", FILENAME, p[1], p[2]
        bad = 1
    }
}
/^[ \t]*#[ \t]*include[ \t]*"/ {
    inc = $0
    sub(/^[^"]*"/, "", inc)
    sub(/".*$/, "", inc)
    if (inc ~ /(^|\/)\.\.(\/|$)/) {
        printf "%s:%d: #include \"%s\": climbs out of its directory; name the header by its layer (\"dir/file.h\")\n", FILENAME, FNR, inc
        bad = 1
        next
    }
    if (inc !~ /\//) next
    dir = inc
    sub(/\/.*$/, "", dir)
    to = layer_of[dir]
    if (to == "") {
        printf "%s:%d: #include \"%s\": %s/ is in no layer\n", FILENAME, FNR, inc, dir
        bad = 1
    } else if (own != "" && !((own, to) in uses)) {
        printf "%s:%d: #include \"%s\": layer %s may not include layer %s (%s uses only:%s; dependencies point down: CMakeLists.txt, docs/architecture.md)\n", FILENAME, FNR, inc, own, to, own, list[own] == "" ? " nothing" : list[own]
        bad = 1
    }
}
END { exit bad }
' "${files[@]}"
