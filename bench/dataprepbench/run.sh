#!/usr/bin/env bash
# dataprep benchmark: ferry dataprep end to end (read, tokenize, pad or pack,
# shuffle, write 16 rank shards + manifest) vs HF tokenizers batch-encoding
# the same formatted texts with the same thread count (tokenization alone),
# side by side in one run (the HF side is bench/anchors/hf_tokenize.py --alpaca
# --out none --bench-line, the harness's anchor: HF tokenizers' Python binding). Prints one JSON line per
# run, then a table.
#
#   bench/dataprepbench/run.sh ALPACA.json TOKENIZER_DIR EOS [THREADS] [RUNS]
#   e.g. bench/dataprepbench/run.sh /data/alpaca_data.json testdata/tokenizers/qwen2.5 '<|endoftext|>' 2
#
# Needs bin/dataprep (make build), a Python with tokenizers ($FERRY_PYTHON,
# default the venv scripts/setup-test-deps builds), /usr/bin/time, zstd (the
# fixture tokenizers are .zst).
# Ratio = dataprep wall time (end to end) / HF encode time with truncation
# only (lower is better; targets: pack <= 0.1, pad <= 0.25); the ratio to HF
# with padding="max_length" (what the seeds run) is printed too. Peak RSS
# from /usr/bin/time (max resident, KiB).
set -euo pipefail
input=${1:?ALPACA.json}
tokdir=${2:?TOKENIZER_DIR}
eos=${3:?EOS token}
threads=${4:-$(nproc)}
runs=${5:-1}
here=$(cd "$(dirname "$0")" && pwd)
python=${FERRY_PYTHON:-${FERRY_CACHE:-$HOME/.cache/ferry}/venv/bin/python}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# HF tokenizers wants a plain tokenizer.json.
tokjson=$tokdir
if [ -d "$tokdir" ]; then
	if [ -f "$tokdir/tokenizer.json" ]; then tokjson=$tokdir/tokenizer.json
	else zstd -dqf "$tokdir/tokenizer.json.zst" -o "$tmp/tokenizer.json"; tokjson=$tmp/tokenizer.json; fi
fi

timed() { # out-file cmd...: runs cmd, appends "wall_s rss_kib" to out-file
	local f=$1; shift
	/usr/bin/time -f '%e %M' -o "$f.time" "$@" > "$f.out"
}

for run in $(seq "$runs"); do
	# Anchors: HF as the seeds call it (truncation + padding to 1024) and
	# HF truncation only (faster: the stricter anchor; ratios use it).
	for v in hf-pad hf-nopad; do
		# One encode_batch over every record (--batch larger than the input).
		extra=()
		[ "$v" = hf-pad ] && extra=(--pad)
		timed "$tmp/$v" env RAYON_NUM_THREADS="$threads" TOKENIZERS_PARALLELISM=true \
			"$python" "$here/../anchors/hf_tokenize.py" --tokenizer "$tokjson" --alpaca --eos "$eos" \
			--max-length 1024 "${extra[@]}" --out none --bench-line --batch 1000000000 "$input"
		read -r w r < "$tmp/$v.time"
		e=$(sed -n 's/.*"encode_s":\([0-9.e-]*\).*/\1/p' "$tmp/$v.out")
		echo "{\"tool\":\"hf-tokenizers\",\"variant\":\"$v\",\"run\":$run,\"threads\":$threads,\"encode_s\":$e,\"wall_s\":$w,\"peak_rss_kib\":$r,\"detail\":$(cat "$tmp/$v.out")}"
		printf '%s\t%s\t%s\t(encode %s s)\n' "$v" "$w" "$r" "$e" >> "$tmp/table"
		[ "$v" = hf-nopad ] && hf_enc=$e
		[ "$v" = hf-pad ] && hfpad_enc=$e
	done
	for mode in pad pack; do
		timed "$tmp/$mode" bin/dataprep --input "$input" --tokenizer "$tokdir" --eos "$eos" \
			--seq-len 1024 --ranks 16 --mode "$mode" --workers "$threads" \
			--out "$tmp/out-$mode" --force --quiet --json
		read -r wall rss < "$tmp/$mode.time"
		ratio=$(awk -v a="$wall" -v b="$hf_enc" 'BEGIN { printf "%.4f", a / b }')
		ratiopad=$(awk -v a="$wall" -v b="$hfpad_enc" 'BEGIN { printf "%.4f", a / b }')
		echo "{\"tool\":\"ferry-dataprep\",\"mode\":\"$mode\",\"run\":$run,\"threads\":$threads,\"wall_s\":$wall,\"peak_rss_kib\":$rss,\"ratio_vs_hf_encode\":$ratio,\"ratio_vs_hf_pad_encode\":$ratiopad,\"summary\":$(cat "$tmp/$mode.out")}"
		printf '%s\t%s\t%s\t%s (vs hf-pad %s)\n' "dataprep-$mode" "$wall" "$rss" "$ratio" "$ratiopad" >> "$tmp/table"
		rm -rf "$tmp/out-$mode"
	done
done
{
	echo "run	wall_s	peak_rss_KiB	ratio(dataprep wall / HF no-pad encode)"
	cat "$tmp/table"
} | column -t -s "$(printf '\t')" >&2
