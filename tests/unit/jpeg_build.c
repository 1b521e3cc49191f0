#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>

#include "jpeg_build.h"
#include "unit.h"

uint8_t *jpeg_build(uint8_t *img, int w, int h, int subsamp, int quality, size_t *len) {
        return jpeg_build_flags(img, w, h, subsamp, quality, 0, len);
}

uint8_t *jpeg_build_flags(uint8_t *img, int w, int h, int subsamp, int quality, int flags, size_t *len) {
        uint8_t *buf = NULL, *out;
        unsigned long n = 0;
        tjhandle t = tjInitCompress();

        CU_ASSERT_FATAL(t != NULL);
        CU_ASSERT_FATAL(tjCompress2(t, img, w, 0, h, TJPF_RGB, &buf, &n, subsamp, quality, flags) == 0);
        out = malloc(n);
        CU_ASSERT_FATAL(out != NULL);
        memcpy(out, buf, n);
        tjFree(buf);
        tjDestroy(t);
        free(img);
        *len = n;
        return out;
}
