/* inferd-produce: a load producer for the daemon's tests, demo and benchmarks.
 *
 *   inferd-produce -b BROKERS -t TOPIC [--count N] [--rate PER_S]
 *                  [--format rgb8|f32|mixed|jpeg|png|webp] [--images DIR] [--bad-fraction F]
 *                  [--keys PREFIX] [--seed S] [--content-type-header yes|no|mixed]
 *                  [--payload tiles|random] [-X PROPERTY=VALUE]... [--timeout-s S]
 *                  [--age-ms MS] [--trace]
 *
 * It produces N records of the raw input formats (src/core/record.h), or of
 * JPEG, PNG or WebP (the files of --images DIR in name order, cycled, or
 * images generated with TurboJPEG / libspng / libwebp from the tiles
 * payload), with keys PREFIX-<i>, a correlation-id header, and a header
 * inferd-test-expect naming the outcome the daemon must reach: "ok", or the
 * DLQ code of a deliberately bad record (bad-size, bad-content-type,
 * decode-failed, too-large). Exactly floor(N * F) records are bad, spread
 * evenly and cycling through the four kinds; with jpeg, png or webp, a
 * too-large record is a bomb header (a JPEG or PNG claiming 60000x60000
 * pixels, a lossless WebP 16384x16384: its largest) and a decode-failed one
 * random bytes after the format's magic. The values are a pure function of
 * (seed, i), so a run can be repeated. The default payload ("tiles", 16x16
 * blocks of one colour) and zstd compression keep records small in a
 * broker's log: librdkafka's mock cluster keeps only the last 5 MiB of each
 * partition, which is 34 random RGB8 records. It waits for every delivery
 * report and prints one JSON line: counts by kind and format, deliveries,
 * and records/s. The producer is idempotent. Exit status: 0 when every
 * record was delivered, 1 otherwise, 2 for bad arguments.
 *
 * --age-ms MS sets every record's Kafka timestamp (CreateTime) MS
 * milliseconds in the past (negative: in the future, a producer's clock
 * skew), for the daemon's deadline on records. --trace adds W3C trace
 * context headers: traceparent 00-<32 hex>-<16 hex>-01 and tracestate
 * inferd=<key>, both a function of (seed, i).
 *
 * It is not a benchmark of the daemon by itself, and it never reads back. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <time.h>

#include <librdkafka/rdkafka.h>
#include <spng.h>
#include <turbojpeg.h>
#include <webp/encode.h>

#include "core/record.h"
#include "core/units.h"
#include "config/cfg.h"
#include "kafka/kafka.h"
#include "decode/decode.h"

typedef enum produce_kind {
        KIND_OK,
        KIND_BAD_SIZE,
        KIND_BAD_CONTENT_TYPE,
        KIND_DECODE_FAILED,
        KIND_TOO_LARGE,
        KIND_COUNT,
} produce_kind_t;

static const char *const kind_names[KIND_COUNT] = {
        "ok", RECORD_ERR_BAD_SIZE, RECORD_ERR_BAD_CONTENT_TYPE, RECORD_ERR_DECODE_FAILED, RECORD_ERR_TOO_LARGE,
};

typedef enum produce_choice { CHOICE_NO, CHOICE_YES, CHOICE_MIXED } produce_choice_t;
typedef enum produce_format { FORMAT_RGB8, FORMAT_F32, FORMAT_MIXED, FORMAT_JPEG, FORMAT_PNG, FORMAT_WEBP } produce_format_t;

/* The encoded formats: their record format, content-type, name and magic. */
static bool format_encoded(produce_format_t f) {
        return f == FORMAT_JPEG || f == FORMAT_PNG || f == FORMAT_WEBP;
}

static record_format_t format_record(produce_format_t f) {
        return f == FORMAT_JPEG ? RECORD_JPEG : f == FORMAT_PNG ? RECORD_PNG : RECORD_WEBP;
}

static const char *format_name(produce_format_t f) {
        return f == FORMAT_JPEG ? "JPEG" : f == FORMAT_PNG ? "PNG" : "WebP";
}

/* The files of --images DIR, read once. */
typedef struct produce_images {
        uint8_t **data;
        size_t *len;
        int *kind;              /* produce_kind_t: what inferd's decoder makes of each (a truncated file is bad) */
        size_t n;
} produce_images_t;

#define PRODUCE_GEN_MAX_SIDE 640
typedef enum produce_payload { PAYLOAD_TILES, PAYLOAD_RANDOM } produce_payload_t;

typedef struct produce_opts {
        const char *brokers;
        const char *topic;
        const char *keys;
        long count;
        double rate_per_s;              /* 0 = as fast as librdkafka takes them */
        produce_format_t format;
        produce_payload_t payload;
        double bad_fraction;
        uint64_t seed;
        produce_choice_t content_type;
        int timeout_s;                  /* for the final flush */
        const char *images_dir;         /* --images: files to send (jpeg/png/webp) */
        bool have_age;                  /* --age-ms given: set the timestamps */
        long age_ms;                    /* the records' age at produce time; < 0: in the future */
        bool trace;                     /* --trace: traceparent and tracestate headers */
        long bad_bytes;                 /* --bad-bytes: every bad record is this many random bytes (0 = the mix) */
        long header_bytes;              /* --header-bytes: bad records carry a header inferd-test-big this long */
        produce_images_t images;
} produce_opts_t;

typedef struct produce_stats {
        long kind[KIND_COUNT];
        long rgb8, f32, jpeg, png, webp; /* good records by format */
        long with_content_type;
        long delivered, failed;
        uint64_t bytes;
        char first_error[256];
} produce_stats_t;

/* splitmix64: a fresh, independent stream per (seed, record). */
static uint64_t mix64(uint64_t x) {
        x += 0x9e3779b97f4a7c15ULL;
        x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
        x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
        return x ^ (x >> 31);
}

static uint64_t next64(uint64_t *s) {
        *s += 0x9e3779b97f4a7c15ULL;
        return mix64(*s);
}

static void fill_bytes(uint8_t *p, size_t n, uint64_t *s) {
        size_t i = 0;

        for (; i + 8 <= n; i += 8) {
                uint64_t v = next64(s);

                memcpy(p + i, &v, 8);
        }
        if (i < n) {
                uint64_t v = next64(s);

                memcpy(p + i, &v, n - i);
        }
}

/* (3, 224, 224) float32, little-endian (as the host is), roughly what a
 * normalised image holds: uniform in [-2.5, 2.5). */
static float rand_f32(uint64_t *s) {
        return (float)((next64(s) >> 40) * (5.0 / 16777216.0)) - 2.5f;
}

static void fill_f32(float *p, size_t n, uint64_t *s) {
        for (size_t i = 0; i < n; i++)
                p[i] = rand_f32(s);
}

/* "tiles": 16x16 blocks of one random colour each, so that a record
 * compresses well (librdkafka's mock partitions keep only their last 5 MiB,
 * counted compressed) while every record still differs. */
#define TILE 16
static void fill_rgb8_tiles(uint8_t *p /* (224, 224, 3) HWC */, uint64_t *s) {
        uint8_t colour[224 / TILE][224 / TILE][3];

        for (int ty = 0; ty < 224 / TILE; ty++)
                for (int tx = 0; tx < 224 / TILE; tx++) {
                        uint64_t v = next64(s);

                        memcpy(colour[ty][tx], &v, 3);
                }
        for (int y = 0; y < 224; y++)
                for (int x = 0; x < 224; x++)
                        memcpy(p + ((size_t)y * 224 + x) * 3, colour[y / TILE][x / TILE], 3);
}

static void fill_f32_tiles(float *p /* (3, 224, 224) CHW */, uint64_t *s) {
        float value[3][224 / TILE][224 / TILE];

        for (int c = 0; c < 3; c++)
                for (int ty = 0; ty < 224 / TILE; ty++)
                        for (int tx = 0; tx < 224 / TILE; tx++)
                                value[c][ty][tx] = rand_f32(s);
        for (int c = 0; c < 3; c++)
                for (int y = 0; y < 224; y++)
                        for (int x = 0; x < 224; x++)
                                p[((size_t)c * 224 + y) * 224 + x] = value[c][y / TILE][x / TILE];
}

/* A generated JPEG, PNG or WebP (lossy) of the tiles payload, of a size between 160 and
 * 640 on each side (so both down- and upscaled by Resize(256)), into buf;
 * returns its length, or 0 when the library fails. */
static size_t make_encoded(produce_format_t fmt, uint64_t *s, uint8_t *buf, size_t cap) {
        static uint8_t px[PRODUCE_GEN_MAX_SIDE * PRODUCE_GEN_MAX_SIDE * 3];
        int w = 160 + (int)(next64(s) % (PRODUCE_GEN_MAX_SIDE - 159)), h = 160 + (int)(next64(s) % 321);
        size_t len = 0;

        for (int ty = 0; ty < (h + TILE - 1) / TILE; ty++)
                for (int tx = 0; tx < (w + TILE - 1) / TILE; tx++) {
                        uint64_t v = next64(s);

                        for (int y = ty * TILE; y < (ty + 1) * TILE && y < h; y++)
                                for (int x = tx * TILE; x < (tx + 1) * TILE && x < w; x++)
                                        memcpy(px + ((size_t)y * w + x) * 3, &v, 3);
                }
        if (fmt == FORMAT_JPEG) {
                tjhandle t = tjInitCompress();
                unsigned long n = cap;
                uint8_t *out = buf;

                /* TJFLAG_NOREALLOC: TurboJPEG writes into buf, which is
                 * larger than tjBufSize() for these sizes. */
                if (t && tjCompress2(t, px, w, 0, h, TJPF_RGB, &out, &n, TJSAMP_420, 90, TJFLAG_NOREALLOC) == 0)
                        len = n;
                if (t)
                        tjDestroy(t);
        } else if (fmt == FORMAT_WEBP) {
                uint8_t *out = NULL;
                size_t n = WebPEncodeRGB(px, w, h, w * 3, 90, &out);

                if (n > 0 && n <= cap) {
                        memcpy(buf, out, n);
                        len = n;
                }
                WebPFree(out);
        } else {
                struct spng_ihdr ihdr = { .width = (uint32_t)w, .height = (uint32_t)h, .bit_depth = 8,
                                          .color_type = SPNG_COLOR_TYPE_TRUECOLOR };
                spng_ctx *c = spng_ctx_new(SPNG_CTX_ENCODER);
                void *out;
                size_t n = 0;
                int e = 0;

                if (c) {
                        spng_set_option(c, SPNG_ENCODE_TO_BUFFER, 1);
                        spng_set_ihdr(c, &ihdr);
                        if (spng_encode_image(c, px, (size_t)w * h * 3, SPNG_FMT_PNG, SPNG_ENCODE_FINALIZE) == 0 &&
                            (out = spng_get_png_buffer(c, &n, &e)) != NULL) {
                                if (n <= cap) {
                                        memcpy(buf, out, n);
                                        len = n;
                                }
                                free(out);
                        }
                        spng_ctx_free(c);
                }
        }
        return len;
}

/* A header claiming 60000x60000 pixels, with nothing behind it that a
 * decoder should ever reach: the daemon must refuse it as too-large. */
static size_t make_bomb(produce_format_t fmt, uint8_t *buf) {
        static const uint8_t jpeg[] = {
                0xff, 0xd8,                                             /* SOI */
                0xff, 0xc0, 0x00, 0x11, 0x08, 0xea, 0x60, 0xea, 0x60,   /* SOF0: 8 bits, 60000 x 60000 */
                0x03, 0x01, 0x22, 0x00, 0x02, 0x11, 0x01, 0x03, 0x11, 0x01,
                0xff, 0xd9,                                             /* EOI */
        };
        static const uint8_t png[] = {
                0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n',
                0x00, 0x00, 0x00, 0x0d, 'I', 'H', 'D', 'R',
                0x00, 0x00, 0xea, 0x60, 0x00, 0x00, 0xea, 0x60,         /* 60000 x 60000 */
                0x08, 0x02, 0x00, 0x00, 0x00,                           /* 8-bit RGB */
        };
        /* RIFF, WEBP, a VP8L chunk: signature 0x2f, then 14 bits each of
         * width - 1 and height - 1 (16383: 16384 x 16384), no alpha, version 0. */
        static const uint8_t webp[] = {
                'R', 'I', 'F', 'F', 24, 0, 0, 0, 'W', 'E', 'B', 'P', 'V', 'P', '8', 'L', 12, 0, 0, 0,
                0x2f, 0xff, 0xff, 0xff, 0x0f, 0, 0, 0, 0, 0, 0, 0,
        };
        uint32_t crc = 0xffffffffu;

        if (fmt == FORMAT_JPEG) {
                memcpy(buf, jpeg, sizeof(jpeg));
                return sizeof(jpeg);
        }
        if (fmt == FORMAT_WEBP) {
                memcpy(buf, webp, sizeof(webp));
                return sizeof(webp);
        }
        memcpy(buf, png, sizeof(png));
        /* The IHDR's CRC (over its type and data), so that only the size is wrong. */
        for (size_t i = 12; i < sizeof(png); i++) {
                crc ^= png[i];
                for (int k = 0; k < 8; k++)
                        crc = crc & 1 ? (crc >> 1) ^ 0xedb88320u : crc >> 1;
        }
        crc ^= 0xffffffffu;
        for (int i = 0; i < 4; i++)
                buf[sizeof(png) + i] = (uint8_t)(crc >> (24 - 8 * i));
        return sizeof(png) + 4;
}

static int name_cmp(const void *a, const void *b) {
        return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Reads the files of dir whose signature is the format's, in name order. */
static int load_images(produce_opts_t *o) {
        static uint8_t rgb8[RECORD_RGB8_BYTES];
        decode_t *dec = NULL;
        DIR *d = opendir(o->images_dir);
        struct dirent *e;
        char **names = NULL;
        size_t n = 0;
        int r = 0;

        if (!d) {
                fprintf(stderr, "inferd-produce: %s: %s\n", o->images_dir, strerror(errno));
                return -errno;
        }
        while ((e = readdir(d)))
                if (e->d_name[0] != '.') {
                        names = realloc(names, (n + 1) * sizeof(*names));
                        names[n++] = strdup(e->d_name);
                }
        closedir(d);
        qsort(names, n, sizeof(*names), name_cmp);
        o->images.data = calloc(n ? n : 1, sizeof(*o->images.data));
        o->images.len = calloc(n ? n : 1, sizeof(*o->images.len));
        o->images.kind = calloc(n ? n : 1, sizeof(*o->images.kind));
        if (decode_new(&dec, DECODE_DEFAULT_MAX_PIXELS, DECODE_DEFAULT_MAX_BYTES, false, NULL) < 0) {
                fprintf(stderr, "inferd-produce: out of memory\n");
                return -ENOMEM;
        }
        for (size_t i = 0; i < n; i++) {
                char path[PATH_MAX];
                const char *code;
                record_format_t got;
                uint8_t *p;
                FILE *f;
                long size;

                snprintf(path, sizeof(path), "%s/%s", o->images_dir, names[i]);
                f = fopen(path, "rb");
                if (!f || fseek(f, 0, SEEK_END) != 0 || (size = ftell(f)) < 8 ||
                    (size_t)size > DECODE_DEFAULT_MAX_BYTES || fseek(f, 0, SEEK_SET) != 0) {
                        if (f)
                                fclose(f);
                        continue;       /* not a file, or not an image's size: skipped */
                }
                p = malloc((size_t)size);
                code = NULL;
                if (fread(p, 1, (size_t)size, f) != (size_t)size ||
                    record_identify(p, (size_t)size, NULL, 0, &got, &code, NULL) < 0 || got != format_record(o->format)) {
                        free(p);
                        fclose(f);
                        continue;
                }
                fclose(f);
                /* The expectation is the decoder's verdict on the file. */
                code = NULL;
                o->images.kind[o->images.n] = KIND_OK;
                if (decode_record(dec, p, (size_t)size, format_record(o->format), rgb8, NULL, &code, NULL) < 0)
                        for (int k = 1; k < KIND_COUNT; k++)
                                if (code && strcmp(code, kind_names[k]) == 0)
                                        o->images.kind[o->images.n] = k;
                o->images.data[o->images.n] = p;
                o->images.len[o->images.n++] = (size_t)size;
        }
        for (size_t i = 0; i < n; i++)
                free(names[i]);
        free(names);
        decode_free(dec);
        if (o->images.n == 0) {
                fprintf(stderr, "inferd-produce: %s holds no %s files\n", o->images_dir, format_name(o->format));
                r = -ENOENT;
        }
        return r;
}

static double now_s(void) {
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The delivery report: rkm->_private is the record's kind, unused here but
 * kept so that a failure could be attributed. */
static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *rkm, void *opaque) {
        produce_stats_t *st = opaque;

        (void)rk;
        if (rkm->err) {
                if (!st->failed)
                        snprintf(st->first_error, sizeof(st->first_error), "%s", rd_kafka_err2str(rkm->err));
                st->failed++;
        } else {
                st->delivered++;
        }
}

static void usage(FILE *f) {
        fprintf(f,
                "usage: inferd-produce [-c FILE] -b BROKERS -t TOPIC [--count N] [--rate PER_S]\n"
                "                      [--format rgb8|f32|mixed|jpeg|png|webp] [--images DIR] [--bad-fraction F]\n"
                "                      [--keys PREFIX] [--seed S] [--content-type-header yes|no|mixed]\n"
                "                      [--payload tiles|random] [-X PROPERTY=VALUE]... [--timeout-s S]\n"
                "                      [--age-ms MS] [--trace] [--bad-bytes N] [--header-bytes N]\n"
                "Produces N image records (224x224 RGB8 or float32 CHW, or JPEG/PNG/WebP: the files of\n"
                "--images DIR, cycled, or generated) with keys PREFIX-<i>, a\n"
                "fraction F of them deliberately bad, each with an inferd-test-expect header; then\n"
                "prints a JSON summary. Defaults: --count 100, --format rgb8, --keys rec, --seed 1,\n"
                "--content-type-header yes, --payload tiles (16x16 blocks of one colour: compressible),\n"
                "--timeout-s 60, and -X compression.type=zstd. -c FILE takes an instance config's\n"
                "[kafka.client] and [kafka.producer] settings (security included; file: and\n"
                "credential: values resolved) and its [kafka] brokers when -b is not given; -X\n"
                "options after it override them. --age-ms MS: Kafka timestamps MS ms in the past\n"
                "(negative: the future). --trace: traceparent and tracestate headers. --bad-bytes N\n"
                "makes every bad record N random bytes without a content-type (bad-size, or\n"
                "too-large over 602,112), and --header-bytes N gives the bad records a header\n"
                "inferd-test-big of N bytes.\n");
}

static int parse_double(const char *s, double min, double max, double *ret) {
        char *end;
        double v;

        errno = 0;
        v = strtod(s, &end);
        if (errno || end == s || *end || !(v >= min && v <= max))
                return -EINVAL;
        *ret = v;
        return 0;
}

/* Which kind record i is: bad when floor((i+1)F) > floor(iF), so exactly
 * floor(N F) of N are bad, evenly spread; bad ones cycle through the kinds. */
static produce_kind_t record_kind(long i, double f) {
        long before = (long)floor((double)i * f), after = (long)floor((double)(i + 1) * f);

        if (after == before)
                return KIND_OK;
        return (produce_kind_t)(1 + before % (KIND_COUNT - 1));
}

/* Makes record i into buf; returns its length and sets *ct (NULL = no
 * content-type header). */
static size_t make_record(const produce_opts_t *o, long i, produce_kind_t kind, uint8_t *buf, const char **ct,
                          produce_stats_t *st) {
        uint64_t s = mix64(o->seed ^ mix64((uint64_t)i + 1));
        int header = o->content_type == CHOICE_YES || (o->content_type == CHOICE_MIXED && (next64(&s) & 1));
        produce_format_t fmt = o->format;
        size_t len;

        if (fmt == FORMAT_MIXED)
                fmt = (next64(&s) & 2) ? FORMAT_F32 : FORMAT_RGB8;
        if (kind != KIND_OK && o->bad_bytes > 0) {
                /* --bad-bytes: random bytes, no signature, no content-type. */
                len = (size_t)o->bad_bytes;
                fill_bytes(buf, len, &s);
                buf[0] = 0;
                *ct = NULL;
                return len;
        }
        switch (kind) {
        case KIND_OK:
                if (format_encoded(fmt)) {
                        if (o->images.n) {
                                len = o->images.len[i % o->images.n];
                                memcpy(buf, o->images.data[i % o->images.n], len);
                        } else
                                len = make_encoded(fmt, &s, buf, DECODE_DEFAULT_MAX_BYTES);
                        *ct = header ? record_format_mime(format_record(fmt)) : NULL;
                        if (fmt == FORMAT_JPEG)
                                st->jpeg++;
                        else if (fmt == FORMAT_PNG)
                                st->png++;
                        else
                                st->webp++;
                } else if (fmt == FORMAT_RGB8) {
                        len = RECORD_RGB8_BYTES;
                        if (o->payload == PAYLOAD_TILES)
                                fill_rgb8_tiles(buf, &s);
                        else
                                fill_bytes(buf, len, &s);
                        *ct = header ? "image/x-rgb8" : NULL;
                        st->rgb8++;
                } else {
                        len = RECORD_F32_CHW_BYTES;
                        if (o->payload == PAYLOAD_TILES)
                                fill_f32_tiles((float *)buf, &s);
                        else
                                fill_f32((float *)buf, len / sizeof(float), &s);
                        *ct = header ? "application/x-float32-chw" : NULL;
                        st->f32++;
                }
                break;
        case KIND_BAD_SIZE:
                /* Declared RGB8 or sniffed, either way the wrong length. */
                len = 1000 + next64(&s) % 10000;
                if (o->payload == PAYLOAD_TILES)
                        memset(buf, 0x5a, len);
                else
                        fill_bytes(buf, len, &s);
                buf[0] = 0;             /* no image signature */
                *ct = header ? "image/x-rgb8" : NULL;
                break;
        case KIND_BAD_CONTENT_TYPE:
                /* Needs the header whatever --content-type-header says. */
                len = RECORD_RGB8_BYTES;
                if (o->payload == PAYLOAD_TILES)
                        fill_rgb8_tiles(buf, &s);
                else
                        fill_bytes(buf, len, &s);
                *ct = "application/x-inferd-unknown";
                break;
        case KIND_DECODE_FAILED: {
                static const uint8_t jfif[] = { 0xff, 0xd8, 0xff, 0xe0, 0x00, 0x10, 'J', 'F', 'I', 'F', 0x00 };

                len = 2000 + next64(&s) % 20000;
                if (o->payload == PAYLOAD_TILES)
                        memset(buf, 0x5a, len);
                else
                        fill_bytes(buf, len, &s);
                memcpy(buf, jfif, sizeof(jfif));
                *ct = header ? "image/jpeg" : NULL;
                if (fmt == FORMAT_PNG) {
                        static const uint8_t magic[8] = { 0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n' };

                        memcpy(buf, magic, sizeof(magic));
                        *ct = header ? "image/png" : NULL;
                } else if (fmt == FORMAT_WEBP) {
                        memcpy(buf, "RIFF\0\0\0\0WEBPVP8 ", 16);
                        *ct = header ? "image/webp" : NULL;
                }
                break;
        }
        case KIND_TOO_LARGE:
                if (format_encoded(fmt)) {
                        len = make_bomb(fmt, buf);
                        *ct = header ? record_format_mime(format_record(fmt)) : NULL;
                        break;
                }
                len = RECORD_MAX_BYTES + 1 + next64(&s) % 65536;
                if (o->payload == PAYLOAD_TILES)
                        memset(buf, 0x5a, len);
                else
                        fill_bytes(buf, len, &s);
                buf[0] = 0;
                *ct = header ? "image/x-rgb8" : NULL;
                break;
        default:
                abort();
        }
        if (*ct)
                st->with_content_type++;
        return len;
}

static int produce_one(rd_kafka_t *rk, const produce_opts_t *o, long i, produce_kind_t kind, const uint8_t *buf,
                       size_t len, const char *ct) {
        char key[256], cid[300], tp[64], ts[300];
        rd_kafka_headers_t *h = rd_kafka_headers_new(5);
        rd_kafka_resp_err_t e;
        int64_t timestamp_ms = 0;       /* 0: librdkafka's now */

        snprintf(key, sizeof(key), "%s-%ld", o->keys, i);
        snprintf(cid, sizeof(cid), "cid-%" PRIu64 "-%s", o->seed, key);
        rd_kafka_header_add(h, "correlation-id", -1, cid, -1);
        rd_kafka_header_add(h, "inferd-test-expect", -1, kind_names[kind], -1);
        if (ct)
                rd_kafka_header_add(h, "content-type", -1, ct, -1);
        if (kind != KIND_OK && o->header_bytes > 0) {
                char *big = malloc((size_t)o->header_bytes);

                if (!big) {
                        rd_kafka_headers_destroy(h);
                        return -ENOMEM;
                }
                memset(big, 'h', (size_t)o->header_bytes);
                rd_kafka_header_add(h, "inferd-test-big", -1, big, (ssize_t)o->header_bytes);
                free(big);
        }
        if (o->trace) {
                uint64_t a = mix64(o->seed * 0x10001 + (uint64_t)i), b = mix64(a), c = mix64(b);

                snprintf(tp, sizeof(tp), "00-%016" PRIx64 "%016" PRIx64 "-%016" PRIx64 "-01", a, b, c);
                snprintf(ts, sizeof(ts), "inferd=%s", key);
                rd_kafka_header_add(h, "traceparent", -1, tp, -1);
                rd_kafka_header_add(h, "tracestate", -1, ts, -1);
        }
        if (o->have_age) {
                struct timespec now;

                clock_gettime(CLOCK_REALTIME, &now);
                timestamp_ms = (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000 - o->age_ms;
        }
        for (;;) {
                e = rd_kafka_producev(rk, RD_KAFKA_V_TOPIC(o->topic), RD_KAFKA_V_KEY(key, strlen(key)),
                                      RD_KAFKA_V_VALUE((void *)buf, len), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                                      RD_KAFKA_V_HEADERS(h), RD_KAFKA_V_TIMESTAMP(timestamp_ms), RD_KAFKA_V_END);
                if (e != RD_KAFKA_RESP_ERR__QUEUE_FULL)
                        break;
                rd_kafka_poll(rk, 100);         /* serve delivery reports to make room */
        }
        if (e) {
                rd_kafka_headers_destroy(h);    /* not taken on failure */
                fprintf(stderr, "inferd-produce: Failed to produce record %ld: %s\n", i, rd_kafka_err2str(e));
                return -EIO;
        }
        return 0;       /* h is owned by the message now */
}

static const struct option produce_long_opts[] = {
        { "brokers", required_argument, NULL, 'b' },
        { "topic", required_argument, NULL, 't' },
        { "count", required_argument, NULL, 'n' },
        { "rate", required_argument, NULL, 'r' },
        { "format", required_argument, NULL, 'f' },
        { "bad-fraction", required_argument, NULL, 'F' },
        { "keys", required_argument, NULL, 'k' },
        { "seed", required_argument, NULL, 's' },
        { "content-type-header", required_argument, NULL, 'H' },
        { "timeout-s", required_argument, NULL, 'T' },
        { "payload", required_argument, NULL, 'P' },
        { "images", required_argument, NULL, 'I' },
        { "age-ms", required_argument, NULL, 'A' },
        { "trace", no_argument, NULL, 'R' },
        { "bad-bytes", required_argument, NULL, 'B' },
        { "header-bytes", required_argument, NULL, 'E' },
        { "help", no_argument, NULL, 'h' },
        {},
};

/* What produce_option says of an option. */
enum { OPT_OK, OPT_BAD_ARG, OPT_BAD_CONF, OPT_SAID, OPT_HELP, OPT_USAGE };

/* Sets *v to arg's index in words (NULL-terminated, in its enum's order).
 * Returns OPT_OK, or OPT_BAD_ARG for a word not there. */
static int option_word(const char *arg, const char *const *words, int *v) {
        for (int i = 0; words[i]; i++)
                if (strcmp(arg, words[i]) == 0) {
                        *v = i;
                        return OPT_OK;
                }
        return OPT_BAD_ARG;
}

/* Takes option c (getopt_long's answer, its argument in optarg) into o,
 * conf or *cfg (-c FILE). OPT_BAD_CONF leaves librdkafka's words in errstr;
 * OPT_SAID has said what is wrong. */
static int produce_option(int c, produce_opts_t *o, cfg_t **cfg, rd_kafka_conf_t *conf, char *errstr,
                          size_t errlen) {
        long v;

        switch (c) {
        case 'c': {
                errbuf_t err = {};

                cfg_free(*cfg);
                *cfg = NULL;
                if (cfg_load(cfg, optarg, &err) < 0 || cfg_kafka_apply(*cfg, 1, conf, &err) < 0) {
                        fprintf(stderr, "inferd-produce: %s\n", err.msg);
                        return OPT_SAID;
                }
                break;
        }
        case 'b':
                o->brokers = optarg;
                break;
        case 't':
                o->topic = optarg;
                break;
        case 'n':
                if (units_parse_long(optarg, 0, 100000000, &o->count) < 0)
                        return OPT_BAD_ARG;
                break;
        case 'r':
                if (parse_double(optarg, 0, 1e9, &o->rate_per_s) < 0)
                        return OPT_BAD_ARG;
                break;
        case 'f':
                /* In produce_format_t's order. */
                return option_word(optarg, (const char *[]){ "rgb8", "f32", "mixed", "jpeg", "png", "webp", NULL },
                                   (int *)&o->format);
        case 'I':
                o->images_dir = optarg;
                break;
        case 'A':
                if (units_parse_long(optarg, -366L * 86400 * 1000, 366L * 86400 * 1000, &o->age_ms) < 0)
                        return OPT_BAD_ARG;
                o->have_age = true;
                break;
        case 'R':
                o->trace = true;
                break;
        case 'F':
                if (parse_double(optarg, 0, 1, &o->bad_fraction) < 0)
                        return OPT_BAD_ARG;
                break;
        case 'k':
                if (!*optarg || strlen(optarg) > 200)
                        return OPT_BAD_ARG;
                o->keys = optarg;
                break;
        case 's':
                if (units_parse_long(optarg, 0, LONG_MAX, &v) < 0)
                        return OPT_BAD_ARG;
                o->seed = (uint64_t)v;
                break;
        case 'H':
                return option_word(optarg, (const char *[]){ "no", "yes", "mixed", NULL }, (int *)&o->content_type);
        case 'B':
                if (units_parse_long(optarg, 1, 16L << 20, &o->bad_bytes) < 0)
                        return OPT_BAD_ARG;
                break;
        case 'E':
                if (units_parse_long(optarg, 1, 16L << 20, &o->header_bytes) < 0)
                        return OPT_BAD_ARG;
                break;
        case 'P':
                return option_word(optarg, (const char *[]){ "tiles", "random", NULL }, (int *)&o->payload);
        case 'T':
                if (units_parse_long(optarg, 1, 86400, &v) < 0)
                        return OPT_BAD_ARG;
                o->timeout_s = (int)v;
                break;
        case 'X':
                if (kafka_conf_set_pair(conf, optarg, errstr, errlen) < 0)
                        return errstr[0] ? OPT_BAD_CONF : OPT_BAD_ARG;
                break;
        case 'h':
                return OPT_HELP;
        default:
                return OPT_USAGE;
        }
        return OPT_OK;
}

/* Produces o's records from t0 on, paced to its rate. Returns 0, or -1
 * (said). */
static int produce_records(rd_kafka_t *rk, produce_opts_t *o, produce_stats_t *st, uint8_t *buf, double t0) {
        for (long i = 0; i < o->count; i++) {
                produce_kind_t kind = record_kind(i, o->bad_fraction);
                const char *ct = NULL;
                size_t len;

                if (kind != KIND_OK && o->bad_bytes > 0)
                        kind = (size_t)o->bad_bytes > RECORD_MAX_BYTES ? KIND_TOO_LARGE : KIND_BAD_SIZE;

                if (o->rate_per_s > 0) {
                        /* Paced against the start, so that delays do not add up;
                         * waiting is spent serving delivery reports. */
                        double due = t0 + (double)i / o->rate_per_s, wait_s;

                        while ((wait_s = due - now_s()) > 0)
                                rd_kafka_poll(rk, (int)ceil(wait_s * 1000.0));
                }
                len = make_record(o, i, kind, buf, &ct, st);
                /* A file of --images that inferd refuses is expected as refused. */
                if (kind == KIND_OK && o->images.n && o->images.kind[i % o->images.n] != KIND_OK) {
                        kind = (produce_kind_t)o->images.kind[i % o->images.n];
                        if (o->format == FORMAT_JPEG)
                                st->jpeg--;
                        else if (o->format == FORMAT_PNG)
                                st->png--;
                        else
                                st->webp--;
                }
                if (len == 0) {
                        fprintf(stderr, "inferd-produce: cannot encode record %ld\n", i);
                        return -1;
                }
                if (produce_one(rk, o, i, kind, buf, len, ct) < 0)
                        return -1;
                st->kind[kind]++;
                st->bytes += len;
                rd_kafka_poll(rk, 0);
        }
        return 0;
}

/* Prints the run's summary (one JSON line) and what failed. */
static void produce_report(const produce_opts_t *o, const produce_stats_t *st, double secs, int left) {
        printf("{\"topic\":\"%s\",\"records\":%ld,\"delivered\":%ld,\"failed\":%ld,\"undelivered\":%d,"
               "\"ok\":%ld,\"bad-size\":%ld,\"bad-content-type\":%ld,\"decode-failed\":%ld,\"too-large\":%ld,"
               "\"rgb8\":%ld,\"f32\":%ld,\"jpeg\":%ld,\"png\":%ld,\"webp\":%ld,\"with_content_type\":%ld,\"bytes\":%" PRIu64 ",\"seconds\":%.3f,"
               "\"records_per_second\":%.1f}\n",
               o->topic, o->count, st->delivered, st->failed, left, st->kind[KIND_OK], st->kind[KIND_BAD_SIZE],
               st->kind[KIND_BAD_CONTENT_TYPE], st->kind[KIND_DECODE_FAILED], st->kind[KIND_TOO_LARGE], st->rgb8,
               st->f32, st->jpeg, st->png, st->webp, st->with_content_type, st->bytes, secs, secs > 0 ? (double)st->delivered / secs : 0.0);
        fflush(stdout);
        if (st->failed)
                fprintf(stderr, "inferd-produce: %ld records failed; the first: %s\n", st->failed, st->first_error);
        if (left)
                fprintf(stderr, "inferd-produce: %d records still undelivered after %d s\n", left, o->timeout_s);
}

int main(int argc, char **argv) {
        produce_opts_t o = { .keys = "rec", .count = 100, .seed = 1, .content_type = CHOICE_YES, .timeout_s = 60 };
        produce_stats_t st = { { 0 } };
        cfg_t *cfg = NULL;              /* -c FILE; lives to the end (o.brokers may point into it) */
        rd_kafka_conf_t *conf = rd_kafka_conf_new();
        rd_kafka_t *rk = NULL;
        uint8_t *buf = NULL;
        char errstr[512] = "";
        double t0;
        int c, k, r = 1;

        /* zstd by default (-X compression.type=none undoes it): the tiles
         * payload then takes a few KiB a record in the broker's log. */
        if (rd_kafka_conf_set(conf, "enable.idempotence", "true", errstr, sizeof(errstr)) != RD_KAFKA_CONF_OK ||
            rd_kafka_conf_set(conf, "compression.type", "zstd", errstr, sizeof(errstr)) != RD_KAFKA_CONF_OK)
                goto bad_conf;
        while ((c = getopt_long(argc, argv, "c:b:t:n:r:f:F:k:s:H:T:P:I:X:A:RB:E:h", produce_long_opts, NULL)) != -1) {
                errstr[0] = '\0';
                k = produce_option(c, &o, &cfg, conf, errstr, sizeof(errstr));
                if (k == OPT_OK)
                        continue;
                if (k == OPT_BAD_ARG)
                        goto bad_arg;
                if (k == OPT_BAD_CONF)
                        goto bad_conf;
                if (k != OPT_SAID)
                        usage(k == OPT_HELP ? stdout : stderr);
                cfg_free(cfg);
                rd_kafka_conf_destroy(conf);
                return k == OPT_HELP ? 0 : 2;
        }
        if (optind < argc) {
                fprintf(stderr, "inferd-produce: unexpected argument '%s'\n", argv[optind]);
                goto fail_usage;
        }
        if (!o.brokers && cfg)
                o.brokers = cfg->kafka.brokers;
        if (!o.brokers || !o.topic) {
                fprintf(stderr, "inferd-produce: -b BROKERS and -t TOPIC are required\n");
                usage(stderr);
                goto fail_usage;
        }
        if (o.images_dir && !format_encoded(o.format)) {
                fprintf(stderr, "inferd-produce: --images goes with --format jpeg, png or webp\n");
                goto fail_usage;
        }
        if (o.images_dir && load_images(&o) < 0)
                goto fail_usage;
        if (rd_kafka_conf_set(conf, "bootstrap.servers", o.brokers, errstr, sizeof(errstr)) != RD_KAFKA_CONF_OK)
                goto bad_conf;
        rd_kafka_conf_set_opaque(conf, &st);
        rd_kafka_conf_set_dr_msg_cb(conf, on_delivery);

        rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
        if (!rk) {
                fprintf(stderr, "inferd-produce: Failed to create the producer: %s\n", errstr);
                rd_kafka_conf_destroy(conf);
                return 1;
        }
        conf = NULL;    /* owned by rk now */

        /* Room for any record: an image file of --images, or a generated one. */
        buf = malloc(DECODE_DEFAULT_MAX_BYTES + 65536);
        if (!buf) {
                fprintf(stderr, "inferd-produce: out of memory\n");
                goto out;
        }

        t0 = now_s();
        if (produce_records(rk, &o, &st, buf, t0) < 0)
                goto out;
        rd_kafka_flush(rk, o.timeout_s * 1000);
        produce_report(&o, &st, now_s() - t0, rd_kafka_outq_len(rk));
        r = st.delivered == o.count ? 0 : 1;
out:
        free(buf);
        for (size_t i = 0; i < o.images.n; i++)
                free(o.images.data[i]);
        free(o.images.data);
        free(o.images.len);
        free(o.images.kind);
        if (rk)
                rd_kafka_destroy(rk);
        cfg_free(cfg);
        return r;

bad_arg:
        for (const struct option *p = produce_long_opts; p->name; p++)
                if (p->val == c)
                        fprintf(stderr, "inferd-produce: bad value '%s' for --%s\n", optarg, p->name);
        if (c == 'X')
                fprintf(stderr, "inferd-produce: -X '%s' is not PROPERTY=VALUE\n", optarg);
        usage(stderr);
        goto fail_usage;
bad_conf:
        fprintf(stderr, "inferd-produce: %s\n", errstr);
fail_usage:
        rd_kafka_conf_destroy(conf);
        cfg_free(cfg);
        return 2;
}
