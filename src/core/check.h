// DSV4_CHECK: invariants (programming errors), never user input. Prints the condition, the
// values given and the location, then aborts.
#pragma once

#include <cstdio>
#include <cstdlib>

#include <fmt/format.h>

namespace dsv4::detail {
[[noreturn]] inline void check_failed(const char* cond, const char* file, int line, const std::string& msg) {
    std::fprintf(stderr, "DSV4_CHECK failed: %s at %s:%d %s\n", cond, file, line, msg.c_str());
    std::fflush(stderr);
    std::abort();
}
}  // namespace dsv4::detail

#define DSV4_CHECK(cond, ...)                                                                       \
    do {                                                                                            \
        if (!(cond)) [[unlikely]]                                                                   \
            ::dsv4::detail::check_failed(#cond, __FILE__, __LINE__, ::fmt::format("" __VA_ARGS__)); \
    } while (0)
