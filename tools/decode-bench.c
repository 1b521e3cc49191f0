/* decode-bench: inferd's JPEG/PNG/WebP path (decode, Resize(256),
 * CenterCrop(224) to RGB8) timed on files, for tools/bench-decode.
 *
 *   decode-bench [--fast] [--exif-orientation] SECONDS THREADS FILE...
 *
 * Reads every file into memory first, then runs THREADS threads, each with
 * its own decode context (src/decode, 50 MP / 20 MiB limits, as the
 * daemon's defaults), each decoding the files round-robin (thread t starting
 * at file t) for SECONDS after one warm-up pass. Prints one JSON line:
 * images_per_second (all threads), per_thread, threads, images, seconds.
 * --fast: the contexts in [decode] fast mode (decode_set_fast);
 * --exif-orientation: turning images by their EXIF orientation
 * (decode_set_exif_orientation). Each file's format is sniffed from its
 * bytes (record_identify).
 * A file that does not decode is an error (exit 1) before timing starts.
 * It is a benchmark: it prints figures and passes or fails on none. */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "decode/decode.h"

typedef struct bench_file {
        uint8_t *data;
        size_t len;
        record_format_t format;
} bench_file_t;

typedef struct bench_thread {
        pthread_t tid;
        int index;
        const bench_file_t *files;
        int n_files;
        double seconds;
        long images;
        int failed;
} bench_thread_t;

/* Every thread warms up, then all start timing together. */
static pthread_barrier_t bench_start;
static double bench_seconds;
static bool bench_fast, bench_exif;

static double bench_now_s(void) {
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void *bench_run(void *arg) {
        bench_thread_t *t = arg;
        static _Thread_local uint8_t out[224 * 224 * 3];
        decode_t *d = NULL;
        const char *code;
        errbuf_t err;
        double t0;

        if (decode_new(&d, DECODE_DEFAULT_MAX_PIXELS, DECODE_DEFAULT_MAX_BYTES, false, &err) < 0) {
                fprintf(stderr, "decode-bench: %s\n", err.msg);
                t->failed = 1;
                pthread_barrier_wait(&bench_start);
                return NULL;
        }
        decode_set_fast(d, bench_fast);
        decode_set_exif_orientation(d, bench_exif);
        for (int i = 0; i < t->n_files; i++)    /* warm-up: page in the buffers and the libraries */
                if (decode_record(d, t->files[i].data, t->files[i].len, t->files[i].format, out, NULL, &code, &err) < 0) {
                        fprintf(stderr, "decode-bench: file %d: %s [%s]\n", i, err.msg, code);
                        t->failed = 1;
                        break;
                }
        pthread_barrier_wait(&bench_start);
        if (t->failed) {
                decode_free(d);
                return NULL;
        }
        t0 = bench_now_s();
        for (long k = t->index;; k++) {
                const bench_file_t *f = &t->files[k % t->n_files];

                decode_record(d, f->data, f->len, f->format, out, NULL, &code, &err);
                t->images++;
                if ((t->seconds = bench_now_s() - t0) >= bench_seconds)
                        break;
        }
        decode_free(d);
        return NULL;
}

int main(int argc, char **argv) {
        bench_thread_t *threads;
        bench_file_t *files;
        double seconds, total = 0, longest = 0;
        long images = 0;
        int n_threads, n_files, bad = 0;
        const char *code;

        while (argc > 1 && (strcmp(argv[1], "--fast") == 0 || strcmp(argv[1], "--exif-orientation") == 0)) {
                if (strcmp(argv[1], "--fast") == 0)
                        bench_fast = true;
                else
                        bench_exif = true;
                argv++;
                argc--;
        }
        if (argc < 4 || (seconds = atof(argv[1])) <= 0 || (n_threads = atoi(argv[2])) < 1 || n_threads > 256) {
                fprintf(stderr, "usage: decode-bench [--fast] [--exif-orientation] SECONDS THREADS FILE...\n");
                return 2;
        }
        n_files = argc - 3;
        files = calloc((size_t)n_files, sizeof(*files));
        threads = calloc((size_t)n_threads, sizeof(*threads));
        for (int i = 0; i < n_files; i++) {
                FILE *f = fopen(argv[3 + i], "rb");
                long size;

                if (!f || fseek(f, 0, SEEK_END) != 0 || (size = ftell(f)) <= 0 || fseek(f, 0, SEEK_SET) != 0) {
                        fprintf(stderr, "decode-bench: %s: cannot read\n", argv[3 + i]);
                        return 1;
                }
                files[i].data = malloc((size_t)size);
                files[i].len = fread(files[i].data, 1, (size_t)size, f);
                fclose(f);
                if (record_identify(files[i].data, files[i].len, NULL, 0, &files[i].format, &code, NULL) < 0 ||
                    !record_is_encoded(files[i].format)) {
                        fprintf(stderr, "decode-bench: %s: not a JPEG, PNG or WebP\n", argv[3 + i]);
                        return 1;
                }
        }
        bench_seconds = seconds;
        pthread_barrier_init(&bench_start, NULL, (unsigned)n_threads);
        for (int t = 0; t < n_threads; t++) {
                threads[t] = (bench_thread_t){ .index = t, .files = files, .n_files = n_files };
                if (pthread_create(&threads[t].tid, NULL, bench_run, &threads[t]) != 0) {
                        fprintf(stderr, "decode-bench: cannot start a thread\n");
                        return 1;
                }
        }
        for (int t = 0; t < n_threads; t++) {
                pthread_join(threads[t].tid, NULL);
                bad |= threads[t].failed;
                images += threads[t].images;
                total += threads[t].images / (threads[t].seconds > 0 ? threads[t].seconds : 1);
                if (threads[t].seconds > longest)
                        longest = threads[t].seconds;
        }
        if (bad)
                return 1;
        printf("{\"images_per_second\":%.2f,\"per_thread\":%.2f,\"threads\":%d,\"files\":%d,\"images\":%ld,"
               "\"seconds\":%.3f}\n",
               total, total / n_threads, n_threads, n_files, images, longest);
        for (int i = 0; i < n_files; i++)
                free(files[i].data);
        free(files);
        free(threads);
        return 0;
}
