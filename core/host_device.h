// TRELLIS_HD: a function both host code and CUDA device code can call (inline where nvcc is not
// compiling).
#pragma once

#if defined(__CUDACC__)
#define TRELLIS_HD __host__ __device__ __forceinline__
#else
#define TRELLIS_HD inline
#endif
