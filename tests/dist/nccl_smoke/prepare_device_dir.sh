#!/usr/bin/env bash
# Here (the build machine): builds the standalone smoke test and lays out DIR (default
# /work/main/.gpu/dist) for device_check.sh: the stripped binary, the sources the standalone
# build needs, and the fmt headers. Then: run(command="cd .gpu/dist && ./device_check.sh",
# carry=[".gpu/dist"]).
set -euo pipefail
cd "$(dirname "$0")/../../.."
DIR=${1:-/work/main/.gpu/dist}
cmake -S tests/dist/nccl_smoke -B build-nccl-smoke -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
ninja -C build-nccl-smoke
rm -rf "$DIR" && mkdir -p "$DIR/tree" "$DIR/fmt-include"
cp build-nccl-smoke/dsv4_nccl_smoke tests/dist/nccl_smoke/device_check.sh "$DIR/"
strip "$DIR/dsv4_nccl_smoke"
for f in cmake/dsv4_nccl.cmake src/dist/nccl_communicator.h src/dist/nccl_communicator.cpp src/dist/communicator.h \
         src/dist/communicator.cpp src/core/status.h src/core/status.cpp src/core/dtype.h src/core/dtype.cpp \
         src/core/check.h tests/dist/nccl_smoke/CMakeLists.txt tests/dist/nccl_smoke/nccl_smoke.cpp; do
    mkdir -p "$DIR/tree/$(dirname "$f")" && cp "$f" "$DIR/tree/$f"
done
cp -r "$(dirname "$(find /usr/include /usr/local/include -path '*fmt/format.h' | head -1)")" "$DIR/fmt-include/"
git rev-parse HEAD > "$DIR/git_sha"
du -sh "$DIR"
