#!/usr/bin/env bash
# Split dataprep benchmark: N parts (dataprep --part I/N, run concurrently as
# separate processes on this machine) + dataprep commit, against one
# dataprep run of the same input and flags (the anchor), side by side in the
# same run, for N = 1, 2 and 4 by default. Every split output is checked
# byte-identical to the single run's (shards, loss_tokens.u32, manifest.json
# but stats.seconds).
#
#   bench/parts.sh [INPUT] [TOKENIZER_DIR] [EOS] [MODE] [PARTS] [RUNS]
#   e.g. bench/parts.sh /data/alpaca_data.json testdata/tokenizers/qwen2.5 '<|endoftext|>' pack "1 2 4" 1
#
# INPUT defaults to the bundled testdata/alpaca/alpaca_en_demo.json.zst
# cycled 8 times. A JSON array is converted to JSON Lines first (a JSON
# array is read whole by one part; JSON Lines is split by byte range), and
# the single run reads the same JSON Lines file.
#
# Per N it prints: wall (first part start to commit end), the parts' wall,
# commit's wall, CPU seconds (user+sys, all processes), the largest peak RSS
# of one process and the sum of the parts' peak RSS (they run at once here),
# and the ratio of the single run's wall to the split wall (> 1: split
# faster). It then runs each part of the largest N alone, one after the
# other, to model N machines: modelled wall = the slowest part alone +
# commit. commit's cost per GB of input is commit's wall / input GB.
# Needs bin/dataprep (make build), /usr/bin/time and python3 (json only).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
input=${1:-}
tokdir=${2:-$root/testdata/tokenizers/qwen2.5}
eos=${3:-<|endoftext|>}
mode=${4:-pack}
partsList=${5:-1 2 4}
runs=${6:-1}
bin=${DATAPREP:-$root/bin/dataprep}
[ -x "$bin" ] || { echo "parts.sh: $bin missing: run make build" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

jsonl=$tmp/input.jsonl
python3 - "$input" "$root/testdata/alpaca/alpaca_en_demo.json.zst" "$jsonl" <<'EOF'
import json, subprocess, sys
src, bundled, out = sys.argv[1], sys.argv[2], sys.argv[3]
if src:
    raw = open(src, 'rb').read()
    cycles = 1
else:
    raw = subprocess.run(['zstd', '-dc', bundled], check=True, capture_output=True).stdout
    cycles = 8
text = raw.decode('utf-8').lstrip('\ufeff').lstrip()
if text.startswith('['):
    recs = json.loads(text)
    with open(out, 'w') as f:
        for _ in range(cycles):
            for r in recs:
                f.write(json.dumps(r, ensure_ascii=False) + '\n')
else:
    with open(out, 'w') as f:
        for _ in range(cycles):
            f.write(text if text.endswith('\n') else text + '\n')
EOF
bytes=$(stat -c %s "$jsonl")
flags=(--input "$jsonl" --tokenizer "$tokdir" --eos "$eos" --mode "$mode" --seq-len 1024 --ranks 16 --quiet)

now() { date +%s.%N; }
timed() { # name cmd...: runs cmd under /usr/bin/time; "wall user sys maxrss_kib" in $tmp/name.time
	local n=$1; shift
	/usr/bin/time -f '%e %U %S %M' -o "$tmp/$n.time" "$@" > "$tmp/$n.out"
}
field() { awk -v i="$2" '{print $i}' "$tmp/$1.time"; }

same() { # ref got: byte-identical shards + loss tokens, manifest but stats.seconds
	local ref=$1 got=$2 f
	for f in "$ref"/*; do
		[ "$(basename "$f")" = manifest.json ] && continue
		cmp -s "$f" "$got/$(basename "$f")" || { echo "DIFFERS: $(basename "$f")"; return; }
	done
	python3 - "$ref/manifest.json" "$got/manifest.json" <<'EOF' || { echo "DIFFERS: manifest.json"; return; }
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
for m in (a, b): del m['stats']['seconds']
sys.exit(0 if a == b else 1)
EOF
	echo identical
}

echo "input: $jsonl ($bytes bytes, $(wc -l < "$jsonl") records), $(basename "$tokdir"), mode $mode, seq-len 1024, 16 ranks"
echo "machine: $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-6s %-4s %8s %8s %8s %8s %9s %9s %8s %s\n' run N wall_s parts_s commit_s cpu_s maxRSS_MiB sumRSS_MiB single/N output
for run in $(seq "$runs"); do
	rm -rf "$tmp/single"
	timed single "$bin" "${flags[@]}" --out "$tmp/single"
	sw=$(field single 1)
	printf '%-6s %-4s %8.2f %8s %8s %8.2f %9.0f %9s %8s %s\n' "$run" single "$sw" - - \
		"$(echo "$(field single 2) + $(field single 3)" | bc)" "$(echo "$(field single 4) / 1024" | bc -l)" - 1.00 -
	for n in $partsList; do
		out=$tmp/split-$n
		rm -rf "$out"
		t0=$(now)
		pids=()
		for i in $(seq 0 $((n - 1))); do
			timed "p$n-$i" "$bin" --part "$i/$n" "${flags[@]}" --out "$out" &
			pids+=($!)
		done
		for p in "${pids[@]}"; do wait "$p"; done
		t1=$(now)
		timed "c$n" "$bin" commit "$out" --quiet
		t2=$(now)
		cpu=0 maxrss=$(field "c$n" 4) sumrss=0
		for i in $(seq 0 $((n - 1))); do
			cpu=$(echo "$cpu + $(field "p$n-$i" 2) + $(field "p$n-$i" 3)" | bc)
			r=$(field "p$n-$i" 4)
			sumrss=$((sumrss + r))
			[ "$r" -gt "$maxrss" ] && maxrss=$r
		done
		cpu=$(echo "$cpu + $(field "c$n" 2) + $(field "c$n" 3)" | bc)
		wall=$(echo "$t2 - $t0" | bc)
		printf '%-6s %-4s %8.2f %8.2f %8.2f %8.2f %9.0f %9.0f %8.2f %s\n' "$run" "$n" "$wall" "$(echo "$t1 - $t0" | bc)" \
			"$(field "c$n" 1)" "$cpu" "$(echo "$maxrss / 1024" | bc -l)" "$(echo "$sumrss / 1024" | bc -l)" \
			"$(echo "$sw / $wall" | bc -l)" "$(same "$tmp/single" "$out")"
	done
done
# Model of N machines: each part of the largest N alone, then commit.
n=$(echo "$partsList" | awk '{print $NF}')
out=$tmp/model-$n
rm -rf "$out"
slowest=0
for i in $(seq 0 $((n - 1))); do
	timed "m$n-$i" "$bin" --part "$i/$n" "${flags[@]}" --out "$out"
	w=$(field "m$n-$i" 1)
	echo "part $i/$n alone: $w s, peak RSS $(($(field "m$n-$i" 4) / 1024)) MiB"
	slowest=$(echo "if ($w > $slowest) $w else $slowest" | bc)
done
timed "mc$n" "$bin" commit "$out" --quiet
cw=$(field "mc$n" 1)
echo "commit alone: $cw s, peak RSS $(($(field "mc$n" 4) / 1024)) MiB, $(echo "$cw / ($bytes / 1000000000)" | bc -l | xargs printf '%.2f') s per GB of input; output $(same "$tmp/single" "$out")"
echo "modelled $n machines: slowest part $slowest s + commit $cw s = $(echo "$slowest + $cw" | bc) s vs single $sw s ($(echo "$sw / ($slowest + $cw)" | bc -l | xargs printf '%.2f')x)"
