#!/usr/bin/env bash
# run.sh -- ckptmerge vs the PyTorch way vs cp, side by side, on one machine.
#
# Usage: bench/ckptbench/run.sh [-n RUNS] [-k] [-l LAYERS] [CKPT_DIR]
#   CKPT_DIR  a DCP checkpoint; default: generate the 1.5 GB 4-rank bf16
#             benchmark checkpoint (make_dcp_big_torch2.py --layers 14) into
#             $FERRY_BENCH_WORK/ckpt-big14 (default /tmp/ferry-ckptbench).
#   -n RUNS   alternating runs per side (default 3); medians are reported.
#   -k        skip the PyTorch side.
#   -l LAYERS generate the default checkpoint with this many layers instead
#             of 14 (ckpt-bigLAYERS): -l 60 is 5.5 GB, to show that memory
#             stays bounded whatever the model size.
#
# Sides (each a separate process, timed with /usr/bin/time; outputs fsynced):
#   ckptmerge  bin/ckptmerge CKPT OUT                (built from the tree)
#   torch      bench/anchors/torch2-consolidate.py safetensors (DCP _load_state_dict no_dist + save_file + fsync)
#   cp         cp -r CKPT OUT && sync OUT/*          (the same bytes, copied and fsynced)
#   cp-nosync  cp -r CKPT OUT
# Peak RSS is ckptmerge's own VmHWM (from --json) and ru_maxrss for the others.
# The last line is a JSON object {"bench": {...}} with the medians and ratios.
set -euo pipefail
cd "$(dirname "$0")/../.."
runs=3 skip_torch=0 layers=14
while getopts "n:kl:" o; do
	case $o in
	n) runs=$OPTARG ;;
	k) skip_torch=1 ;;
	l) layers=$OPTARG ;;
	*) sed -n '2,20p' "$0"; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
work=${FERRY_BENCH_WORK:-/tmp/ferry-ckptbench}
py=${FERRY_PYTHON:-${FERRY_CACHE:-$HOME/.cache/ferry}/venv/bin/python}
mkdir -p "$work"
ckpt=${1:-$work/ckpt-big$layers}
if [ ! -f "$ckpt/.metadata" ]; then
	echo "generating $ckpt (torch DCP, 4 ranks, bf16, $layers layers)" >&2
	rm -rf "$ckpt"
	"$py" bench/ckptbench/make_dcp_big_torch2.py "$ckpt" --layers "$layers" --hidden 2048 --intermediate 5632 \
		--vocab 32000 --kv-dim 256 --world-size 4 >&2
fi
go build -o bin/ckptmerge ./cmd/ckptmerge # always the tree being measured
out=$work/out
timefile=$work/time.txt

one() { # side -> prints "wall_s rss_kb"
	rm -rf "$out"
	case $1 in
	ckptmerge)
		/usr/bin/time -o "$timefile" -f "%e %M" bin/ckptmerge --json "$ckpt" "$out" >"$work/ckptmerge.json"
		rss=$(sed -n 's/.*"peak_rss_bytes": \([0-9]*\).*/\1/p' "$work/ckptmerge.json")
		echo "$(cut -d' ' -f1 "$timefile") $((rss / 1024))"
		return ;;
	torch) mkdir -p "$out" && /usr/bin/time -o "$timefile" -f "%e %M" "$py" bench/anchors/torch2-consolidate.py safetensors "$ckpt" "$out/model.safetensors" >/dev/null ;;
	cp) /usr/bin/time -o "$timefile" -f "%e %M" sh -c 'cp -r "$1" "$2" && sync "$2"/* "$2"/.metadata' sh "$ckpt" "$out" ;;
	cp-nosync) /usr/bin/time -o "$timefile" -f "%e %M" cp -r "$ckpt" "$out" ;;
	esac
	cat "$timefile"
}

sides="ckptmerge cp cp-nosync"
[ "$skip_torch" = 1 ] || sides="ckptmerge torch cp cp-nosync"
declare -A walls rsss
for s in $sides; do one "$s" >/dev/null; done # warm-up (page cache)
for ((i = 0; i < runs; i++)); do
	for s in $sides; do
		read -r w r < <(one "$s")
		walls[$s]+="$w " rsss[$s]+="$r "
		printf '%-10s run %d: %6.2f s  %8d KB\n' "$s" "$((i + 1))" "$w" "$r" >&2
	done
done
rm -rf "$out"
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
bytes=$(du -sb "$ckpt" | cut -f1)
json="{\"bench\": {\"checkpoint_bytes\": $bytes, \"runs\": $runs"
for s in $sides; do
	w=$(echo "${walls[$s]}" | median) r=$(echo "${rsss[$s]}" | median)
	k=${s//-/_}
	json+=", \"${k}_wall_s\": $w, \"${k}_peak_rss_kb\": $r"
	printf '%-10s median %6.2f s  peak RSS %8d KB\n' "$s" "$w" "$r" >&2
done
cm=$(echo "${walls[ckptmerge]}" | median)
for s in $sides; do
	[ "$s" = ckptmerge ] && continue
	w=$(echo "${walls[$s]}" | median)
	json+=", \"ckptmerge_vs_${s//-/_}\": $(awk -v a="$w" -v b="$cm" 'BEGIN {printf "%.2f", a / b}')"
done
echo "$json}}"
