/* Unit tests of devinfo_: the host's memory from a meminfo file, the JSON
 * that inferd --device-info --json prints, and the CUDA path's answer on
 * this machine (no device: -ENODEV with a reason; a device: a reading). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "engine/devinfo.h"
#include "engine/engine.h"
#include "unit.h"

/* Writes text to a new temporary file; returns its path (free it). */
static char *write_temp(const char *text) {
        char *path = strdup("/tmp/inferd-devinfo.XXXXXX");
        int fd = mkstemp(path);
        FILE *f;

        CU_ASSERT_FATAL(fd >= 0);
        f = fdopen(fd, "w");
        fputs(text, f);
        fclose(f);
        return path;
}

static void test_devinfo_host_reads_meminfo(void) {
        char *p = write_temp("MemTotal:       16384000 kB\nMemFree:          100000 kB\n"
                             "MemAvailable:    8192000 kB\nBuffers:           1000 kB\n");
        devinfo_t d;
        errbuf_t err = {};

        CU_ASSERT_EQUAL(devinfo_host(&d, p, &err), 0);
        CU_ASSERT_EQUAL(d.backend, BACKEND_CPU);
        CU_ASSERT_EQUAL(d.device, -1);
        CU_ASSERT_EQUAL(d.total_bytes, 16384000ULL * 1024);
        /* MemAvailable, not MemFree. */
        CU_ASSERT_EQUAL(d.free_bytes, 8192000ULL * 1024);
        CU_ASSERT_STRING_EQUAL(d.source, "/proc/meminfo");
        unlink(p);
        free(p);
}

static void test_devinfo_host_rejects(void) {
        char *p = write_temp("MemTotal:       16384000 kB\nMemFree:          100000 kB\n");
        devinfo_t d;
        errbuf_t err = {};

        CU_ASSERT_EQUAL(devinfo_host(&d, p, &err), -EINVAL);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "MemAvailable"));
        unlink(p);
        CU_ASSERT_EQUAL(devinfo_host(&d, p, &err), -ENOENT);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, p));
        free(p);
        /* The real one. */
        CU_ASSERT_EQUAL(devinfo_host(&d, NULL, &err), 0);
        CU_ASSERT(d.total_bytes > 0 && d.free_bytes <= d.total_bytes);
}

static void test_devinfo_json_shape(void) {
        devinfo_t d = { .backend = BACKEND_CUDA, .device = 1, .name = "NVIDIA Test \"Card\"",
                        .pci_bus_id = "0000:19:00.0", .total_bytes = 11ULL << 30, .free_bytes = 5ULL << 30,
                        .source = "nvml" };
        char *buf = NULL;
        size_t len = 0;
        json_error_t je;
        json_t *o;
        FILE *f = open_memstream(&buf, &len);

        CU_ASSERT_EQUAL(devinfo_write_json(&d, f), 0);
        fclose(f);
        o = json_loads(buf, 0, &je);
        CU_ASSERT_PTR_NOT_NULL_FATAL(o);
        CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(o, "device")), "cuda:1");
        CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(o, "name")), "NVIDIA Test \"Card\"");
        CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(o, "pci_bus_id")), "0000:19:00.0");
        CU_ASSERT_EQUAL(json_integer_value(json_object_get(o, "total_bytes")), (json_int_t)(11ULL << 30));
        CU_ASSERT_EQUAL(json_integer_value(json_object_get(o, "free_bytes")), (json_int_t)(5ULL << 30));
        CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(o, "source")), "nvml");
        CU_ASSERT_PTR_NULL(json_object_get(o, "note"));
        CU_ASSERT(buf[len - 1] == '\n' && !memchr(buf, '\n', len - 1));
        json_decref(o);
        free(buf);
}

/* Without a usable device the CUDA path says why and reports nothing; with
 * one (a GPU host) it reads the device, free within total. */
static void test_devinfo_cuda_here(void) {
        devinfo_t d;
        errbuf_t err = {};
        int n = engine_cuda_probe(0, NULL, NULL, 0);
        int r = devinfo_cuda(0, &d, &err);

        if (n == 0) {
                CU_ASSERT_EQUAL(r, -ENODEV);
                CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "no usable CUDA device 0"));
                CU_ASSERT_EQUAL(devinfo_query(BACKEND_CUDA, 0, &d, &err), -ENODEV);
                /* auto falls back to the host, as the engine does. */
                CU_ASSERT_EQUAL(devinfo_query(BACKEND_AUTO, 0, &d, &err), 0);
                CU_ASSERT_EQUAL(d.backend, BACKEND_CPU);
        } else {
                CU_ASSERT_EQUAL(r, 0);
                CU_ASSERT(d.total_bytes > 0 && d.free_bytes <= d.total_bytes);
                CU_ASSERT(d.name[0] != '\0' && d.pci_bus_id[0] != '\0');
        }
        CU_ASSERT_EQUAL(devinfo_cuda(n + 1, &d, &err), -ENODEV);
}

int test_devinfo_register(void) {
        static CU_TestInfo tests[] = {
                { "host_reads_meminfo", test_devinfo_host_reads_meminfo },
                { "host_rejects", test_devinfo_host_rejects },
                { "json_shape", test_devinfo_json_shape },
                { "cuda_here", test_devinfo_cuda_here },
                CU_TEST_INFO_NULL,
        };
        return unit_add_suite("devinfo", tests);
}
