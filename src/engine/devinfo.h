/* devinfo: how much memory the engine's device has, and how much is free
 * now, without allocating any of it (`inferd --device-info`, and the
 * headroom check of inferd-cutover).
 *
 * For a CUDA device it asks NVML (libnvidia-ml.so.1, loaded with dlopen, so
 * that the build needs neither nvml.h nor the library): NVML reads the
 * driver's counters and creates no CUDA context. A context takes device
 * memory itself (hundreds of MiB on a large card), so measuring through one
 * would report less free memory than the next instance will find. Only when
 * NVML is absent does it fall back to cudaMemGetInfo, which creates one; the
 * result names the source used. For the CPU engine the "device" is the
 * host, and free is the kernel's MemAvailable.
 *
 * It is not a monitor: one reading, for a decision made now. */
#ifndef INFERD_DEVINFO_H
#define INFERD_DEVINFO_H

#include <stdint.h>
#include <stdio.h>

#include "core/errbuf.h"
#include "core/plan.h"

typedef struct devinfo {
        backend_t backend;      /* CUDA (a GPU) or CPU (the host's memory) */
        int device;             /* CUDA ordinal; -1 for the host */
        char name[96];          /* "NVIDIA H200"; "host" */
        char pci_bus_id[32];    /* CUDA only: "0000:19:00.0" */
        uint64_t total_bytes;
        uint64_t free_bytes;    /* NVML's free, cudaMemGetInfo's free, or MemAvailable */
        const char *source;     /* "nvml", "cudaMemGetInfo" or "/proc/meminfo" */
        char note[256];         /* why NVML was not used, when it was not; "" otherwise */
} devinfo_t;

/* The host, from a meminfo file (NULL: /proc/meminfo): MemTotal and
 * MemAvailable. -ENOENT when the file cannot be read, -EINVAL when either
 * line is missing. */
int devinfo_host(devinfo_t *ret, const char *meminfo_path, errbuf_t *err);

/* CUDA device `device`: NVML when it loads, else cudaMemGetInfo. -ENODEV,
 * with the reason, when there is no such usable device. */
int devinfo_cuda(int device, devinfo_t *ret, errbuf_t *err);

/* The device the engine would run on for this backend: the host for CPU,
 * the GPU for CUDA (or -ENODEV), and for AUTO the GPU when the CUDA engine
 * could use one, else the host (as engine_open falls back). */
int devinfo_query(backend_t backend, int device, devinfo_t *ret, errbuf_t *err);

/* One JSON object on one line: device ("cuda:0" or "host"), name,
 * pci_bus_id (CUDA), total_bytes, free_bytes, source, and note when set.
 * Returns 0 or -EIO. */
int devinfo_write_json(const devinfo_t *d, FILE *out);

/* Plain text for people: name, total, free, source. */
int devinfo_write_text(const devinfo_t *d, FILE *out);

#endif
