// Just enough of the CUDA runtime to build lookup.cu with a host compiler and run its kernels on
// the CPU, one thread after another: a check of the port's logic where there is no nvcc. The
// figures come from nvcc on a GPU (run.sh); the ones this prints mean nothing.
#pragma once

#include <chrono>
#include <cstdlib>
#include <cstring>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline

struct dim3 {
    unsigned x = 1, y = 1, z = 1;
};
struct ulonglong2 {
    unsigned long long x, y;
};
inline dim3 blockIdx, threadIdx, blockDim;

#define LDG(p) (*(p))
#define LAUNCH(kernel, grid, block, ...)                                   \
    do {                                                                   \
        blockDim.x = (block);                                              \
        for (unsigned b_ = 0; b_ < (unsigned)(grid); ++b_) {               \
            blockIdx.x = b_;                                               \
            for (unsigned t_ = 0; t_ < (unsigned)(block); ++t_) {          \
                threadIdx.x = t_;                                          \
                kernel(__VA_ARGS__);                                       \
            }                                                              \
        }                                                                  \
    } while (0)

typedef int cudaError_t;
constexpr cudaError_t cudaSuccess = 0;
enum cudaMemcpyKind { cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost };
struct cudaDeviceProp {
    char name[256];
};
typedef std::chrono::steady_clock::time_point* cudaEvent_t;

inline const char* cudaGetErrorString(cudaError_t) { return "host allocation failed"; }
inline cudaError_t cudaMalloc(void** p, size_t n) {
    *p = std::aligned_alloc(256, (n + 255) / 256 * 256);
    return *p ? cudaSuccess : 2;
}
inline cudaError_t cudaFree(void* p) {
    std::free(p);
    return cudaSuccess;
}
inline cudaError_t cudaMemcpy(void* d, const void* s, size_t n, cudaMemcpyKind) {
    std::memcpy(d, s, n);
    return cudaSuccess;
}
inline cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }
inline cudaError_t cudaGetLastError() { return cudaSuccess; }
inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int) {
    std::strcpy(p->name, "the host CPU through cpu_shim.h");
    return cudaSuccess;
}
inline cudaError_t cudaEventCreate(cudaEvent_t* e) {
    *e = new std::chrono::steady_clock::time_point();
    return cudaSuccess;
}
inline cudaError_t cudaEventRecord(cudaEvent_t e) {
    *e = std::chrono::steady_clock::now();
    return cudaSuccess;
}
inline cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
inline cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) {
    *ms = std::chrono::duration<float, std::milli>(*b - *a).count();
    return cudaSuccess;
}
