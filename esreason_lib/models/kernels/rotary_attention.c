/* One decoder layer's rotary embedding, KV-cache write and attention for a block of rows: the native attention of
 * esreason_lib.models.fused_qwen2, built by esreason_lib.models.native with -DHEAD_DIM=D.
 *
 * y       [rows, L, W]       the fused qkv projection's output: W = 2 QK + KV D columns, QK = (H + KV) D, ordered
 *                            q | k | rotate_half(q) | rotate_half(k) | v (q pre-scaled by 1 / sqrt(D)).
 * cos,sin [rows or 1, L, QK] rotary tables at each row's positions (cs_row: their row stride, 0 when shared).
 * k, v    [rows, KV, cap, D] the KV cache; positions start .. start + L - 1 are written from y.
 * bias    NULL, or additive [rows, L, bias_pos] over key positions (bias_row: its row stride).
 * out     [rows, Lq, H D]    attention of the last Lq of the L positions, each query over the keys at positions
 *                            0 .. its own (causal); query head j reads kv head j / (H / KV) (grouped-query).
 * Returns 0, or 1 when its scratch buffer cannot be allocated.
 */
#include <math.h>
#include <stdlib.h>

#define D HEAD_DIM
#define AHEAD 1 /* rows ahead whose cache is prefetched: the decode reads it cold, and waits on the loads */

int rotary_attention(const float *y, long L, long W, const float *cos, const float *sin, long cs_row,
                     float *k, float *v, long cap, long start, const float *bias, long bias_row, long bias_pos,
                     float *out, long Lq, long rows, long H, long KV)
{
    const long QK = (H + KV) * D, G = H / KV, HD = H * D, KD = KV * D, T_max = start + L;
    float *q = malloc(sizeof(float) * (Lq * HD + T_max));
    if (!q) return 1;
    float *s = q + Lq * HD, acc[D];
    for (long r = 0; r < rows; r++) {
        const float *yr = y + r * L * W, *cr = cos + r * cs_row, *sr = sin + r * cs_row;
        float *kr = k + r * KD * cap, *vr = v + r * KD * cap;
        for (long l = 0; l < L; l++) { /* rotate k (and the queries read below), write k and v at start + l */
            const float *yl = yr + l * W, *cl = cr + l * QK, *sl = sr + l * QK;
            for (long h = 0; h < KV; h++) {
                const long c = HD + h * D;
                float *kt = kr + (h * cap + start + l) * D, *vt = vr + (h * cap + start + l) * D;
                for (long d = 0; d < D; d++) {
                    kt[d] = yl[c + d] * cl[c + d] + yl[QK + c + d] * sl[c + d];
                    vt[d] = yl[2 * QK + h * D + d];
                }
            }
            if (l >= L - Lq) {
                float *ql = q + (l - (L - Lq)) * HD;
                for (long j = 0; j < HD; j++) ql[j] = yl[j] * cl[j] + yl[QK + j] * sl[j];
            }
        }
        for (long i = 0; i < Lq; i++) {
            const long l = L - Lq + i, T = start + l + 1;
            const float *b = bias ? bias + r * bias_row + l * bias_pos : NULL;
            for (long hq = 0; hq < H; hq++) {
                const float *qh = q + i * HD + hq * D;
                const float *kh = kr + hq / G * cap * D, *vh = vr + hq / G * cap * D;
                /* a later row's cache lines, one requested per key read (a burst per row stalls on the fill buffers) */
                const int ahead = r + AHEAD < rows && hq % G == 0 && i == Lq - 1;
                float m = -1e30f, sum = 0.f;
                for (long t = 0; t < T; t++) {
                    if (ahead) __builtin_prefetch(kh + AHEAD * KD * cap + t * D);
                    float a = 0.f;
                    for (long d = 0; d < D; d++) a += qh[d] * kh[t * D + d];
                    s[t] = b ? a + b[t] : a;
                    m = s[t] > m ? s[t] : m;
                }
                for (long t = 0; t < T; t++) {
                    s[t] = expf(s[t] - m);
                    sum += s[t];
                }
                for (long d = 0; d < D; d++) acc[d] = 0.f;
                for (long t = 0; t < T; t++) {
                    if (ahead) __builtin_prefetch(vh + AHEAD * KD * cap + t * D);
                    for (long d = 0; d < D; d++) acc[d] += s[t] * vh[t * D + d];
                }
                float *o = out + (r * Lq + i) * HD + hq * D;
                for (long d = 0; d < D; d++) o[d] = acc[d] / sum;
            }
        }
    }
    free(q);
    return 0;
}
