#!/usr/bin/env bash
# Makes an example directory self-contained for `air run` (code_source:
# snapshot uploads only that directory): builds the ferry wheel (`make
# wheel`: the ferry package plus dataprep, ckptmerge and ferry-serve, which
# pip puts on the PATH) and copies the linux/amd64 one (GOARCH=arm64: the
# arm64 one) into DIR, where train.yaml's `dependencies:` names it. The
# wheel can as well be uploaded to a volume and named there.
#
#   examples/bundle.sh examples/torchrun-fsdp
#   examples/bundle.sh examples/ray-train
set -euo pipefail
dir=${1:?usage: examples/bundle.sh EXAMPLE_DIR}
root=$(cd "$(dirname "$0")/.." && pwd)
dir=$(cd "$dir" && pwd)
case ${GOARCH:-amd64} in
amd64) plat=x86_64 ;;
arm64) plat=aarch64 ;;
*) echo "bundle: GOARCH ${GOARCH} has no wheel (amd64 or arm64)" >&2; exit 2 ;;
esac
make -s -C "$root" wheel
whl=$(ls "$root"/dist/ferry-*-py3-none-manylinux_2_17_"$plat".*.whl)
rm -rf "$dir/bin" "$dir/ferry" "$dir"/ferry-*.whl # what earlier bundles left
cp "$whl" "$dir/"
name=$(basename "$whl")
grep -q -- "- ./$name\$" "$dir/train.yaml" || {
	echo "bundle: $dir/train.yaml does not list ./$name in dependencies: (the version changed?)" >&2; exit 1; }
echo "bundle: $dir/$name ready; now: cd $dir && air run -f train.yaml"
