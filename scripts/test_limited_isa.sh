#!/usr/bin/env bash
# The numerics tests again with the CPU kernels held to a lower instruction set than this CPU's:
# tests that compare two code paths bit for bit pass on one CPU and fail on another, because
# oneDNN (convolutions, matrix products) picks its kernels by instruction set (issue 36).
#
#   scripts/test_limited_isa.sh [pytest args]      (make test-isa ARGS=...)
#
# On an AVX-512 CPU the kernels are capped at AVX2 (ONEDNN_MAX_CPU_ISA=AVX2, and ATen's own
# vector code with ATEN_CPU_CAPABILITY=avx2): a machine with AVX2 alone, emulated. On a CPU
# with AVX2 or less, oneDNN is capped at SSE4.1 (ATen left alone: torch.compile's C++ code does
# not build for ATen's scalar "default"). ISA_LIMIT="VAR=value ..." chooses the cap instead.
# torch.compile gets a fresh kernel cache: its cache key leaves out ATEN_CPU_CAPABILITY, so
# kernels built for this CPU's own capability would be reused, and reused wrongly.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
NUMERICS_TESTS=(tests/algo tests/models tests/train tests/system/test_deterministic.py)

capability=$("$PY" -c 'import torch; print(torch.backends.cpu.get_cpu_capability())')
if [[ -z ${ISA_LIMIT:-} ]]; then
    if [[ $capability == AVX512 ]]; then
        ISA_LIMIT="ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2"
    else
        ISA_LIMIT="ONEDNN_MAX_CPU_ISA=SSE41"
    fi
fi
read -ra limit <<<"$ISA_LIMIT"
cache=$(mktemp -d)
trap 'rm -rf "$cache"' EXIT
seen=$(env "${limit[@]}" "$PY" -c 'from stampede.config.runtime import cpu_isa; print(cpu_isa())')
echo "test-isa: this CPU's kernels are $capability; again under $ISA_LIMIT (kernels: $seen)"
env "${limit[@]}" TORCHINDUCTOR_CACHE_DIR="$cache" "$PY" -m pytest "${NUMERICS_TESTS[@]}" "$@"
