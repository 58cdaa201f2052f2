# Third-party dependencies, all from Debian packages (see README "Dependencies").
find_package(Threads REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(fmt REQUIRED)
find_package(spdlog REQUIRED)
find_package(CLI11 CONFIG QUIET)
if(NOT CLI11_FOUND)
  find_path(CLI11_INCLUDE_DIR CLI/CLI.hpp REQUIRED)
  add_library(CLI11::CLI11 INTERFACE IMPORTED)
  target_include_directories(CLI11::CLI11 INTERFACE ${CLI11_INCLUDE_DIR})
endif()
find_package(GTest REQUIRED)
set(BLA_VENDOR OpenBLAS)
find_package(BLAS REQUIRED)
find_path(CBLAS_INCLUDE_DIR NAMES cblas.h PATHS /usr/include/x86_64-linux-gnu /usr/include/openblas REQUIRED)

# Header-only logging: keeps the binary free of libspdlog/libfmt sonames, which differ
# between the build machine (Debian 12) and the GPU machine (Ubuntu 24.04).
add_library(dsv4_logging INTERFACE)
target_link_libraries(dsv4_logging INTERFACE spdlog::spdlog_header_only fmt::fmt-header-only)
