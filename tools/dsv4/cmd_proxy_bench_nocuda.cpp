// CPU-only builds: `dsv4 proxy-bench` explains that it needs the CUDA build.
#include <cstdio>

#include "tools/dsv4/cmd_proxy_bench.h"

namespace dsv4::cli {
int run_proxy_bench(const ProxyBenchOptions&) {
    std::fprintf(stderr, "proxy-bench: this dsv4 was built without CUDA (nvcc not found)\n");
    return 2;
}
}  // namespace dsv4::cli
