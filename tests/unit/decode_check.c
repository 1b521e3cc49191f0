/* decode_check: see decode_check.h. */
#include "decode_check.h"

#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/plan.h"
#include "decode/decode.h"
#include "decode/resize.h"
#include "unit.h"

void decode_check_resize(const uint8_t *img, int w, int h, int ch, uint8_t *out) {
        plan_decode_terms_t t;
        resize_scratch_t s;
        errbuf_t err;

        CU_ASSERT_FATAL(plan_decode_terms((uint64_t)w * h, 0, &t) == 0);
        s.rows = malloc(t.resize_bytes);
        s.rows_cap = t.resize_rows;
        s.taps_cap = t.resize_taps;
        s.coef_x = malloc(224 * t.resize_taps * sizeof(int32_t));
        s.coef_y = malloc(224 * t.resize_taps * sizeof(int32_t));
        s.first_x = malloc(224 * sizeof(int32_t));
        s.first_y = malloc(224 * sizeof(int32_t));
        s.count_x = malloc(224 * sizeof(int32_t));
        s.count_y = malloc(224 * sizeof(int32_t));
        CU_ASSERT_FATAL(resize_crop(img, (uint32_t)w, (uint32_t)h, (size_t)w * ch, ch, &s, out, &err) == 0);
        free(s.rows);
        free(s.coef_x);
        free(s.coef_y);
        free(s.first_x);
        free(s.first_y);
        free(s.count_x);
        free(s.count_y);
}

/* Reads a "Vm...:  N kB" line of /proc/self/status, in bytes; 0 if absent. */
static uint64_t decode_check_status_bytes(const char *key) {
        char line[256];
        uint64_t kb = 0;
        FILE *f = fopen("/proc/self/status", "r");

        if (!f)
                return 0;
        while (fgets(line, sizeof(line), f))
                if (strncmp(line, key, strlen(key)) == 0) {
                        kb = strtoull(line + strlen(key), NULL, 10);
                        break;
                }
        fclose(f);
        return kb * 1024;
}

/* The child's side: exits 0 after writing got[3] to fd, else 2 to 5. */
static void decode_check_child(uint64_t max_pixels, record_format_t format, decode_check_make_t make,
                               decode_check_free_t free_input, int fd) {
        uint8_t *input, out[224 * 224 * 3];
        uint64_t res[3] = { 0, 0, 0 };
        size_t len = 0;
        decode_t *d = NULL;
        const char *code = NULL;
        errbuf_t err;
        FILE *f;

        mallopt(M_MMAP_THRESHOLD, 128 * 1024);
        mallopt(M_TRIM_THRESHOLD, 128 * 1024);
        input = make(&len);
        if (!input)
                _exit(2);
        /* Free heap pages left resident by earlier tests in the parent go
         * back first, so that reusing them shows. */
        malloc_trim(0);
        f = fopen("/proc/self/clear_refs", "w");
        if (!f || fputs("5", f) < 0 || fclose(f) != 0)
                _exit(3);
        res[0] = decode_check_status_bytes("VmRSS:");
        if (decode_new(&d, max_pixels, DECODE_DEFAULT_MAX_BYTES, false, &err) < 0 ||
            decode_record(d, input, len, format, out, NULL, &code, &err) < 0)
                _exit(4);
        res[1] = decode_check_status_bytes("VmHWM:");
        res[2] = len;
        decode_free(d);
        free_input(input);
        if (write(fd, res, sizeof(res)) != (ssize_t)sizeof(res))
                _exit(5);
        _exit(0);
}

void decode_check_peak_rss(uint64_t max_pixels, record_format_t format, decode_check_make_t make,
                           decode_check_free_t free_input, uint64_t got[3]) {
        int fds[2], status = 0;
        pid_t pid;

        got[0] = got[1] = got[2] = 0;
        CU_ASSERT_FATAL(pipe(fds) == 0);
        pid = fork();
        CU_ASSERT_FATAL(pid >= 0);
        if (pid == 0)
                decode_check_child(max_pixels, format, make, free_input, fds[1]);
        close(fds[1]);
        CU_ASSERT_EQUAL(read(fds[0], got, 3 * sizeof(uint64_t)), (ssize_t)(3 * sizeof(uint64_t)));
        close(fds[0]);
        CU_ASSERT_EQUAL(waitpid(pid, &status, 0), pid);
        CU_ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}
