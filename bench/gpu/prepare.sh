#!/usr/bin/env bash
# Prepares what bench/gpu/fsdp_bench.py needs on a GPU machine that has
# PyTorch + transformers but no Go toolchain and no network:
#
#   bench/gpu/prepare.sh [ALPACA_JSON [OUT_DIR [RECORDS]]]   # on the build machine, from the repo root
#   → bench/work/gpu/  bin/dataprep.gz, bin/ckptmerge.gz (static linux binaries)
#                      tok/qwen2.5/tokenizer.json.gz (+ tokenizer_config.json)
#                      alpaca.json.gz   the Alpaca records (default: the bundled
#                                       sample cycled to 52,002 records, the size
#                                       of the real Stanford Alpaca)
#
# Then copy the repository with bench/work/gpu to the GPU machine and run
#   python3 bench/gpu/fsdp_bench.py --prepared bench/work/gpu
# (bench/work is git-ignored: carry it explicitly; everything is gzipped to
# stay well under a 64 MiB transfer.)
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${2:-bench/work/gpu}
rm -rf "$out"
mkdir -p "$out/bin" "$out/tok/qwen2.5"
CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$out/bin/" ./cmd/dataprep ./cmd/ckptmerge
gzip -9 "$out/bin/dataprep" "$out/bin/ckptmerge"
zstd -qdcf testdata/tokenizers/qwen2.5/tokenizer.json.zst | gzip -9 >"$out/tok/qwen2.5/tokenizer.json.gz"
cp testdata/tokenizers/qwen2.5/tokenizer_config.json "$out/tok/qwen2.5/"
src=${1:-}
tmp=
if [ -z "$src" ]; then
	tmp=$(mktemp)
	src=$tmp
	zstd -qdcf testdata/alpaca/alpaca_en_demo.json.zst >"$src"
fi
python3 - "$src" "$out/alpaca.json.gz" "${3:-52002}" <<'PY'
import gzip, json, sys
src, dst, want = sys.argv[1], sys.argv[2], int(sys.argv[3])
with open(src, encoding="utf-8") as f:
    text = f.read()
recs = json.loads(text) if text.lstrip().startswith("[") else [json.loads(l) for l in text.splitlines() if l.strip()]
n = max(len(recs), want) if want >= len(recs) else want
out = [recs[i % len(recs)] for i in range(n)]
with gzip.open(dst, "wt", encoding="utf-8", compresslevel=6) as f:
    json.dump(out, f, ensure_ascii=False)
print(f"{dst}: {n} records from {src}")
PY
[ -z "$tmp" ] || rm -f "$tmp"
ls -la "$out" "$out/bin"
du -sh "$out"
