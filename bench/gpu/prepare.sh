#!/usr/bin/env bash
# Prepares, on the build machine (Go, zstd, xz), what bench/gpu/run.sh needs on
# a GPU machine that has PyTorch + transformers but no Go, no zstd and no network:
#
#   bench/gpu/prepare.sh [--out DIR] [--src DIR] [--records N]
#
#   --out DIR      where to write (default bench/work/gpu, git-ignored: carry it)
#   --src DIR      the source tree the binaries are built from (default: this
#                  repository; a clean clone when the working tree is in flux)
#   --records N    the first N records of the Alpaca sample (default: all 999)
#
# → DIR/bin/{dataprep,ckptmerge,ferry-serve}.xz   static linux/amd64 binaries
#   DIR/alpaca.json.gz                             the bundled Alpaca sample
#   DIR/prepared.json                              commit, Go version, sizes
#
# The binaries are xz -9e (about 15 MiB; Python's lzma unpacks them there).
# The tokenizers are not copied: run.sh reads the tracked
# testdata/tokenizers/*/tokenizer.json.zst with pyarrow's zstd. The device
# machine takes the working tree plus carried paths up to 64 MiB together.
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD
out=bench/work/gpu
src=$repo
records=0
while [ $# -gt 0 ]; do
	case $1 in
	--out) out=$2; shift 2 ;;
	--src) src=$2; shift 2 ;;
	--records) records=$2; shift 2 ;;
	-h|--help) sed -n '2,20p' "$0"; exit 0 ;;
	*) echo "prepare.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
	esac
done
for t in go zstd xz python3; do
	command -v "$t" >/dev/null || { echo "prepare.sh: $t not found on PATH" >&2; exit 1; }
done
rm -rf "$out"
mkdir -p "$out/bin"
out=$(cd "$out" && pwd)

(cd "$src" && CGO_ENABLED=0 GOOS=linux GOARCH=amd64 go build -trimpath -ldflags='-s -w' -o "$out/bin/" \
	./cmd/dataprep ./cmd/ckptmerge ./cmd/ferry-serve)
for b in dataprep ckptmerge ferry-serve; do
	xz -9e -T2 "$out/bin/$b"
done
zstd -qdcf testdata/alpaca/alpaca_en_demo.json.zst | python3 -c '
import gzip, json, sys
recs = json.load(sys.stdin)
n = int(sys.argv[2]) or len(recs)
with gzip.open(sys.argv[1], "wt", encoding="utf-8", compresslevel=6) as f:
    json.dump(recs[:n], f, ensure_ascii=False)
print(f"{sys.argv[1]}: {min(n, len(recs))} of the {len(recs)} records of testdata/alpaca/alpaca_en_demo.json.zst")
' "$out/alpaca.json.gz" "$records"

commit=$(git -C "$src" rev-parse HEAD 2>/dev/null || echo unknown)
dirty=$(git -C "$src" status --porcelain --untracked-files=no 2>/dev/null | head -c1 | wc -c)
python3 - "$out" "$commit" "$dirty" "$(go version)" "$src" <<'PY'
import datetime, json, os, sys
out, commit, dirty, gov, src = sys.argv[1:]
files = {os.path.relpath(os.path.join(d, f), out): os.path.getsize(os.path.join(d, f))
         for d, _, fs in os.walk(out) for f in fs}
info = {"commit": commit, "source_tree_modified": dirty != "0", "source": os.path.abspath(src), "go": gov,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "files": files, "bytes": sum(files.values())}
with open(os.path.join(out, "prepared.json"), "w") as f:
    json.dump(info, f, indent=1)
print(f"{out}: {len(files)} files, {info['bytes'] / 2**20:.1f} MiB, binaries from {commit[:12]}"
      f"{' (modified tree)' if info['source_tree_modified'] else ''}")
PY

# What a device call would send: the working tree (tracked files and
# untracked files git does not ignore) plus this carried directory, against
# the device tool's 64 MiB limit.
tree=$( { git ls-files -z; git ls-files -z --others --exclude-standard; } 2>/dev/null |
	xargs -0 stat -c %s 2>/dev/null | awk '{s += $1} END {print s + 0}')
carried=$(du -sb "$out" | cut -f1)
python3 - "$tree" "$carried" <<'PY'
import sys
tree, carried = (int(x) for x in sys.argv[1:])
total = (tree + carried) / 2**20
print(f"device call: working tree {tree / 2**20:.1f} MiB + carried {carried / 2**20:.1f} MiB = {total:.1f} MiB "
      f"(limit 64 MiB){'' if total <= 64 else ': TOO BIG, see bench/gpu/README.md (Running it)'}")
PY
