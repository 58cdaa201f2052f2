// CPU-only builds: `dsv4 tune` explains that it needs the CUDA build.
#include <cstdio>

#include "tools/dsv4/cmd_tune.h"

namespace dsv4::cli {
int run_tune_cmd(const TuneCliOptions&) {
    std::fprintf(stderr, "tune: this dsv4 was built without CUDA (nvcc not found)\n");
    return 2;
}
}  // namespace dsv4::cli
