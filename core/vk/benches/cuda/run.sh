#!/usr/bin/env bash
# Builds the CUDA port of the lookup helper (lookup.cu) with nvcc and prints the three kernels'
# times and ratios for each layout of inputs.
#
#   bash run.sh [INPUTS] [LOADS] [THREADS] [REPEATS]
#
# INPUTS holds 4k/, 64k/ and scattered/ (table.bin, pieces.bin, meta.txt), written on a machine with Rust by
#   cargo bench -p dispatchscope-vk --features bench --bench vk_lookup -- --write-cuda-inputs benches/cuda/inputs
# (cargo runs a bench in its package's directory, core/vk/, so the path is relative to core/vk/)
# (default: inputs/ beside this script). LOADS defaults to 2^26, THREADS to 2^20, REPEATS to 10.
# CUDA_ARCH picks the GPU architecture (default sm_90, the H200). Without nvcc, CPU_CHECK=1 builds
# the same source with g++ against cpu_shim.h and runs a small check of the port's results.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
inputs="${1:-$here/inputs}"
loads="${2:-67108864}"
threads="${3:-1048576}"
repeats="${4:-10}"
out="$(mktemp -d)"
if [ "${CPU_CHECK:-0}" = 1 ]; then
    g++ -O2 -std=c++17 -x c++ -o "$out/lookup_bench" "$here/lookup.cu"
    loads="${2:-1048576}"; threads="${3:-4096}"; repeats="${4:-1}"
else
    nvcc --version | tail -1
    nvcc -O3 -std=c++17 -arch="${CUDA_ARCH:-sm_90}" -o "$out/lookup_bench" "$here/lookup.cu"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
fi
for layout in 4k 64k scattered; do
    "$out/lookup_bench" "$inputs/$layout" "$loads" "$threads" "$repeats"
done
