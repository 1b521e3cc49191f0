/* device: what the CUDA engine says about a device without an engine open:
 * whether one is usable (engine_cuda_probe, for engine.c's backend choice)
 * and, for inferd --device-info (src/engine/devinfo.c), its PCI bus id and
 * its memory. Declared in src/engine/engine.h; engine_cuda_none.c stands in
 * for them in a build without nvcc.
 *
 * It opens no engine and allocates nothing on the device; only
 * engine_cuda_device_memory creates the device's primary context. Errors
 * are a sentence (why, or err), never a log line. */
#include <errno.h>
#include <stdio.h>

#include <cuda_runtime.h>

extern "C" {
#include "engine/engine.h"
#include "core/errbuf.h"
}

extern "C" int engine_cuda_probe(int device, uint64_t *total_bytes, char *why, size_t why_len) {
        cudaDeviceProp prop;
        cudaError_t c;
        int n = 0;

        if (total_bytes)
                *total_bytes = 0;
        if (!why || why_len == 0) {
                static char ignored[8];
                why = ignored;
                why_len = sizeof(ignored);
        }
        why[0] = '\0';
        /* cudart_static dlopens libcuda here; without a driver this returns
         * cudaErrorInsufficientDriver, without a device cudaErrorNoDevice.
         * Neither creates a context. */
        c = cudaGetDeviceCount(&n);
        if (c != cudaSuccess) {
                snprintf(why, why_len, "%s (CUDA error %d: %s)",
                         c == cudaErrorNoDevice ? "no CUDA device" : "no usable CUDA driver", (int)c,
                         cudaGetErrorString(c));
                (void)cudaGetLastError();
                return 0;
        }
        if (n <= 0) {
                snprintf(why, why_len, "no CUDA device");
                return 0;
        }
        if (device < 0 || device >= n) {
                snprintf(why, why_len, "CUDA device %d does not exist (this machine has %d)", device, n);
                return 0;
        }
        c = cudaGetDeviceProperties(&prop, device);
        if (c != cudaSuccess) {
                snprintf(why, why_len, "cannot query CUDA device %d (CUDA error %d: %s)", device, (int)c,
                         cudaGetErrorString(c));
                (void)cudaGetLastError();
                return 0;
        }
        if (prop.major < 8) {
                snprintf(why, why_len, "CUDA device %d (%s) has compute capability %d.%d; the CUDA engine needs 8.0 or newer",
                         device, prop.name, prop.major, prop.minor);
                return 0;
        }
        if (total_bytes)
                *total_bytes = prop.totalGlobalMem;
        return n;
}

/* For devinfo (src/engine/devinfo.c): the bus id that NVML looks the device
 * up by, read without a context. */
extern "C" int engine_cuda_pci_bus_id(int device, char *buf, size_t len, errbuf_t *err) {
        cudaError_t c = cudaDeviceGetPCIBusId(buf, (int)len, device);

        if (c != cudaSuccess) {
                (void)cudaGetLastError();
                return errbuf_set(err, -ENODEV, "cannot read the PCI bus id of CUDA device %d (CUDA error %d: %s)", device,
                                  (int)c, cudaGetErrorString(c));
        }
        return 0;
}

/* devinfo's fallback without NVML. cudaMemGetInfo needs the primary
 * context, so this creates it: its own memory is then no longer "free". The
 * process exits soon after (inferd --device-info), which releases it. */
extern "C" int engine_cuda_device_memory(int device, char *name, size_t name_len, uint64_t *total_bytes,
                                         uint64_t *free_bytes, errbuf_t *err) {
        struct cudaDeviceProp prop;
        size_t free_b = 0, total_b = 0;
        cudaError_t c;

        c = cudaGetDeviceProperties(&prop, device);
        if (c == cudaSuccess)
                c = cudaSetDevice(device);
        if (c == cudaSuccess)
                c = cudaMemGetInfo(&free_b, &total_b);
        if (c != cudaSuccess) {
                (void)cudaGetLastError();
                return errbuf_set(err, -EIO, "cannot measure CUDA device %d's memory (CUDA error %d: %s)", device, (int)c,
                                  cudaGetErrorString(c));
        }
        snprintf(name, name_len, "%s", prop.name);
        *total_bytes = total_b;
        *free_bytes = free_b;
        return 0;
}
