# Sourced by scripts/device-all.sh and scripts/device-multi.sh on the GPU machine: makes the carried
# binaries of `scripts/device-all.sh --build` runnable and sets up their environment.
# - BIN (default build-all-bin): its xz-compressed binaries are unpacked into a writable copy (the
#   carried folder may be read-only), and BIN then names the copy;
# - LD_LIBRARY_PATH: Python's nvidia-nccl wheel first when present (the NCCL the binaries were built
#   against), and the packed BLAS libraries when the machine lacks them;
# - NCCL_NVLS_ENABLE=0 (NVLink multicast stays off), DSV4_GOLDEN_DIR, DSV4_GIT_SHA (of the build).
BIN=${BIN:-build-all-bin}
if compgen -G "$BIN/*.xz" > /dev/null; then
    UNPACKED=$(mktemp -d)
    cp -r "$BIN"/. "$UNPACKED"/
    for f in "$UNPACKED"/dsv4-proxy-bench.xz "$UNPACKED"/dsv4_cuda_tests.xz \
        "$UNPACKED"/dsv4_multi_gpu_tests.xz; do
        [[ -f "$f" ]] && xz -d -T0 "$f" && chmod +x "${f%.xz}"
    done
    BIN=$UNPACKED
fi
PYNCCL=$(python3 -c "import nvidia.nccl as m; print(list(m.__path__)[0])" 2>/dev/null || true)
[[ -n "$PYNCCL" && -d "$PYNCCL/lib" ]] && export LD_LIBRARY_PATH="$PYNCCL/lib:${LD_LIBRARY_PATH:-}"
export NCCL_NVLS_ENABLE=0
for b in dsv4_cuda_tests dsv4_multi_gpu_tests dsv4-proxy-bench; do
    if [[ -x "$BIN/$b" ]] && ldd "$BIN/$b" | grep -q "libopenblas.*not found"; then
        LIBDIR=$(mktemp -d) && tar -C "$LIBDIR" -xJf "$BIN/blaslibs.tar.xz"
        export LD_LIBRARY_PATH="$LIBDIR/lib:${LD_LIBRARY_PATH:-}"
        break
    fi
done
export DSV4_GOLDEN_DIR="$PWD/tests/data/golden"
export DSV4_GIT_SHA=$(cat "$BIN"/git_sha 2>/dev/null || echo unknown)
