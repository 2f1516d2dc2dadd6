/*
 * Stub libcuda.so.1 for the gpufleet driver kit (tests only).
 *
 * A driver installs libcuda next to NVML under the same versioned name
 * (libcuda.so.<driver version>, soname libcuda.so.1); NVIDIA's container
 * toolkit locates it to find the driver's library directory and infers the
 * driver version from its file name. This stub has the soname and the few
 * entry points a program probes first. With no kernel driver there is no
 * device: cuInit answers CUDA_ERROR_NO_DEVICE ("no CUDA-capable device is
 * detected"), as libcuda does on a host whose NVIDIA module is not loaded;
 * cuDriverGetVersion, which needs no initialisation, reports the description's
 * cuda_driver_version (default 12020, CUDA 12.2, what 535 ships).
 */
#include "hostdesc.h"

typedef int CUresult;

enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_NO_DEVICE = 100,
};

#define API __attribute__((visibility("default")))

API CUresult cuInit(unsigned int flags)
{
    return flags ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NO_DEVICE;
}

API CUresult cuDriverGetVersion(int *version)
{
    struct gfk_host h = {0};
    if (!version) return CUDA_ERROR_INVALID_VALUE;
    *version = gfk_host_load(&h) == 0 ? (int)j_num(&h.root, "cuda_driver_version", 12020) : 12020;
    gfk_host_free(&h);
    return CUDA_SUCCESS;
}

API CUresult cuDeviceGetCount(int *count)
{
    (void)count;
    return CUDA_ERROR_NOT_INITIALIZED; /* cuInit never succeeds here */
}

static const char *error_text(CUresult error, int name)
{
    switch (error) {
    case CUDA_SUCCESS: return name ? "CUDA_SUCCESS" : "no error";
    case CUDA_ERROR_INVALID_VALUE: return name ? "CUDA_ERROR_INVALID_VALUE" : "invalid argument";
    case CUDA_ERROR_NOT_INITIALIZED: return name ? "CUDA_ERROR_NOT_INITIALIZED" : "initialization error";
    case CUDA_ERROR_NO_DEVICE: return name ? "CUDA_ERROR_NO_DEVICE" : "no CUDA-capable device is detected";
    default: return NULL;
    }
}

API CUresult cuGetErrorString(CUresult error, const char **str)
{
    if (!str || !(*str = error_text(error, 0))) return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

API CUresult cuGetErrorName(CUresult error, const char **str)
{
    if (!str || !(*str = error_text(error, 1))) return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}
