/* resize: Resize(256) + CenterCrop(224) as torchvision computes them on a
 * PIL image. See resize.h for what is computed and why only the cropped
 * samples are.
 *
 * The arithmetic follows PIL's 8-bit resampler, which is what makes the
 * results identical rather than close: the filter weights are computed in
 * double, normalised to sum to one, and rounded (half away from zero) to
 * 22-bit fixed point; each sum starts at half a unit, and the result is the
 * sum shifted down by 22 bits and clamped to 0..255. The horizontal pass
 * writes 8-bit samples, which the vertical pass reads back. */
#include "decode/resize.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "core/plan.h"

#define RESIZE_FRAC_BITS 22                    /* 32 bits less 8 for the sample, less 2 for overflow */
#define RESIZE_HALF (1 << (RESIZE_FRAC_BITS - 1))
#define OUT PLAN_DECODE_OUT_SIDE

/* Python's round() of d / 2: halves go to the even neighbour. */
static uint32_t resize_half_even(uint32_t d) {
        uint32_t q = d / 2;

        if (d % 2 == 0)
                return q;
        return q % 2 == 0 ? q : q + 1;
}

void resize_geometry(uint32_t in_w, uint32_t in_h, resize_geometry_t *g) {
        uint32_t s = in_w <= in_h ? in_w : in_h, l = in_w <= in_h ? in_h : in_w;
        /* torchvision: int(256 * long / short), a correctly rounded double
         * division truncated; both operands are exact in a double. */
        uint32_t out_l = (uint32_t)((double)PLAN_DECODE_RESIZE_SIDE * l / (double)s);

        g->in_w = in_w;
        g->in_h = in_h;
        g->out_w = in_w <= in_h ? PLAN_DECODE_RESIZE_SIDE : out_l;
        g->out_h = in_w <= in_h ? out_l : PLAN_DECODE_RESIZE_SIDE;
        g->crop_x = resize_half_even(g->out_w - OUT);
        g->crop_y = resize_half_even(g->out_h - OUT);
}

static double resize_triangle(double x) {
        if (x < 0.0)
                x = -x;
        return x < 1.0 ? 1.0 - x : 0.0;
}

/* The taps of the OUT outputs first..first+OUT-1 of an axis resampled from
 * in_size samples at `scale` input samples per output sample (PIL's:
 * (double)(float)in_size / out_size). The expressions keep PIL's order of
 * operations, so that every double, and so every rounded weight, is the
 * same. */
static int resize_axis(uint32_t in_size, double scale, uint32_t first, int32_t *coef, int32_t *start,
                       int32_t *count, size_t taps_cap) {
        double filterscale = scale < 1.0 ? 1.0 : scale;
        double support = 1.0 * filterscale;
        double w[taps_cap];

        for (uint32_t i = 0; i < OUT; i++) {
                double center = (first + i + 0.5) * scale, ww = 0.0, ss = 1.0 / filterscale;
                int xmin = (int)(center - support + 0.5), xmax = (int)(center + support + 0.5), n;
                int32_t *k = coef + (size_t)i * taps_cap;

                if (xmin < 0)
                        xmin = 0;
                if (xmax > (int)in_size)
                        xmax = (int)in_size;
                n = xmax - xmin;
                if (n < 1 || (size_t)n > taps_cap)
                        return -E2BIG;
                for (int x = 0; x < n; x++) {
                        w[x] = resize_triangle((x + xmin - center + 0.5) * ss);
                        ww += w[x];
                }
                for (int x = 0; x < n; x++) {
                        double v = ww != 0.0 ? w[x] / ww : w[x];

                        k[x] = v < 0 ? (int32_t)(-0.5 + v * (1 << RESIZE_FRAC_BITS))
                                     : (int32_t)(0.5 + v * (1 << RESIZE_FRAC_BITS));
                }
                start[i] = xmin;
                count[i] = n;
        }
        return 0;
}

static inline uint8_t resize_clip8(int32_t acc) {
        acc >>= RESIZE_FRAC_BITS;
        return acc < 0 ? 0 : acc > 255 ? 255 : (uint8_t)acc;
}

/* One row: OUT outputs of ch channels from an input row whose pixels are
 * step bytes apart (ch for a row as stored; another step, or a negative
 * one, for a row of the image as EXIF orientation turns it). */
static void resize_row(const uint8_t *in, int ch, ptrdiff_t step, const int32_t *coef, const int32_t *start,
                       const int32_t *count, size_t taps_cap, uint8_t *out) {
        for (int i = 0; i < OUT; i++) {
                const uint8_t *p = in + start[i] * step;
                const int32_t *k = coef + (size_t)i * taps_cap;
                int n = count[i];

                if (ch == 1 && step == 1) {
                        int32_t a = RESIZE_HALF;

                        for (int t = 0; t < n; t++)
                                a += p[t] * k[t];
                        out[i] = resize_clip8(a);
                } else if (ch == 3 && step == 3) {
                        int32_t a0 = RESIZE_HALF, a1 = RESIZE_HALF, a2 = RESIZE_HALF;

                        for (int t = 0; t < n; t++) {
                                a0 += p[3 * t] * k[t];
                                a1 += p[3 * t + 1] * k[t];
                                a2 += p[3 * t + 2] * k[t];
                        }
                        out[3 * i] = resize_clip8(a0);
                        out[3 * i + 1] = resize_clip8(a1);
                        out[3 * i + 2] = resize_clip8(a2);
                } else {
                        /* The same sums over a strided row. */
                        for (int c = 0; c < ch; c++) {
                                int32_t a = RESIZE_HALF;

                                for (int t = 0; t < n; t++)
                                        a += p[t * step + c] * k[t];
                                out[ch * i + c] = resize_clip8(a);
                        }
                }
        }
}

/* PIL's scale of an axis: in_size / out_size, with in_size through a float. */
static double resize_pil_scale(uint32_t in_size, uint32_t out_size) {
        return (double)(float)in_size / out_size;
}

int resize_crop(const uint8_t *src, uint32_t in_w, uint32_t in_h, size_t stride, int ch, resize_scratch_t *s,
                uint8_t *dst, errbuf_t *err) {
        return resize_crop_reduced(src, in_w, in_h, stride, ch, in_w, in_h, 1, 1, s, dst, err);
}

int resize_crop_reduced(const uint8_t *src, uint32_t in_w, uint32_t in_h, size_t stride, int ch, uint32_t full_w,
                        uint32_t full_h, int num, int denom, resize_scratch_t *s, uint8_t *dst, errbuf_t *err) {
        return resize_crop_steps(src, in_w, in_h, ch, (ptrdiff_t)stride, ch, full_w, full_h, num, denom, s, dst,
                                 err);
}

int resize_crop_steps(const uint8_t *src, uint32_t in_w, uint32_t in_h, ptrdiff_t step_x, ptrdiff_t step_y, int ch,
                      uint32_t full_w, uint32_t full_h, int num, int denom, resize_scratch_t *s, uint8_t *dst,
                      errbuf_t *err) {
        resize_geometry_t g;
        bool reduced = num != denom;
        double scale_x, scale_y;
        const uint8_t *rows;            /* the horizontal pass's output (or the source): (n_rows, OUT, ch) */
        ptrdiff_t rows_stride;
        size_t row_bytes = (size_t)OUT * ch;
        uint8_t line[OUT * 3];
        int need_h, need_v, r;
        uint32_t base;

        if (in_w < 1 || in_h < 1 || (ch != 1 && ch != 3) || num < 1 || denom < 1 || num > denom)
                return errbuf_set(err, -EINVAL, "cannot resize a %ux%u image of %d channels at %d/%d", in_w, in_h,
                                  ch, num, denom);
        /* The geometry is the full image's, whatever the decoder reduced:
         * the same resized size and crop as the accurate path. */
        resize_geometry(full_w, full_h, &g);
        if (reduced) {
                /* Sample j of a reduced axis covers full samples [j, j + 1) *
                 * denom / num, so an output centre c (in full samples) is at
                 * c * num / denom in reduced ones. */
                scale_x = (double)full_w * num / denom / g.out_w;
                scale_y = (double)full_h * num / denom / g.out_h;
                need_h = need_v = 1;
        } else {
                scale_x = resize_pil_scale(in_w, g.out_w);
                scale_y = resize_pil_scale(in_h, g.out_h);
                /* A row whose pixels are not contiguous goes through the
                 * horizontal pass even at the same width: at a scale of 1 its
                 * filter is the identity (one tap of weight 1), exactly. */
                need_h = g.out_w != in_w || step_x != ch;
                need_v = g.out_h != in_h;
        }

        if (need_v) {
                r = resize_axis(in_h, scale_y, g.crop_y, s->coef_y, s->first_y, s->count_y, s->taps_cap);
                if (r < 0)
                        return errbuf_set(err, r, "resizing %ux%u needs more filter taps than planned (%zu)", in_w,
                                          in_h, s->taps_cap);
                base = (uint32_t)s->first_y[0];
        } else
                base = g.crop_y;

        if (need_h) {
                uint32_t n_rows = need_v ? (uint32_t)(s->first_y[OUT - 1] + s->count_y[OUT - 1]) - base : OUT;

                if (n_rows > s->rows_cap)
                        return errbuf_set(err, -E2BIG, "resizing %ux%u needs %u rows, more than the %zu planned", in_w,
                                          in_h, n_rows, s->rows_cap);
                r = resize_axis(in_w, scale_x, g.crop_x, s->coef_x, s->first_x, s->count_x, s->taps_cap);
                if (r < 0)
                        return errbuf_set(err, r, "resizing %ux%u needs more filter taps than planned (%zu)", in_w,
                                          in_h, s->taps_cap);
                for (uint32_t y = 0; y < n_rows; y++)
                        resize_row(src + (ptrdiff_t)(base + y) * step_y, ch, step_x, s->coef_x, s->first_x,
                                   s->count_x, s->taps_cap, s->rows + (size_t)y * row_bytes);
                rows = s->rows;
                rows_stride = (ptrdiff_t)row_bytes;
        } else {
                rows = src + (size_t)g.crop_x * ch + (ptrdiff_t)base * step_y;
                rows_stride = step_y;
        }

        for (int j = 0; j < OUT; j++) {
                const uint8_t *out_row;

                if (need_v) {
                        const int32_t *k = s->coef_y + (size_t)j * s->taps_cap;
                        const uint8_t *p = rows + (ptrdiff_t)(s->first_y[j] - (int32_t)base) * rows_stride;
                        int32_t acc[OUT * 3];

                        for (size_t i = 0; i < row_bytes; i++)
                                acc[i] = RESIZE_HALF;
                        for (int t = 0; t < s->count_y[j]; t++, p += rows_stride)
                                for (size_t i = 0; i < row_bytes; i++)
                                        acc[i] += p[i] * k[t];
                        for (size_t i = 0; i < row_bytes; i++)
                                line[i] = resize_clip8(acc[i]);
                        out_row = line;
                } else
                        out_row = rows + (ptrdiff_t)j * rows_stride;

                if (ch == 3)
                        memcpy(dst + (size_t)j * OUT * 3, out_row, (size_t)OUT * 3);
                else
                        for (int i = 0; i < OUT; i++)
                                memset(dst + ((size_t)j * OUT + i) * 3, out_row[i], 3);
        }
        return 0;
}
