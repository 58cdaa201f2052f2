# NCCL is optional: the NCCL communicator (src/dist/nccl_communicator.*) is built only when CUDA
# is enabled and nccl.h + libnccl are found. Search order: -DDSV4_NCCL_ROOT=DIR or the
# DSV4_NCCL_ROOT environment variable (DIR/include, DIR/lib), the nvidia/nccl folder of a pip
# install (what PyTorch ships: site-packages/nvidia/nccl/{include,lib}), then the CUDA toolkit.
set(DSV4_HAVE_NCCL OFF)
if(DSV4_HAVE_CUDA)
  set(DSV4_NCCL_ROOT "$ENV{DSV4_NCCL_ROOT}" CACHE PATH "Folder holding include/nccl.h and lib/libnccl.so*")
  set(_dsv4_nccl_hints ${DSV4_NCCL_ROOT})
  find_program(_dsv4_python NAMES python3 python)
  if(_dsv4_python)
    # nvidia is a namespace package: __path__, not __file__.
    execute_process(COMMAND ${_dsv4_python} -c "import nvidia.nccl as m; print(list(m.__path__)[0])"
                    OUTPUT_VARIABLE _dsv4_py_nccl OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE _rc)
    if(_rc EQUAL 0 AND _dsv4_py_nccl)
      list(APPEND _dsv4_nccl_hints ${_dsv4_py_nccl})
    endif()
  endif()
  list(APPEND _dsv4_nccl_hints ${CUDAToolkit_LIBRARY_ROOT} ${CUDAToolkit_TARGET_DIR})
  find_path(DSV4_NCCL_INCLUDE_DIR nccl.h HINTS ${_dsv4_nccl_hints} ${CUDAToolkit_INCLUDE_DIRS} PATH_SUFFIXES include)
  find_library(DSV4_NCCL_LIBRARY NAMES nccl libnccl.so.2 NAMES_PER_DIR HINTS ${_dsv4_nccl_hints} PATH_SUFFIXES lib lib64)
  if(DSV4_NCCL_INCLUDE_DIR AND DSV4_NCCL_LIBRARY)
    add_library(dsv4_nccl INTERFACE)
    target_include_directories(dsv4_nccl INTERFACE ${DSV4_NCCL_INCLUDE_DIR})
    target_link_libraries(dsv4_nccl INTERFACE ${DSV4_NCCL_LIBRARY} CUDA::cudart)
    set(DSV4_HAVE_NCCL ON)
    message(STATUS "dsv4: NCCL found (${DSV4_NCCL_INCLUDE_DIR}, ${DSV4_NCCL_LIBRARY})")
  else()
    message(STATUS "dsv4: NCCL not found (set DSV4_NCCL_ROOT), NCCL communicator not built")
  endif()
endif()
