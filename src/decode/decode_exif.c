/* decode_exif: the EXIF orientation (tag 0x0112 of the first IFD) of a
 * JPEG, PNG or WebP record, for [decode] exif_orientation = yes.
 *
 * A small reader of untrusted bytes, covered by the decode fuzzer
 * (tests/fuzz/fuzz_decode.c), that finds the tag where PIL finds it, so
 * that the orientation applied is the one PIL's ImageOps.exif_transpose
 * applies:
 *   JPEG  the first APP1 segment that starts with "Exif\0", before the scan;
 *   PNG   the last eXIf chunk;
 *   WebP  the first EXIF chunk of an extended (VP8X) file;
 * then the TIFF header (II or MM, PIL's four accepted 32-bit magics) and
 * the first IFD, read entry by entry as PIL reads it: a later entry of the
 * tag replaces an earlier one, an entry of a type PIL cannot read or whose
 * value lies outside the block is skipped, a truncated IFD keeps the
 * entries read before the cut, and the first value of a longer one counts.
 * Only integer types (BYTE, SHORT, LONG and their signed forms, IFD, LONG8)
 * are taken; PIL would also take a rational or a float that equals 2..8,
 * which no camera writes. Not read: XMP's tiff:Orientation (PIL's fallback
 * for a PNG without EXIF) and ImageMagick's "Raw profile type exif" text.
 * Nothing is allocated; nothing here decodes pixels. */
#include <string.h>

#include "decode/decode-internal.h"

#define EXIF_TAG_ORIENTATION 0x0112

static uint32_t exif_u16(const uint8_t *p, bool be) {
        return be ? (uint32_t)p[0] << 8 | p[1] : (uint32_t)p[1] << 8 | p[0];
}

static uint32_t exif_u32(const uint8_t *p, bool be) {
        return be ? (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]
                  : (uint32_t)p[3] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[1] << 8 | p[0];
}

/* The byte size of one value of a TIFF type PIL can read as an integer; 0
 * for the other types. */
static unsigned exif_int_size(uint32_t type) {
        switch (type) {
        case 1:         /* BYTE */
        case 6:         /* SBYTE */
                return 1;
        case 3:         /* SHORT */
        case 8:         /* SSHORT */
                return 2;
        case 4:         /* LONG */
        case 9:         /* SLONG */
        case 13:        /* IFD */
                return 4;
        case 16:        /* LONG8 */
                return 8;
        }
        return 0;
}

/* PIL reads these types too (not as integers): an entry of them still
 * replaces an earlier orientation with a value that is not 2..8. */
static unsigned exif_other_size(uint32_t type) {
        switch (type) {
        case 2:         /* ASCII */
        case 7:         /* UNDEFINED */
                return 1;
        case 11:        /* FLOAT */
                return 4;
        case 5:         /* RATIONAL */
        case 10:        /* SRATIONAL */
        case 12:        /* DOUBLE */
                return 8;
        }
        return 0;
}

int decode_exif_orientation(const uint8_t *p, size_t len) {
        uint32_t ifd, n_entries;
        int orientation = 1;
        bool be;

        if (len >= 6 && memcmp(p, "Exif\0\0", 6) == 0) {
                p += 6;
                len -= 6;
        }
        if (len < 8)
                return 1;
        if (memcmp(p, "MM\0*", 4) == 0 || memcmp(p, "MM*\0", 4) == 0)
                be = true;
        else if (memcmp(p, "II*\0", 4) == 0 || memcmp(p, "II\0*", 4) == 0)
                be = false;
        else
                return 1;       /* not TIFF, or BigTIFF (not EXIF's) */
        ifd = exif_u32(p + 4, be);
        if (ifd > len || len - ifd < 2)
                return 1;
        n_entries = exif_u16(p + ifd, be);
        for (uint32_t i = 0; i < n_entries; i++) {
                size_t e = (size_t)ifd + 2 + (size_t)i * 12;
                const uint8_t *v;
                uint32_t type, count;
                uint64_t size;
                unsigned unit;

                if (e > len || len - e < 12)
                        break;  /* truncated: PIL keeps what it read */
                if (exif_u16(p + e, be) != EXIF_TAG_ORIENTATION)
                        continue;
                type = exif_u16(p + e + 2, be);
                count = exif_u32(p + e + 4, be);
                unit = exif_int_size(type);
                if (!unit)
                        unit = exif_other_size(type);
                if (!unit || count == 0)
                        continue;       /* a type PIL skips, or no value */
                size = (uint64_t)count * unit;
                if (size <= 4)
                        v = p + e + 8;
                else {
                        uint32_t off = exif_u32(p + e + 8, be);

                        if (off > len || len - off < size)
                                continue;       /* PIL: "possibly corrupt", skipped */
                        v = p + off;
                }
                if (exif_int_size(type) == 0) {
                        orientation = 0;        /* not an integer: nothing applies */
                        continue;
                }
                /* Signed or not, 2..8 read the same; LONG8's high half must be 0. */
                if (unit == 1)
                        orientation = v[0];
                else if (unit == 2)
                        orientation = (int)exif_u16(v, be);
                else if (unit == 4) {
                        uint32_t x = exif_u32(v, be);

                        orientation = x <= 8 ? (int)x : 0;
                } else {
                        uint32_t lo = exif_u32(v + (be ? 4 : 0), be), hi = exif_u32(v + (be ? 0 : 4), be);

                        orientation = hi == 0 && lo <= 8 ? (int)lo : 0;
                }
        }
        return orientation >= 1 && orientation <= 8 ? orientation : 1;
}

/* The first APP1 "Exif\0" segment before the scan, or NULL. */
static const uint8_t *exif_in_jpeg(const uint8_t *p, size_t len, size_t *ret_len) {
        size_t off = 2;

        if (len < 4 || p[0] != 0xff || p[1] != 0xd8)
                return NULL;
        for (;;) {
                uint8_t m;
                size_t n;

                if (off >= len || p[off] != 0xff)
                        return NULL;
                while (off < len && p[off] == 0xff)
                        off++;  /* fill bytes */
                if (off >= len)
                        return NULL;
                m = p[off++];
                if (m == 0xd8 || m == 0x01 || (m >= 0xd0 && m <= 0xd7))
                        continue;       /* no length */
                if (m == 0xda || m == 0xd9 || len - off < 2)
                        return NULL;
                n = (size_t)p[off] << 8 | p[off + 1];
                if (n < 2 || n > len - off)
                        return NULL;
                if (m == 0xe1 && n - 2 >= 5 && memcmp(p + off + 2, "Exif\0", 5) == 0) {
                        *ret_len = n - 2;
                        return p + off + 2;
                }
                off += n;
        }
}

/* The last eXIf chunk, or NULL. */
static const uint8_t *exif_in_png(const uint8_t *p, size_t len, size_t *ret_len) {
        const uint8_t *found = NULL;
        size_t off = 8;

        while (off <= len && len - off >= 12) {
                uint32_t n = exif_u32(p + off, true);

                if (n > len - off - 12)
                        break;
                if (memcmp(p + off + 4, "eXIf", 4) == 0) {
                        found = p + off + 8;
                        *ret_len = n;
                } else if (memcmp(p + off + 4, "IEND", 4) == 0)
                        break;
                off += 12 + (size_t)n;
        }
        return found;
}

/* The first EXIF chunk of an extended WebP (RIFF chunks after VP8X), or NULL. */
static const uint8_t *exif_in_webp(const uint8_t *p, size_t len, size_t *ret_len) {
        size_t off = 12;

        if (len < 20 || memcmp(p + 12, "VP8X", 4) != 0)
                return NULL;
        while (off <= len && len - off >= 8) {
                uint32_t n = exif_u32(p + off + 4, false);

                if (n > len - off - 8)
                        return NULL;
                if (memcmp(p + off, "EXIF", 4) == 0) {
                        *ret_len = n;
                        return p + off + 8;
                }
                off += 8 + (size_t)n + (n & 1);   /* chunks are padded to an even size */
        }
        return NULL;
}

int decode_orientation(record_format_t f, const void *data, size_t len) {
        const uint8_t *exif = NULL;
        size_t n = 0;

        if (f == RECORD_JPEG)
                exif = exif_in_jpeg(data, len, &n);
        else if (f == RECORD_PNG && len >= 8)
                exif = exif_in_png(data, len, &n);
        else if (f == RECORD_WEBP)
                exif = exif_in_webp(data, len, &n);
        return exif ? decode_exif_orientation(exif, n) : 1;
}
