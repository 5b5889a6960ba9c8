/* kern_cuda_device.cu — device discovery for the registry; a missing driver counts as zero devices. */
#include <cuda_runtime.h>

extern "C" int xdc_kern_cuda_device_count_impl(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); /* clear the sticky error so later calls start clean */
        return 0;
    }
    return n;
}
