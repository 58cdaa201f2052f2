// DSV4_HD marks small header functions compiled for both the host and the device (nvcc), so the
// CPU reference, the tests and the kernels share one definition.
#pragma once

#ifndef DSV4_HD
#ifdef __CUDACC__
#define DSV4_HD __host__ __device__
#else
#define DSV4_HD
#endif
#endif
