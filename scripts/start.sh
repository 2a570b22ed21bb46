#!/usr/bin/env bash
# Starts inferd on the embedded default: one process, data under ./inferd-data.
# Without a model (INFERD_MODEL unset) `inferd serve` makes a small demo model
# on first start (random weights, the real Qwen3 tokenizer) and serves it;
# INFERD_MODEL=FILE.gguf serves a real model. INFERD_PORT / INFERD_HOST pick
# the address (default 127.0.0.1:8080). Ctrl-C stops it cleanly.
set -euo pipefail
cd "$(dirname "$0")/.."
args=(serve --data-dir "${INFERD_DATA:-./inferd-data}" --host "${INFERD_HOST:-127.0.0.1}"
      --port "${INFERD_PORT:-8080}")
[ -n "${INFERD_MODEL:-}" ] && args+=(-m "$INFERD_MODEL")
exec build/release/inferd "${args[@]}"
