/* devinfo: free and total memory of the engine's device, read without
 * allocating (see devinfo.h for why NVML comes first). */
#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "core/units.h"
#include "engine/devinfo.h"
#include "engine/engine.h"

/* --- the host ------------------------------------------------------------- */

int devinfo_host(devinfo_t *ret, const char *meminfo_path, errbuf_t *err) {
        const char *path = meminfo_path ? meminfo_path : "/proc/meminfo";
        unsigned long long total_kib = 0, avail_kib = 0, v;
        bool have_total = false, have_avail = false;
        char line[256];
        FILE *f;

        memset(ret, 0, sizeof(*ret));
        f = fopen(path, "re");
        if (!f)
                return errbuf_set(err, -ENOENT, "cannot read %s: %s", path, strerror(errno));
        while (fgets(line, sizeof(line), f)) {
                if (sscanf(line, "MemTotal: %llu kB", &v) == 1) {
                        total_kib = v;
                        have_total = true;
                } else if (sscanf(line, "MemAvailable: %llu kB", &v) == 1) {
                        avail_kib = v;
                        have_avail = true;
                }
        }
        fclose(f);
        /* MemAvailable is the kernel's own estimate of what can be allocated
         * without swapping (page cache it would drop included); MemFree
         * would understate it badly on a machine that reads a lot. */
        if (!have_total || !have_avail)
                return errbuf_set(err, -EINVAL, "%s has no %s line", path, have_total ? "MemAvailable" : "MemTotal");
        ret->backend = BACKEND_CPU;
        ret->device = -1;
        snprintf(ret->name, sizeof(ret->name), "host");
        ret->total_bytes = (uint64_t)total_kib * 1024;
        ret->free_bytes = (uint64_t)avail_kib * 1024;
        ret->source = "/proc/meminfo";
        return 0;
}

/* --- NVML ----------------------------------------------------------------- */

/* The few NVML declarations used, as nvml.h (not installed here) gives them:
 * nvmlReturn_t is an int enum with NVML_SUCCESS = 0, a device is an opaque
 * pointer, and nvmlMemory_t is { total, free, used } in bytes. The _v2
 * entry points are the ones nvml.h maps the plain names to. */
typedef int nvml_return_t;
typedef struct nvml_device *nvml_device_t;
typedef struct nvml_memory {
        unsigned long long total_bytes;
        unsigned long long free_bytes;
        unsigned long long used_bytes;
} nvml_memory_t;

typedef struct nvml {
        void *lib;
        nvml_return_t (*init)(void);
        nvml_return_t (*shutdown)(void);
        const char *(*error_string)(nvml_return_t r);
        nvml_return_t (*by_pci_bus_id)(const char *bus_id, nvml_device_t *dev);
        nvml_return_t (*name)(nvml_device_t dev, char *name, unsigned int len);
        nvml_return_t (*memory)(nvml_device_t dev, nvml_memory_t *mem);
} nvml_t;

static const char *nvml_error(const nvml_t *n, nvml_return_t r, char *buf, size_t len) {
        const char *s = n->error_string ? n->error_string(r) : NULL;

        snprintf(buf, len, "NVML error %d%s%s", r, s ? ": " : "", s ? s : "");
        return buf;
}

/* Reads the device at bus_id through NVML. -ENOENT when NVML is not there
 * (the caller falls back), -EIO when it is there and fails; why says which. */
static int devinfo_nvml(const char *bus_id, devinfo_t *d, char *why, size_t why_len) {
        nvml_t n = {};
        nvml_device_t dev;
        nvml_memory_t mem;
        nvml_return_t r;
        char buf[160];
        int ret = -EIO;

        n.lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
        if (!n.lib) {
                snprintf(why, why_len, "NVML is not available (%s)", dlerror());
                return -ENOENT;
        }
        n.init = (nvml_return_t (*)(void))dlsym(n.lib, "nvmlInit_v2");
        n.shutdown = (nvml_return_t (*)(void))dlsym(n.lib, "nvmlShutdown");
        n.error_string = (const char *(*)(nvml_return_t))dlsym(n.lib, "nvmlErrorString");
        n.by_pci_bus_id = (nvml_return_t (*)(const char *, nvml_device_t *))dlsym(n.lib, "nvmlDeviceGetHandleByPciBusId_v2");
        n.name = (nvml_return_t (*)(nvml_device_t, char *, unsigned int))dlsym(n.lib, "nvmlDeviceGetName");
        n.memory = (nvml_return_t (*)(nvml_device_t, nvml_memory_t *))dlsym(n.lib, "nvmlDeviceGetMemoryInfo");
        if (!n.init || !n.shutdown || !n.by_pci_bus_id || !n.name || !n.memory) {
                snprintf(why, why_len, "libnvidia-ml.so.1 lacks an entry point inferd uses");
                dlclose(n.lib);
                return -ENOENT;
        }
        r = n.init();
        if (r != 0) {
                snprintf(why, why_len, "nvmlInit failed (%s)", nvml_error(&n, r, buf, sizeof(buf)));
                dlclose(n.lib);
                return -ENOENT;
        }
        /* By PCI bus id, not by index: CUDA orders devices fastest first
         * unless CUDA_DEVICE_ORDER=PCI_BUS_ID, and honours
         * CUDA_VISIBLE_DEVICES; NVML does neither. The bus id is the same
         * device for both. */
        r = n.by_pci_bus_id(bus_id, &dev);
        if (r != 0) {
                snprintf(why, why_len, "NVML has no device at %s (%s)", bus_id, nvml_error(&n, r, buf, sizeof(buf)));
                goto fail;
        }
        r = n.name(dev, d->name, sizeof(d->name));
        if (r != 0) {
                snprintf(why, why_len, "nvmlDeviceGetName failed (%s)", nvml_error(&n, r, buf, sizeof(buf)));
                goto fail;
        }
        r = n.memory(dev, &mem);
        if (r != 0) {
                snprintf(why, why_len, "nvmlDeviceGetMemoryInfo failed (%s)", nvml_error(&n, r, buf, sizeof(buf)));
                goto fail;
        }
        d->total_bytes = mem.total_bytes;
        d->free_bytes = mem.free_bytes;
        d->source = "nvml";
        ret = 0;
fail:
        n.shutdown();
        dlclose(n.lib);
        return ret;
}

/* --- CUDA ------------------------------------------------------------------ */

int devinfo_cuda(int device, devinfo_t *ret, errbuf_t *err) {
        char why[256] = "";
        int r;

        memset(ret, 0, sizeof(*ret));
        ret->backend = BACKEND_CUDA;
        ret->device = device;
        /* The probe counts devices without a context; it also refuses what
         * the CUDA engine cannot run on, which is the device that matters. */
        if (engine_cuda_probe(device, NULL, why, sizeof(why)) <= device)
                return errbuf_set(err, -ENODEV, "no usable CUDA device %d: %s", device, why);
        r = engine_cuda_pci_bus_id(device, ret->pci_bus_id, sizeof(ret->pci_bus_id), err);
        if (r < 0)
                return r;
        r = devinfo_nvml(ret->pci_bus_id, ret, why, sizeof(why));
        if (r == 0)
                return 0;
        /* NVML failed or is absent: measure through a context, which takes
         * some of what it measures; the note says so (why cut so that
         * the sentence after it always fits). */
        snprintf(ret->note, sizeof(ret->note), "%.160s; cudaMemGetInfo created a CUDA context, whose own memory is not counted as free", why);
        r = engine_cuda_device_memory(device, ret->name, sizeof(ret->name), &ret->total_bytes, &ret->free_bytes, err);
        if (r < 0)
                return r;
        ret->source = "cudaMemGetInfo";
        return 0;
}

int devinfo_query(backend_t backend, int device, devinfo_t *ret, errbuf_t *err) {
        switch (backend) {
        case BACKEND_CPU:
                return devinfo_host(ret, NULL, err);
        case BACKEND_CUDA:
                return devinfo_cuda(device, ret, err);
        case BACKEND_AUTO:
                if (engine_cuda_probe(device, NULL, NULL, 0) > device)
                        return devinfo_cuda(device, ret, err);
                return devinfo_host(ret, NULL, err);
        }
        return errbuf_set(err, -EINVAL, "unknown backend %d", (int)backend);
}

/* --- output ----------------------------------------------------------------- */

int devinfo_write_json(const devinfo_t *d, FILE *out) {
        char device[32];
        json_t *o;
        int r;

        if (d->backend == BACKEND_CUDA)
                snprintf(device, sizeof(device), "cuda:%d", d->device);
        else
                snprintf(device, sizeof(device), "host");
        o = json_pack("{s:s, s:s, s:I, s:I, s:s}", "device", device, "name", d->name, "total_bytes",
                      (json_int_t)d->total_bytes, "free_bytes", (json_int_t)d->free_bytes, "source", d->source);
        if (!o)
                return -ENOMEM;
        if (d->pci_bus_id[0])
                json_object_set_new(o, "pci_bus_id", json_string(d->pci_bus_id));
        if (d->note[0])
                json_object_set_new(o, "note", json_string(d->note));
        r = json_dumpf(o, out, JSON_COMPACT | JSON_PRESERVE_ORDER);
        json_decref(o);
        if (r < 0 || fputc('\n', out) == EOF)
                return -EIO;
        return 0;
}

int devinfo_write_text(const devinfo_t *d, FILE *out) {
        char total[32], free_s[32];

        if (d->backend == BACKEND_CUDA)
                fprintf(out, "device: cuda:%d, %s (%s)\n", d->device, d->name, d->pci_bus_id);
        else
                fprintf(out, "device: host (the CPU engine's memory)\n");
        fprintf(out, "total:  %s (%" PRIu64 " bytes)\nfree:   %s (%" PRIu64 " bytes)\nsource: %s\n",
                units_format_size(d->total_bytes, total, sizeof(total)), d->total_bytes,
                units_format_size(d->free_bytes, free_s, sizeof(free_s)), d->free_bytes, d->source);
        if (d->note[0])
                fprintf(out, "note:   %s\n", d->note);
        return ferror(out) ? -EIO : 0;
}
