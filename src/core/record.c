/* record: recognises input records and refuses the ones that cannot run.
 * See record.h. No decoding happens here. */
#include "core/record.h"

#include <ctype.h>
#include <errno.h>
#include <string.h>
#include <strings.h>

static const struct {
        record_format_t format;
        const char *mime;
} record_mimes[] = {
        { RECORD_RGB8, "image/x-rgb8" },
        { RECORD_F32_CHW, "application/x-float32-chw" },
        { RECORD_JPEG, "image/jpeg" },
        { RECORD_PNG, "image/png" },
        { RECORD_WEBP, "image/webp" },
};

const char *record_format_mime(record_format_t f) {
        for (size_t i = 0; i < sizeof(record_mimes) / sizeof(record_mimes[0]); i++)
                if (record_mimes[i].format == f)
                        return record_mimes[i].mime;
        return "unknown";
}

record_format_t record_format_from_mime(const char *ct, size_t len) {
        size_t b = 0, e;

        while (b < len && isspace((unsigned char)ct[b]))
                b++;
        for (e = b; e < len && ct[e] != ';'; e++)
                ;
        while (e > b && isspace((unsigned char)ct[e - 1]))
                e--;
        for (size_t i = 0; i < sizeof(record_mimes) / sizeof(record_mimes[0]); i++) {
                const char *m = record_mimes[i].mime;

                if (strlen(m) == e - b && strncasecmp(ct + b, m, e - b) == 0)
                        return record_mimes[i].format;
        }
        return RECORD_UNKNOWN;
}

static record_format_t record_sniff(const unsigned char *p, size_t len) {
        if (len >= 3 && p[0] == 0xff && p[1] == 0xd8 && p[2] == 0xff)
                return RECORD_JPEG;
        if (len >= 8 && memcmp(p, "\x89PNG\r\n\x1a\n", 8) == 0)
                return RECORD_PNG;
        /* RIFF, the file's length less 8 (not checked: the decoder reads it), WEBP. */
        if (len >= 12 && memcmp(p, "RIFF", 4) == 0 && memcmp(p + 8, "WEBP", 4) == 0)
                return RECORD_WEBP;
        if (len == RECORD_RGB8_BYTES)
                return RECORD_RGB8;
        if (len == RECORD_F32_CHW_BYTES)
                return RECORD_F32_CHW;
        return RECORD_UNKNOWN;
}

static size_t record_expected_bytes(record_format_t f) {
        return f == RECORD_RGB8 ? RECORD_RGB8_BYTES : RECORD_F32_CHW_BYTES;
}

int record_is_encoded(record_format_t f) {
        return f == RECORD_JPEG || f == RECORD_PNG || f == RECORD_WEBP;
}

int record_identify(const void *data, size_t len, const char *ct, size_t ct_len, record_format_t *ret,
                    const char **code, errbuf_t *err) {
        record_format_t f;

        if (ct) {
                f = record_format_from_mime(ct, ct_len);
                if (f == RECORD_UNKNOWN) {
                        /* Escaped: a NUL or a control byte must not make a
                         * valid type appear in the sentence. */
                        char shown[80];

                        *code = RECORD_ERR_BAD_CONTENT_TYPE;
                        return errbuf_set(err, -EINVAL,
                                          "content-type '%s' is not one of image/x-rgb8, "
                                          "application/x-float32-chw, image/jpeg, image/png, image/webp",
                                          errbuf_escape(shown, sizeof(shown), ct, ct_len));
                }
        } else {
                f = record_sniff(data, len);
                if (f == RECORD_UNKNOWN) {
                        if (len > RECORD_MAX_BYTES) {
                                *code = RECORD_ERR_TOO_LARGE;
                                return errbuf_set(err, -EINVAL,
                                                  "%zu bytes is larger than any accepted record (%zu bytes at most)",
                                                  len, RECORD_MAX_BYTES);
                        }
                        *code = RECORD_ERR_BAD_SIZE;
                        return errbuf_set(err, -EINVAL,
                                          "%zu bytes is neither an RGB8 224x224x3 image (%zu bytes) nor a "
                                          "float32 3x224x224 tensor (%zu bytes), and no known image signature",
                                          len, RECORD_RGB8_BYTES, RECORD_F32_CHW_BYTES);
                }
        }
        if (!record_is_encoded(f) && len != record_expected_bytes(f)) {
                *code = len > RECORD_MAX_BYTES ? RECORD_ERR_TOO_LARGE : RECORD_ERR_BAD_SIZE;
                return errbuf_set(err, -EINVAL, "%s record of %zu bytes; exactly %zu expected",
                                  record_format_mime(f), len, record_expected_bytes(f));
        }
        *ret = f;
        return 0;
}

int record_classify(const void *data, size_t len, const char *ct, size_t ct_len, record_format_t *ret,
                    const char **code, errbuf_t *err) {
        record_format_t f = RECORD_UNKNOWN;
        int r;

        r = record_identify(data, len, ct, ct_len, &f, code, err);
        if (r < 0)
                return r;
        if (record_is_encoded(f)) {
                *code = RECORD_ERR_DECODE_FAILED;
                return errbuf_set(err, -EINVAL, "%s records are not decoded by this program yet; send image/x-rgb8 "
                                  "or application/x-float32-chw", record_format_mime(f));
        }
        *ret = f;
        return 0;
}
