/* fuzz_st: a libFuzzer target for the safetensors reader.
 *
 * Each input is handed to st_open_buffer() as a whole file image. A refusal
 * must come with -EINVAL (or -ENOMEM) and a sentence naming the file; an
 * acceptance must hold up: every tensor lies inside the image, the tensors
 * tile the data section in order, st_find() finds each one, and every byte
 * is read (float tensors through st_to_float()), so that ASan sees any
 * out-of-bounds read. Built and run by tools/fuzz.
 *
 * Built with -DFUZZ_ST_GEN instead, it is a small program that writes the
 * seed corpus into a directory, so that no binary seeds live in git. It is
 * not a unit test: tests/unit/test_st.c checks the messages and values. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/st.h"

#define FUZZ_NAME "fuzz.safetensors"

/* Reading into a volatile sink keeps the compiler from dropping the reads. */
static volatile uint32_t fuzz_sink;

static void fuzz_walk(const st_file_t *f) {
        const uint8_t *base, *end, *next;
        size_t len;

        base = st_bytes(f, &len);
        end = base + len;
        next = NULL;
        for (size_t i = 0; i < st_count(f); i++) {
                const st_tensor_t *t = st_get(f, i), *found;
                const uint8_t *p = t->data;

                if (!t || !t->name || !t->name[0])
                        abort();
                if (p < base || p > end || t->nbytes > (size_t)(end - p))
                        abort();
                /* contiguous: each tensor starts where the last one ended */
                if (next && p != next)
                        abort();
                next = p + t->nbytes;
                if (t->ndim > ST_MAX_DIMS || t->numel * st_dtype_bytes(t->dtype) != t->nbytes)
                        abort();
                found = st_find(f, t->name);
                if (!found || strcmp(found->name, t->name) != 0)
                        abort();

                if (st_dtype_is_float(t->dtype)) {
                        float *out = malloc(t->numel ? t->numel * sizeof(float) : 1);   /* (numel,) */

                        if (!out)
                                abort();
                        if (st_to_float(t, out) != 0)
                                abort();
                        for (size_t k = 0; k < t->numel; k++) {
                                uint32_t b;

                                memcpy(&b, &out[k], sizeof(b));
                                fuzz_sink ^= b;
                        }
                        free(out);
                } else {
                        float dummy;

                        if (st_to_float(t, &dummy) != -EINVAL)
                                abort();
                        for (size_t k = 0; k < t->nbytes; k++)
                                fuzz_sink += p[k];
                }
        }
        /* the tensors end exactly at the end of the image */
        if (next && next != end)
                abort();
}

#ifndef FUZZ_ST_GEN

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        st_file_t *f = NULL;
        errbuf_t err = { "" };
        int r;

        r = st_open_buffer(&f, FUZZ_NAME, data, size, &err);
        if (r < 0) {
                /* every refusal says which file and why */
                if ((r != -EINVAL && r != -ENOMEM) || strncmp(err.msg, FUZZ_NAME ": ", strlen(FUZZ_NAME) + 2) != 0 ||
                    strlen(err.msg) <= strlen(FUZZ_NAME) + 2)
                        abort();
                if (f)
                        abort();
                return 0;
        }
        fuzz_walk(f);
        st_free(f);
        return 0;
}

#else /* FUZZ_ST_GEN: write the seed corpus */

/* Writes dir/name: the 8-byte length, header padded with spaces to a
 * multiple of 8, then data_len bytes of a pattern. Returns 0 or -1. */
static int gen_write(const char *dir, const char *name, const char *header, size_t data_len) {
        size_t hlen = strlen(header), padded = (hlen + 7) / 8 * 8;
        char path[4096];
        uint8_t len_le[8];
        FILE *fp;
        int ok;

        snprintf(path, sizeof(path), "%s/%s", dir, name);
        fp = fopen(path, "wb");
        if (!fp)
                return -1;
        for (int i = 0; i < 8; i++)
                len_le[i] = (uint8_t)((uint64_t)padded >> (8 * i));
        ok = fwrite(len_le, 1, 8, fp) == 8 && fwrite(header, 1, hlen, fp) == hlen;
        for (size_t i = hlen; ok && i < padded; i++)
                ok = fputc(' ', fp) != EOF;
        for (size_t i = 0; ok && i < data_len; i++)
                ok = fputc((int)((i * 37 + 11) & 0xff), fp) != EOF;
        if (fclose(fp) != 0)
                ok = 0;
        return ok ? 0 : -1;
}

/* A few valid files covering every branch of the format, and a few that
 * are nearly valid (valid = 0), as starting points for mutation. */
static const struct {
        const char *name, *header;
        size_t data_len;
        int valid;
} gen_seeds[] = {
        { "empty", "{}", 0, 1 },
        { "metadata-only", "{\"__metadata__\":{\"format\":\"pt\"}}", 0, 1 },
        { "resnet-like",
          "{\"__metadata__\":{\"format\":\"pt\"},"
          "\"conv1.weight\":{\"dtype\":\"F32\",\"shape\":[2,1,2,2],\"data_offsets\":[0,32]},"
          "\"bn1.weight\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[32,40]},"
          "\"bn1.bias\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[40,44]},"
          "\"bn1.running_mean\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[44,48]},"
          "\"bn1.num_batches_tracked\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[48,56]},"
          "\"fc.bias\":{\"dtype\":\"F16\",\"shape\":[3],\"data_offsets\":[56,62]}}",
          62, 1 },
        { "unaligned",
          "{\"b\":{\"dtype\":\"BOOL\",\"shape\":[1],\"data_offsets\":[0,1]},"
          "\"w\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[1,13]},"
          "\"h\":{\"dtype\":\"BF16\",\"shape\":[1,1],\"data_offsets\":[13,15]},"
          "\"z\":{\"dtype\":\"F16\",\"shape\":[0],\"data_offsets\":[15,15]}}",
          15, 1 },
        { "all-dtypes",
          "{\"a\":{\"dtype\":\"BOOL\",\"shape\":[1],\"data_offsets\":[0,1]},"
          "\"b\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]},"
          "\"c\":{\"dtype\":\"I8\",\"shape\":[1],\"data_offsets\":[2,3]},"
          "\"d\":{\"dtype\":\"F8_E4M3\",\"shape\":[1],\"data_offsets\":[3,4]},"
          "\"e\":{\"dtype\":\"F8_E5M2\",\"shape\":[1],\"data_offsets\":[4,5]},"
          "\"f\":{\"dtype\":\"I16\",\"shape\":[1],\"data_offsets\":[5,7]},"
          "\"g\":{\"dtype\":\"U16\",\"shape\":[1],\"data_offsets\":[7,9]},"
          "\"h\":{\"dtype\":\"F16\",\"shape\":[1],\"data_offsets\":[9,11]},"
          "\"i\":{\"dtype\":\"BF16\",\"shape\":[1],\"data_offsets\":[11,13]},"
          "\"j\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[13,17]},"
          "\"k\":{\"dtype\":\"U32\",\"shape\":[1],\"data_offsets\":[17,21]},"
          "\"l\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[21,25]},"
          "\"m\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[25,33]},"
          "\"n\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[33,41]},"
          "\"o\":{\"dtype\":\"U64\",\"shape\":[1],\"data_offsets\":[41,49]}}",
          49, 1 },
        { "near-hole",
          "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
          "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
          12, 0 },
        { "near-reversed", "{\"fc.bias\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[4,0]}}", 4, 0 },
        { "near-overflow",
          "{\"big\":{\"dtype\":\"F32\",\"shape\":[1099511627776,1099511627776],\"data_offsets\":[0,0]}}", 0, 0 },
        { "near-dims", "{\"w\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", 1, 0 },
};

/* Writes every seed into DIR, then reads each back with st_open(): the
 * valid ones must parse (and survive fuzz_walk), the others must not. */
int main(int argc, char **argv) {
        char path[4096];
        st_file_t *f;
        errbuf_t err;
        int r;

        if (argc != 2) {
                fprintf(stderr, "usage: %s DIR\n", argv[0]);
                return 2;
        }
        for (size_t i = 0; i < sizeof(gen_seeds) / sizeof(gen_seeds[0]); i++) {
                if (gen_write(argv[1], gen_seeds[i].name, gen_seeds[i].header, gen_seeds[i].data_len) < 0) {
                        fprintf(stderr, "Failed to write seed '%s/%s'\n", argv[1], gen_seeds[i].name);
                        return 1;
                }
                snprintf(path, sizeof(path), "%s/%s", argv[1], gen_seeds[i].name);
                f = NULL;
                r = st_open(&f, path, &err);
                if ((r == 0) != gen_seeds[i].valid) {
                        fprintf(stderr, "Seed '%s' should %s: %s\n", path, gen_seeds[i].valid ? "parse" : "be refused",
                                r < 0 ? err.msg : "it parsed");
                        st_free(f);
                        return 1;
                }
                if (f)
                        fuzz_walk(f);
                st_free(f);
        }
        return 0;
}

#endif
