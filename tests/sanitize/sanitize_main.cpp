// main() of the sanitized engine and bench suites: gtest_main plus a default filter
// (DSV4_SANITIZE_FILTER, set per target in CMakeLists.txt) that leaves out the tests needing what
// these binaries do not link: the CPU reference model (no_ref_runner.cpp) or the dsv4 executable.
// A --gtest_filter on the command line replaces the default.
#include <gtest/gtest.h>

int main(int argc, char** argv) {
    GTEST_FLAG_SET(filter, DSV4_SANITIZE_FILTER);
    testing::InitGoogleTest(&argc, argv);
    return RUN_ALL_TESTS();
}
