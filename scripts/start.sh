#!/usr/bin/env bash
# Starts inferd on the embedded default: one process, data under ./inferd-data.
# Until the API server lands, this generates a small test model (random
# weights, real Qwen3 tokenizer) once and runs a generation on it.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=build/release/inferd
data=${INFERD_DATA:-./inferd-data}
model="$data/models/tiny-qwen3-q8_0.gguf"
mkdir -p "$data/models"
if [ ! -f "$model" ]; then
    "$bin" model make --preset tiny --arch qwen3 --type q8_0 -o "$model"
fi
"$bin" model info "$model" >"$data/model-info.txt"
sed -n 1,4p "$data/model-info.txt"
echo
echo "inferd run -m $model --tokens 9707,11,1879,0 -n 32"
"$bin" run -m "$model" --tokens 9707,11,1879,0 -n 32 --temp 0.7 --seed 1
