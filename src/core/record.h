/* record: the input record formats and their recognition.
 *
 * A record is one image: raw RGB8 (224x224x3 uint8, HWC) or float32 CHW
 * (3x224x224, little-endian, already normalised). Its type comes from a
 * content-type header when there is one, otherwise from the bytes (magic
 * numbers, exact length). Encoded images (JPEG, PNG, WebP) are recognised here and
 * decoded by src/decode into an RGB8 record. Nothing here decodes or touches
 * an engine: the engines' preprocessing turns a record into activations. */
#ifndef INFERD_RECORD_H
#define INFERD_RECORD_H

#include <stddef.h>
#include <stdint.h>

#include "core/errbuf.h"

#define RECORD_RGB8_BYTES ((size_t)224 * 224 * 3)               /* 150,528 */
#define RECORD_F32_CHW_BYTES ((size_t)3 * 224 * 224 * 4)        /* 602,112 */
#define RECORD_MAX_BYTES RECORD_F32_CHW_BYTES

typedef enum record_format {
        RECORD_UNKNOWN = 0,
        RECORD_RGB8 = 1,        /* image/x-rgb8 */
        RECORD_F32_CHW = 2,     /* application/x-float32-chw */
        RECORD_JPEG = 3,        /* image/jpeg: decoded by src/decode */
        RECORD_PNG = 4,         /* image/png: decoded by src/decode */
        RECORD_WEBP = 5,        /* image/webp: decoded by src/decode */
} record_format_t;

/* The short DLQ code of a refused record (the design's inferd-error header). */
#define RECORD_ERR_BAD_SIZE "bad-size"
#define RECORD_ERR_BAD_CONTENT_TYPE "bad-content-type"
#define RECORD_ERR_DECODE_FAILED "decode-failed"
#define RECORD_ERR_TOO_LARGE "too-large"
/* A JPEG whose decoding would cost more than [decode] max_scan_megapixels
 * (its scans times its megapixels): a progressive file of hundreds of
 * nearly empty scans takes seconds and holds up the records around it. */
#define RECORD_ERR_TOO_COSTLY "too-costly"
/* Not a property of the bytes: the engine computed non-finite logits for the
 * record (engine.h, ENGINE_TOPK_NONFINITE), so it has no prediction. */
#define RECORD_ERR_NON_FINITE_OUTPUT "non-finite-output"
/* Not a property of the bytes either: the record's Kafka timestamp was older
 * than [batching] max_record_age when it was taken. */
#define RECORD_ERR_EXPIRED "expired"
/* Not a property of the bytes either: the record's prediction could not be
 * produced because of its size (over the producer's message.max.bytes, or
 * refused by the broker as larger than the output topic's
 * max.message.bytes). */
#define RECORD_ERR_OUTPUT_TOO_LARGE "output-too-large"

const char *record_format_mime(record_format_t f);
/* RECORD_UNKNOWN for a content-type this project does not know. Parameters
 * after ';' and surrounding blanks are ignored, case-insensitively. */
record_format_t record_format_from_mime(const char *content_type, size_t len);

/* Decides the format of a record: RECORD_RGB8 or RECORD_F32_CHW of exactly
 * their size, or RECORD_JPEG / RECORD_PNG / RECORD_WEBP of any length (their limits are
 * the decoder's). Refusals are as for record_classify. */
int record_identify(const void *data, size_t len, const char *content_type, size_t content_type_len,
                    record_format_t *ret, const char **code, errbuf_t *err);

/* True for the formats that need decoding (JPEG, PNG, WebP). */
int record_is_encoded(record_format_t f);

/* Decides the format of a record and checks that it can be run as it is,
 * for a caller without a decoder (the daemon, until its decode pool).
 * content_type may be NULL (sniff from the bytes). Returns the runnable format
 * (RECORD_RGB8 or RECORD_F32_CHW), or -EINVAL with *code set to one of the
 * RECORD_ERR_* codes and a sentence in err. Only the first 12 bytes of data
 * are ever read (the signatures), so a caller may pass just a file's head
 * with its full length. */
int record_classify(const void *data, size_t len, const char *content_type, size_t content_type_len,
                    record_format_t *ret, const char **code, errbuf_t *err);

#endif
