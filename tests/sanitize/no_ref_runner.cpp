// The sanitized suites leave the CPU reference model out (it needs OpenBLAS, and its build under a
// sanitizer costs more CI time than the suites themselves). The few tests that build the tiny
// reference model call make_model_runner; this stand-in lets them link, and sanitize_main.cpp
// filters them out (they run unsanitized in dsv4_server_tests).
#include "runtime/runner_factory.h"

namespace dsv4 {

Result<std::unique_ptr<ModelRunner>> make_model_runner(const RunnerOptions&) {
    return Status(StatusCode::kUnimplemented, "the reference model is not in the sanitized test binaries");
}

}  // namespace dsv4
