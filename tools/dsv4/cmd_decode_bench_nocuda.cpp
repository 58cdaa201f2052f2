// CPU-only builds: `dsv4 decode-bench` explains that it needs the CUDA build.
#include <cstdio>

#include "tools/dsv4/cmd_decode_bench.h"

namespace dsv4::cli {
int run_decode_bench(const DecodeBenchOptions&) {
    std::fprintf(stderr, "decode-bench: this dsv4 was built without CUDA (nvcc not found)\n");
    return 2;
}
}  // namespace dsv4::cli
