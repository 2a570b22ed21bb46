#!/usr/bin/env bash
# Every C file follows .clang-format (make format fixes them).
source "$(dirname "$0")/../lib.sh"
cd "$INFERD_SRC"
files=$(git ls-files '*.c' '*.h' 2>/dev/null || find src include tests -name '*.[ch]')
for f in $files; do
    if clang-format --dry-run -Werror "$f" >/dev/null 2>&1; then
        passed=$((passed + 1))
    else
        fail "$f is not clang-formatted (run: make format)"
    fi
done
echo "checked $(echo "$files" | wc -w) files"
finish
