/* A safetensors writer for the unit tests. See st_build.h. */
#include "st_build.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int st_build(const st_build_tensor_t *t, size_t n, unsigned char **ret, size_t *len) {
        json_t *root = json_object();
        size_t off = 0, hlen, total;
        unsigned char *img;
        char *header;

        for (size_t i = 0; i < n; i++) {
                json_t *shape = json_array(), *e = json_object();

                for (unsigned d = 0; d < t[i].ndim; d++)
                        json_array_append_new(shape, json_integer(t[i].shape[d]));
                json_object_set_new(e, "dtype", json_string(t[i].dtype));
                json_object_set_new(e, "shape", shape);
                json_object_set_new(e, "data_offsets",
                                    json_pack("[II]", (json_int_t)off, (json_int_t)(off + t[i].nbytes)));
                json_object_set_new(root, t[i].name, e);
                off += t[i].nbytes;
        }
        header = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
        json_decref(root);
        if (!header)
                return -ENOMEM;
        hlen = (strlen(header) + 7) / 8 * 8;    /* padded with spaces, as writers do */
        total = 8 + hlen + off;
        img = malloc(total);
        if (!img) {
                free(header);
                return -ENOMEM;
        }
        for (int b = 0; b < 8; b++)
                img[b] = (unsigned char)((uint64_t)hlen >> (8 * b));
        memset(img + 8, ' ', hlen);
        memcpy(img + 8, header, strlen(header));
        free(header);
        off = 8 + hlen;
        for (size_t i = 0; i < n; i++) {
                memcpy(img + off, t[i].data, t[i].nbytes);
                off += t[i].nbytes;
        }
        *ret = img;
        *len = total;
        return 0;
}

char *st_build_write(const char *dir, const char *name, const unsigned char *img, size_t len) {
        char *path;
        FILE *f;

        if (asprintf(&path, "%s/%s", dir, name) < 0)
                return NULL;
        f = fopen(path, "we");
        if (!f || fwrite(img, 1, len, f) != len) {
                if (f)
                        fclose(f);
                free(path);
                return NULL;
        }
        fclose(f);
        return path;
}
