#!/usr/bin/env bash
# One GPU-machine call for issue 8's NCCL smoke test: locate NCCL (PyTorch's pip NCCL first),
# run the smoke binary built on the build machine with one rank, then build the standalone
# smoke project there (CMake + nvcc toolkit + NCCL found through DSV4_NCCL_ROOT) and run that
# too. Layout expected next to this script (made by prepare_device_dir.sh): dsv4_nccl_smoke,
# tree/ (the few sources the standalone build needs), fmt/ (fmt headers). Logs under $OUT.
set -u
cd "$(dirname "$0")"
OUT=${OUT:-/tmp/nccl-smoke}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0   # issue 8 item 4; the communicator forces it too
{
    date -u
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
    python3 -c "import nvidia.nccl as m; print('python nvidia.nccl:', list(m.__path__))"
    python3 -c "import torch; print('torch', torch.__version__, 'nccl', torch.cuda.nccl.version(), 'gpus', torch.cuda.device_count())"
    for d in $(python3 -c "import site; print(' '.join(site.getsitepackages()))") /usr/local/cuda/ /usr/lib/x86_64-linux-gnu; do
        find "$d" -maxdepth 6 \( -name nccl.h -o -name 'libnccl.so*' \) 2>/dev/null
    done
} > "$OUT/locate.txt" 2>&1
cat "$OUT/locate.txt"
LIB=$(grep -m1 '/libnccl.so.2$' "$OUT/locate.txt")
[[ -n "$LIB" ]] || { echo "no libnccl.so.2 found"; exit 3; }
ROOT=$(dirname "$(dirname "$LIB")")
echo "NCCL root: $ROOT"
export LD_LIBRARY_PATH="$(dirname "$LIB"):${LD_LIBRARY_PATH:-}"
echo "== prebuilt smoke (built on the build machine)"
timeout 40 ./dsv4_nccl_smoke --ranks 1 2>&1 | tee "$OUT/smoke_prebuilt.txt"
echo "rc=${PIPESTATUS[0]}"
echo "== standalone build here"
{ timeout 60 cmake -S tree/tests/dist/nccl_smoke -B /tmp/build-nccl -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DDSV4_NCCL_ROOT="$ROOT" -DDSV4_FMT_INCLUDE="$PWD/fmt-include" && timeout 60 ninja -C /tmp/build-nccl; } \
    > "$OUT/standalone_build.txt" 2>&1
echo "build rc=$?"; grep -E "NCCL|error" "$OUT/standalone_build.txt" | head -5
if [[ -x /tmp/build-nccl/dsv4_nccl_smoke ]]; then
    timeout 40 /tmp/build-nccl/dsv4_nccl_smoke --ranks 1 2>&1 | tee "$OUT/smoke_standalone.txt"
    echo "rc=${PIPESTATUS[0]}"
fi
