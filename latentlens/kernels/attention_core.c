/* The attention core of docs/methods/attention.md for small heads, fused on the CPU.

   For each batch element b and query i, everything from the scores to z is computed in
   [head, key] buffers that stay in the L1 cache; nothing of size [batch, head, query, key]
   is written. The backward pass recomputes the scores, the pattern and (for the mlp value
   network) u from q, k and v instead of storing them. Two layouts: softmax or no
   normalisation with the linear value network and 8 heads or more hold the heads in the
   vector lanes (HEADS AS LANES, below); the rest hold the keys. Keys as lanes: each
   batch element's k and v are copied transposed ([head, d, key]) into buffers whose key
   rows are padded to KP keys (a multiple of KEY_BLOCK, zero past K), and the keys a query
   does not see (past its causal horizon, or padding) are masked to a zero pattern and a
   zero gradient, so every operation works on whole vectors of LANES keys (GCC's and
   clang's vector extensions): 16, one AVX-512 register (two AVX2 ones, four NEON), or 8
   in a library built for a step's sizes (SPECIALISED) on an x86 CPU with AVX2 and
   without AVX-512, where GCC lowered 16-float vectors through the stack. A sum across
   keys adds each 16-key block's lanes as a 16-float vector would, whatever LANES is
   (KeySum): the same numbers at both widths. The generic library keeps 16 lanes: built
   for 8, GCC fused fewer of its multiply-adds and it computed other numbers than the
   specialised ones.

   Shapes (float32): q, dq [B, Q, H, D]; k, dk [B, K, H, D]; v, dv [B, K, H, E], each
   with its own batch, position and head strides (Spec's; the last dimension contiguous),
   a gradient laid out as its tensor: q, k and v may be slices of one projection; bias,
   dbias [H, Q, KP] (or NULL); drop [Q, KP] (the dropout mask's keep / (1 - p), or NULL),
   zero past K;
   z [B, Q, H, E] and rows [B, Q, H, 2] (softmax's row maximum and inverse sum, written
   forward, read backward; unused by the other normalisations), contiguous; dz [B, Q, H, E]
   with Spec's strides for each of its dimensions (a matmul's gradient may come
   transposed). Query i sits at key position
   query_start + i: with the causal mask it sees keys 0 .. query_start + i.

   norm: 0 softmax over keys, 1 rms across heads (HYLA's), 2 none (linear attention).
   vnet: 0 linear (z[i,h] = sum_k a[h,i,k] v[k,h]), 1 relu mlp, 2 identity mlp
   (u[i,k] = sum_h a[h,i,k] v[k,h]; z[i,h] = sum_k a[h,i,k] phi(u[i,k])).
   Forward, the batch is cut into `threads` slices, one an OpenMP thread (the runtime
   PyTorch has loaded, so its threads are PyTorch's). Backward, it is cut into `slices`
   slices, a number the caller fixes whatever the thread count, which the threads share;
   dbias holds one [H, Q, KP] sum per slice, added into the first in slice order, so
   that sum is the same on any thread count. */

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cephes_exp.h"
#include "openmp.h"

#define KEY_BLOCK 16 /* attention_core.py's LANES: KP is a multiple of it */
#ifndef LANES        /* a build may set it (the tests build both widths) */
#if defined(FIXED_D) && defined(__AVX2__) && !defined(__AVX512F__)
#define LANES 8
#else
#define LANES 16
#endif
#endif
#define PARTS (KEY_BLOCK / LANES) /* vectors a block of KEY_BLOCK keys takes */
typedef float vf __attribute__((vector_size(4 * LANES)));
typedef int vi __attribute__((vector_size(4 * LANES)));
typedef float vf_unaligned __attribute__((vector_size(4 * LANES), aligned(4)));

#if LANES == 16
static const vi LANE = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
#elif LANES == 8
static const vi LANE = {0, 1, 2, 3, 4, 5, 6, 7};
#else
#error "LANES must be 8 or 16"
#endif

static inline vf load(const float *x) { return *(const vf_unaligned *)x; }
static inline void store(float *x, vf v) { *(vf_unaligned *)x = v; }
static inline void add_to(float *x, vf v) { store(x, load(x) + v); }
static inline vf splat(float x) { return (vf){0.f} + x; }
static inline vf choose(vi mask, vf yes, vf no) { return (vf)(((vi)yes & mask) | ((vi)no & ~mask)); }
static inline vf keep(vi mask, vf x) { return (vf)((vi)x & mask); }
/* Lanes of block c that are keys below n: all ones, else zero. */
static inline vi seen(int c, int n) { return LANE + c * LANES < n; }

static inline vf maximum(vf a, vf b) { return choose(a > b, a, b); }

/* The lanes' sum (maximum) as a tree: lane l and l + 8 first, then l + 4, l + 2, l + 1.
   At 8 lanes the tree starts at l + 4: a 16-key block's two halves are added first by
   KeySum, which makes the same first step. */
#if LANES == 16
#define HALVES(v, step)                                                                        \
    (step) == 8   ? __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, \
                                            5, 6, 7)                                            \
    : (step) == 4 ? __builtin_shufflevector(v, v, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, \
                                            3)                                                  \
    : (step) == 2 ? __builtin_shufflevector(v, v, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, \
                                            1)                                                  \
                  : __builtin_shufflevector(v, v, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0)
#else
#define HALVES(v, step)                                                                        \
    (step) == 4   ? __builtin_shufflevector(v, v, 4, 5, 6, 7, 0, 1, 2, 3)                       \
    : (step) == 2 ? __builtin_shufflevector(v, v, 2, 3, 0, 1, 2, 3, 0, 1)                       \
                  : __builtin_shufflevector(v, v, 1, 0, 1, 0, 1, 0, 1, 0)
#endif

static inline float lane_sum(vf v) {
    for (int step = LANES / 2; step >= 1; step /= 2) v += HALVES(v, step);
    return v[0];
}

static inline float lane_max(vf v) {
    for (int step = LANES / 2; step >= 1; step /= 2) v = maximum(v, HALVES(v, step));
    return v[0];
}

/* A sum (or maximum) across a row's key vectors c = 0, 1, ...: vector c goes to part
   c % PARTS, the half of its 16-key block it holds, and the parts are added before the
   lanes, so the order is a 16-float vector's at every LANES. */
#if PARTS != 1 && PARTS != 2
#error "a block of KEY_BLOCK keys must take one vector or two"
#endif
/* The two parts are named, not indexed by c: GCC keeps named vectors in registers and
   contracts `part += a * b` into a fused multiply-add as it does a plain vector's (an
   array indexed by c % 2 lived in memory, uncontracted: other numbers). */
typedef struct {
    vf even, odd;
} KeySum;

static inline KeySum key_sum(vf start) { return (KeySum){start, start}; }
static inline vf *key_part(KeySum *s, int c) { return PARTS == 2 && c % 2 ? &s->odd : &s->even; }
static inline float key_total(KeySum s) { return lane_sum(PARTS == 2 ? s.even + s.odd : s.even); }
static inline float key_top(KeySum s) {
    return lane_max(PARTS == 2 ? maximum(s.even, s.odd) : s.even);
}

/* exp(x) for x <= 0 (a softmax's shifted scores), lane by lane: Cephes's expf, 2^n p(r)
   with r = x - n ln 2 in [-ln 2 / 2, ln 2 / 2], within 2 ulp of glibc's expf down to
   x = -87 (below, where glibc's result is denormal or 0, it gives 2^-126 p(r) <= 1.2e-38:
   nothing a softmax's sum of terms >= 1 can tell apart). */
static inline vf exp_nonpositive(vf x) {
    x = maximum(x, splat(-87.3f));
    const vf t = x * 1.44269504088896341f + 0.5f;
    vi n = __builtin_convertvector(t, vi); /* toward zero; floor below */
    n += __builtin_convertvector(n, vf) > t;
    const vf nf = __builtin_convertvector(n, vf);
    const vf r = x - nf * 0.693359375f + nf * 2.12194440e-4f;
    return CEPHES_EXP_OF_REDUCED(r) * (vf)((n + 127) << 23);
}

typedef struct {
    int B, Q, K, KP, H, D, E, query_start, causal, norm, vnet;
    float scale, eps;
    long q_batch, q_pos, q_head, k_batch, k_pos, k_head, v_batch, v_pos, v_head;
    long dz_batch, dz_pos, dz_head, dz_elem;
} Spec;


/* Every helper is inlined into its slice, so that a specialised slice (SPECIALISED) sees
   its sizes as constants. */
#define INLINE static inline __attribute__((always_inline))

/* One query's working set, in blocks of LANES keys: [H][NB] or [E][NB], NB = KP / LANES;
   and one batch element's k and v transposed, kt [H, D, KP] and vt [H, E, KP], with their
   gradients dkt and dvt. */
typedef struct {
    vf *s, *a, *ad, *da, *r, *u, *phi, *du;
    float *kt, *vt, *dkt, *dvt;
} Buffers;

INLINE Buffers buffers(const Spec *p) {
    const size_t NB = p->KP / LANES, hk = (size_t)p->H * NB, ek = (size_t)p->E * NB;
    const size_t hdk = (size_t)p->H * p->D * NB, hek = (size_t)p->H * p->E * NB;
    vf *all = aligned_alloc(sizeof(vf), sizeof(vf) * (4 * hk + NB + 3 * ek + 2 * (hdk + hek)));
    Buffers w;
    w.s = all, w.a = w.s + hk, w.ad = w.a + hk, w.da = w.ad + hk, w.r = w.da + hk;
    w.u = w.r + NB, w.phi = w.u + ek, w.du = w.phi + ek;
    w.kt = (float *)(w.du + ek), w.vt = w.kt + hdk * LANES;
    w.dkt = w.vt + hek * LANES, w.dvt = w.dkt + hdk * LANES;
    return w;
}

/* Batch element b's k and v into kt [H, D, KP] and vt [H, E, KP], zero past K. */
INLINE void transpose_keys(const Spec *p, const float *k, const float *v, int b, Buffers *w) {
    const int H = p->H, D = p->D, E = p->E, K = p->K, KP = p->KP;
    memset(w->kt, 0, sizeof(float) * H * (D + E) * KP); /* vt follows kt */
    for (int j = 0; j < K; j++)
        for (int h = 0; h < H; h++) {
            const float *kj = k + b * p->k_batch + j * p->k_pos + h * p->k_head;
            const float *vj = v + b * p->v_batch + j * p->v_pos + h * p->v_head;
            for (int d = 0; d < D; d++) w->kt[((size_t)h * D + d) * KP + j] = kj[d];
            for (int e = 0; e < E; e++) w->vt[((size_t)h * E + e) * KP + j] = vj[e];
        }
}

INLINE int keys_seen(const Spec *p, int i) {
    return p->causal && p->query_start + i + 1 < p->K ? p->query_start + i + 1 : p->K;
}

/* Scores s, pattern a (normalised, zero past the n seen keys), rms factors r and dropped
   pattern ad of query i of batch element b, over its nb blocks of keys. Softmax's row
   maximum and inverse sum, per head, go to rows [H, 2] (forward) or come from it
   (backward: `saved`), so that the backward pass's pattern is the forward's, bit for bit,
   without its two reductions. */
INLINE void pattern(const Spec *p, const float *q, const float *bias, const float *drop, int b,
                    int i, int n, int nb, float *rows, int saved, Buffers *w) {
    const int H = p->H, KP = p->KP, D = p->D, NB = KP / LANES;
    for (int h = 0; h < H; h++) {
        const float *qh = q + b * p->q_batch + i * p->q_pos + h * p->q_head;
        const float *kh = w->kt + (size_t)h * D * KP;
        const float *bh = bias ? bias + ((size_t)h * p->Q + i) * KP : NULL;
        for (int c = 0; c < nb; c++) {
            vf s = bh ? load(bh + c * LANES) : splat(0.f);
            for (int d = 0; d < D; d++) s += qh[d] * p->scale * load(kh + d * KP + c * LANES);
            w->s[h * NB + c] = s;
        }
    }
    if (p->norm == 0) {
        for (int h = 0; h < H; h++) {
            const vf *s = w->s + h * NB;
            vf *a = w->a + h * NB;
            if (!saved) {
                KeySum top = key_sum(splat(-INFINITY));
                for (int c = 0; c < nb; c++)
                    *key_part(&top, c) = maximum(*key_part(&top, c),
                                                 choose(seen(c, n), s[c], *key_part(&top, c)));
                rows[2 * h] = key_top(top);
            }
            KeySum total = key_sum(splat(0.f));
            for (int c = 0; c < nb; c++) {
                const vi mask = seen(c, n);
                a[c] = keep(mask, exp_nonpositive(choose(mask, s[c] - rows[2 * h], splat(-87.3f))));
                *key_part(&total, c) += a[c];
            }
            if (!saved) rows[2 * h + 1] = 1.f / key_total(total);
            for (int c = 0; c < nb; c++) a[c] *= rows[2 * h + 1];
        }
    } else if (p->norm == 1) {
        for (int c = 0; c < nb; c++) {
            vf squares = splat(0.f);
            for (int h = 0; h < H; h++) squares += w->s[h * NB + c] * w->s[h * NB + c];
            float *r = (float *)&w->r[c];
            squares = squares / (float)H + p->eps;
            for (int l = 0; l < LANES; l++) r[l] = 1.f / sqrtf(squares[l]);
            for (int h = 0; h < H; h++)
                w->a[h * NB + c] = keep(seen(c, n), w->s[h * NB + c] * w->r[c]);
        }
    } else {
        for (int h = 0; h < H; h++)
            for (int c = 0; c < nb; c++) w->a[h * NB + c] = keep(seen(c, n), w->s[h * NB + c]);
    }
    for (int h = 0; h < H; h++)
        for (int c = 0; c < nb; c++)
            w->ad[h * NB + c] = drop ? w->a[h * NB + c] * load(drop + (size_t)i * KP + c * LANES)
                                     : w->a[h * NB + c];
}

/* u [E][NB] = sum_h ad[h] vt[h] and phi = act(u), over nb blocks of keys. */
INLINE void value_hidden(const Spec *p, int nb, Buffers *w) {
    const float *vb = w->vt;
    const int H = p->H, KP = p->KP, E = p->E, NB = KP / LANES;
    for (int e = 0; e < E; e++)
        for (int c = 0; c < nb; c++) {
            vf u = splat(0.f);
            for (int h = 0; h < H; h++)
                u += w->ad[h * NB + c] * load(vb + ((size_t)h * E + e) * KP + c * LANES);
            w->u[e * NB + c] = u;
            w->phi[e * NB + c] = p->vnet == 1 ? keep(u > 0.f, u) : u;
        }
}

INLINE void forward_slice(const Spec *p, int b0, int b1, const float *q, const float *k,
                          const float *v, const float *bias, const float *drop, float *z,
                          float *rows) {
    const int H = p->H, KP = p->KP, E = p->E, NB = KP / LANES;
    Buffers w = buffers(p);
    const float *vb = w.vt;
    for (int b = b0; b < b1; b++) {
        transpose_keys(p, k, v, b, &w);
        for (int i = 0; i < p->Q; i++) {
            const int n = keys_seen(p, i), nb = (n + LANES - 1) / LANES;
            float *row = p->norm == 0 ? rows + ((size_t)b * p->Q + i) * H * 2 : NULL;
            pattern(p, q, bias, drop, b, i, n, nb, row, 0, &w);
            if (p->vnet) value_hidden(p, nb, &w);
            float *zi = z + ((size_t)b * p->Q + i) * H * E;
            for (int h = 0; h < H; h++)
                for (int e = 0; e < E; e++) {
                    KeySum total = key_sum(splat(0.f));
                    for (int c = 0; c < nb; c++)
                        *key_part(&total, c) +=
                            w.ad[h * NB + c] *
                            (p->vnet ? w.phi[e * NB + c]
                                     : load(vb + ((size_t)h * E + e) * KP + c * LANES));
                    zi[h * E + e] = key_total(total);
                }
        }
    }
    free(w.s);
}

/* The gradient da [H][NB] with respect to the dropped pattern ad of one query (dzi: its
   dz [H, E]), and each key's share of dv. */
INLINE void pattern_gradient(const Spec *p, const float *dzi, int nb, Buffers *w) {
    const int H = p->H, KP = p->KP, E = p->E, NB = KP / LANES;
    const float *vb = w->vt;
    float *dvb = w->dvt;
    if (p->vnet == 0) {
        for (int h = 0; h < H; h++)
            for (int c = 0; c < nb; c++) {
                vf da = splat(0.f);
                for (int e = 0; e < E; e++) {
                    const size_t row = ((size_t)h * E + e) * KP + c * LANES;
                    da += dzi[h * E + e] * load(vb + row);
                    add_to(dvb + row, dzi[h * E + e] * w->ad[h * NB + c]);
                }
                w->da[h * NB + c] = da;
            }
        return;
    }
    value_hidden(p, nb, w);
    for (int e = 0; e < E; e++)
        for (int c = 0; c < nb; c++) { /* du = d phi * act'(u) */
            vf du = splat(0.f);
            for (int h = 0; h < H; h++) du += dzi[h * E + e] * w->ad[h * NB + c];
            w->du[e * NB + c] = p->vnet == 1 ? keep(w->u[e * NB + c] > 0.f, du) : du;
        }
    for (int h = 0; h < H; h++)
        for (int c = 0; c < nb; c++) {
            vf da = splat(0.f);
            for (int e = 0; e < E; e++) {
                const size_t row = ((size_t)h * E + e) * KP + c * LANES;
                da += dzi[h * E + e] * w->phi[e * NB + c] + w->du[e * NB + c] * load(vb + row);
                add_to(dvb + row, w->ad[h * NB + c] * w->du[e * NB + c]);
            }
            w->da[h * NB + c] = da;
        }
}

/* da, through the dropout factors and the normalisation, becomes the scores' gradient ds
   (in da), zero past the n seen keys. */
INLINE void score_gradient(const Spec *p, const float *drop, int i, int n, int nb,
                           Buffers *w) {
    const int H = p->H, KP = p->KP, NB = KP / LANES;
    if (drop)
        for (int h = 0; h < H; h++)
            for (int c = 0; c < nb; c++)
                w->da[h * NB + c] *= load(drop + (size_t)i * KP + c * LANES);
    if (p->norm == 0) { /* a is zero past n, and so is ds */
        for (int h = 0; h < H; h++) {
            vf *da = w->da + h * NB;
            const vf *a = w->a + h * NB;
            KeySum dots = key_sum(splat(0.f));
            for (int c = 0; c < nb; c++) *key_part(&dots, c) += a[c] * da[c];
            const float dot = key_total(dots);
            for (int c = 0; c < nb; c++) da[c] = a[c] * (da[c] - dot);
        }
    } else if (p->norm == 1) {
        for (int c = 0; c < nb; c++) {
            const vf r = w->r[c];
            vf sums = splat(0.f);
            for (int h = 0; h < H; h++) sums += w->s[h * NB + c] * w->da[h * NB + c];
            sums *= r * r * r / (float)H;
            for (int h = 0; h < H; h++)
                w->da[h * NB + c] =
                    keep(seen(c, n), r * w->da[h * NB + c] - sums * w->s[h * NB + c]);
        }
    } else {
        for (int h = 0; h < H; h++)
            for (int c = 0; c < nb; c++) w->da[h * NB + c] = keep(seen(c, n), w->da[h * NB + c]);
    }
}

INLINE void backward_slice(const Spec *p, int b0, int b1, const float *q, const float *k,
                           const float *v, const float *bias, const float *drop,
                           const float *rows, const float *dz, float *dq, float *dk, float *dv,
                           float *dbias) {
    const int H = p->H, KP = p->KP, D = p->D, E = p->E, NB = KP / LANES;
    Buffers w = buffers(p);
    const float *kb = w.kt;
    float dzi[H * E]; /* one query's dz, gathered from its strides */
    for (int b = b0; b < b1; b++) {
        transpose_keys(p, k, v, b, &w);
        memset(w.dkt, 0, sizeof(float) * H * (D + E) * KP); /* dvt follows dkt */
        for (int i = 0; i < p->Q; i++) {
            const int n = keys_seen(p, i), nb = (n + LANES - 1) / LANES;
            float *row = p->norm == 0 ? (float *)rows + ((size_t)b * p->Q + i) * H * 2 : NULL;
            pattern(p, q, bias, drop, b, i, n, nb, row, 1, &w);
            const float *dzq = dz + b * p->dz_batch + i * p->dz_pos;
            for (int h = 0; h < H; h++)
                for (int e = 0; e < E; e++) dzi[h * E + e] = dzq[h * p->dz_head + e * p->dz_elem];
            pattern_gradient(p, dzi, nb, &w);
            score_gradient(p, drop, i, n, nb, &w);
            /* ds into q, k and the bias. */
            for (int h = 0; h < H; h++) {
                const vf *ds = w.da + h * NB;
                const float *qh = q + b * p->q_batch + i * p->q_pos + h * p->q_head;
                float *dqh = dq + b * p->q_batch + i * p->q_pos + h * p->q_head;
                if (dbias)
                    for (int c = 0; c < nb; c++)
                        add_to(dbias + ((size_t)h * p->Q + i) * KP + c * LANES, ds[c]);
                for (int d = 0; d < D; d++) {
                    const size_t row = ((size_t)h * D + d) * KP;
                    const float qd = qh[d] * p->scale;
                    KeySum total = key_sum(splat(0.f));
                    for (int c = 0; c < nb; c++) {
                        *key_part(&total, c) += ds[c] * load(kb + row + c * LANES);
                        add_to(w.dkt + row + c * LANES, qd * ds[c]);
                    }
                    dqh[d] = key_total(total) * p->scale;
                }
            }
        }
        for (int j = 0; j < p->K; j++) /* dkt, dvt back to dk, dv's layout */
            for (int h = 0; h < H; h++) {
                float *dkj = dk + b * p->k_batch + j * p->k_pos + h * p->k_head;
                float *dvj = dv + b * p->v_batch + j * p->v_pos + h * p->v_head;
                for (int d = 0; d < D; d++) dkj[d] = w.dkt[((size_t)h * D + d) * KP + j];
                for (int e = 0; e < E; e++) dvj[e] = w.dvt[((size_t)h * E + e) * KP + j];
            }
    }
    free(w.s);
}

/* ---- Heads as lanes: softmax or no normalisation with the linear value network ----

   With many heads (HEADS_AS_LANES_FROM or more) those two attentions hold a query's heads,
   not its keys, in the vectors (HEAD_LANES of them, zero past H): each score, exp and
   product is one vector op for HEAD_LANES heads, and every sum over keys (softmax's
   maximum and total, z, dq, dk, dv) runs down the keys, vector by vector, with no sum
   across lanes and no padded keys. A lane's numbers are its head's alone, so they are the
   same at every vector width and in every build; they differ from the keys-as-lanes
   order above by rounding. On a 2-core Zen 3 at SRAVEN's shapes (16 heads of 4, 36 keys)
   the forward pass took 1.8x less time than with keys as lanes and the backward 1.1x
   (benchmarks/speed/attention_layouts.py). Buffers per batch element:
   kh [K][D][HV] and vh [K][E][HV] (HV = vectors a key's heads take), their gradients, and
   one query's scores (then its pattern) and their gradients [K][HV]; the bias comes
   transposed to [Q][K][HV * HEAD_LANES] (bias_by_query). */

#define HEAD_LANES 8
#ifndef HEADS_AS_LANES_FROM /* a build may set it (the benchmark times both layouts) */
#define HEADS_AS_LANES_FROM 8
#endif
#if defined(__FMA__)
#include <immintrin.h>
#endif
typedef float hf __attribute__((vector_size(4 * HEAD_LANES)));
typedef int hi __attribute__((vector_size(4 * HEAD_LANES)));
typedef float hf_unaligned __attribute__((vector_size(4 * HEAD_LANES), aligned(4)));

static inline hf hload(const float *x) { return *(const hf_unaligned *)x; }
static inline hf hsplat(float x) { return (hf){0.f} + x; }
/* a * b + c rounded once, written out: GCC contracted `s += a * b` in some builds of these
   loops and not in others (the generic library's scores differed from a specialised
   one's), so no product here is left for the compiler to fuse. */
static inline hf hfma(hf a, hf b, hf c) {
#if defined(__FMA__) && HEAD_LANES == 8
    return (hf)_mm256_fmadd_ps((__m256)a, (__m256)b, (__m256)c);
#else
    hf r;
    for (int l = 0; l < HEAD_LANES; l++) r[l] = fmaf(a[l], b[l], c[l]);
    return r;
#endif
}
static inline hf hmaximum(hf a, hf b) {
    const hi m = a > b;
    return (hf)(((hi)a & m) | ((hi)b & ~m));
}

/* exp_nonpositive's arithmetic, lane by lane, on HEAD_LANES lanes. */
static inline hf hexp_nonpositive(hf x) {
    x = hmaximum(x, hsplat(-87.3f));
    const hf t = hfma(x, hsplat(1.44269504088896341f), hsplat(0.5f));
    hi n = __builtin_convertvector(t, hi);
    n += __builtin_convertvector(n, hf) > t;
    const hf nf = __builtin_convertvector(n, hf);
    const hf r = hfma(nf, hsplat(2.12194440e-4f), hfma(nf, hsplat(-0.693359375f), x));
    hf y = hfma(hsplat(1.9875691500e-4f), r, hsplat(1.3981999507e-3f));
    y = hfma(y, r, hsplat(8.3334519073e-3f));
    y = hfma(y, r, hsplat(4.1665795894e-2f));
    y = hfma(y, r, hsplat(1.6666665459e-1f));
    y = hfma(y, r, hsplat(5.0000001201e-1f));
    y = hfma(y * r, r, r) + 1.f;
    return y * (hf)((n + 127) << 23);
}

INLINE int heads_as_lanes(const Spec *p) {
    return p->norm != 1 && p->vnet == 0 && p->H >= HEADS_AS_LANES_FROM;
}

INLINE int head_vectors(const Spec *p) { return (p->H + HEAD_LANES - 1) / HEAD_LANES; }

/* bias [H, Q, KP] as [Q, K, HV * HEAD_LANES], zero past H: one load a key's heads. */
static float *bias_by_query(const Spec *p, const float *bias) {
    if (!bias) return NULL;
    const int HP = head_vectors(p) * HEAD_LANES;
    float *out = aligned_alloc(sizeof(hf), sizeof(hf) * (size_t)p->Q * p->K * head_vectors(p));
    for (int i = 0; i < p->Q; i++)
        for (int j = 0; j < p->K; j++)
            for (int h = 0; h < HP; h++)
                out[((size_t)i * p->K + j) * HP + h] =
                    h < p->H ? bias[((size_t)h * p->Q + i) * p->KP + j] : 0.f;
    return out;
}

typedef struct {
    hf *kh, *vh, *dkh, *dvh, *s, *ds, *dbias;
} HeadBuffers;

INLINE HeadBuffers head_buffers(const Spec *p, int bias_gradient) {
    const size_t HV = head_vectors(p), K = p->K, kd = K * p->D * HV, ke = K * p->E * HV;
    const size_t bias = bias_gradient ? (size_t)p->Q * K * HV : 0;
    hf *all = aligned_alloc(sizeof(hf), sizeof(hf) * (2 * (kd + ke) + 2 * K * HV + bias));
    HeadBuffers w = {all, all + kd, all + kd + ke, all + 2 * kd + ke, all + 2 * (kd + ke)};
    w.ds = w.s + K * HV;
    w.dbias = w.ds + K * HV;
    memset(w.dbias, 0, sizeof(hf) * bias);
    return w;
}

/* Batch element b's k and v into kh and vh, zero past H. */
INLINE void keys_by_head(const Spec *p, const float *k, const float *v, int b, HeadBuffers *w) {
    const int H = p->H, D = p->D, E = p->E, HV = head_vectors(p);
    memset(w->kh, 0, sizeof(hf) * (size_t)p->K * (D + E) * HV); /* vh follows kh */
    for (int j = 0; j < p->K; j++)
        for (int h = 0; h < H; h++) {
            const float *kj = k + b * p->k_batch + j * p->k_pos + h * p->k_head;
            const float *vj = v + b * p->v_batch + j * p->v_pos + h * p->v_head;
            for (int d = 0; d < D; d++) ((float *)w->kh)[((size_t)j * D + d) * HV * HEAD_LANES + h] = kj[d];
            for (int e = 0; e < E; e++) ((float *)w->vh)[((size_t)j * E + e) * HV * HEAD_LANES + h] = vj[e];
        }
}

/* x's first `vectors` vectors of heads set to zero. */
INLINE void zero_heads(hf *x, int vectors) {
    for (int v = 0; v < vectors; v++) x[v] = hsplat(0.f);
}

/* Query i's scaled q [D][HV] (zero past H). */
INLINE void query_by_head(const Spec *p, const float *q, int b, int i, hf *qs) {
    const int D = p->D, HV = head_vectors(p);
    zero_heads(qs, D * HV);
    for (int h = 0; h < p->H; h++)
        for (int d = 0; d < D; d++)
            ((float *)qs)[(size_t)d * HV * HEAD_LANES + h] =
                q[b * p->q_batch + i * p->q_pos + h * p->q_head + d] * p->scale;
}

/* The score of query i and key j for the g-th vector of heads. */
INLINE hf head_score(const Spec *p, const hf *restrict qs, const float *restrict bias_t,
                     const hf *restrict kh, int i, int j, int g) {
    const int D = p->D, HV = head_vectors(p);
    hf s = bias_t ? hload(bias_t + (((size_t)i * p->K + j) * HV + g) * HEAD_LANES) : hsplat(0.f);
    for (int d = 0; d < D; d++) s = hfma(qs[d * HV + g], kh[((size_t)j * D + d) * HV + g], s);
    return s;
}

INLINE void forward_heads_slice(const Spec *p, int b0, int b1, const float *q, const float *k,
                                const float *v, const float *bias_t, const float *drop,
                                float *z, float *rows) {
    const int H = p->H, D = p->D, E = p->E, HV = head_vectors(p);
    HeadBuffers w = head_buffers(p, 0);
    const hf *restrict kh = w.kh, *restrict vh = w.vh;
    hf *restrict pat = w.s; /* query i's scores, then its pattern [K][HV] */
    hf qs[D * HV], top[HV], inverse[HV], zs[E * HV];
    for (int b = b0; b < b1; b++) {
        keys_by_head(p, k, v, b, &w);
        for (int i = 0; i < p->Q; i++) {
            const int n = keys_seen(p, i);
            query_by_head(p, q, b, i, qs);
            if (p->norm == 0) { /* softmax's pattern; without it each score is used at once */
                for (int g = 0; g < HV; g++) top[g] = hsplat(-INFINITY);
                for (int j = 0; j < n; j++)
                    for (int g = 0; g < HV; g++) {
                        pat[j * HV + g] = head_score(p, qs, bias_t, kh, i, j, g);
                        top[g] = hmaximum(top[g], pat[j * HV + g]);
                    }
                hf total[HV];
                zero_heads(total, HV);
                for (int j = 0; j < n; j++)
                    for (int g = 0; g < HV; g++) {
                        pat[j * HV + g] = hexp_nonpositive(pat[j * HV + g] - top[g]);
                        total[g] += pat[j * HV + g];
                    }
                for (int g = 0; g < HV; g++) inverse[g] = 1.f / total[g];
                for (int j = 0; j < n; j++)
                    for (int g = 0; g < HV; g++) pat[j * HV + g] *= inverse[g];
                float *row = rows + ((size_t)b * p->Q + i) * H * 2;
                for (int h = 0; h < H; h++) {
                    row[2 * h] = ((const float *)top)[h];
                    row[2 * h + 1] = ((const float *)inverse)[h];
                }
            }
            zero_heads(zs, E * HV);
            for (int j = 0; j < n; j++) {
                const float keep = drop ? drop[(size_t)i * p->KP + j] : 1.f;
                for (int g = 0; g < HV; g++) {
                    const hf a =
                        p->norm == 0 ? pat[j * HV + g] : head_score(p, qs, bias_t, kh, i, j, g);
                    const hf ad = drop ? a * keep : a;
                    for (int e = 0; e < E; e++)
                        zs[e * HV + g] = hfma(ad, vh[((size_t)j * E + e) * HV + g], zs[e * HV + g]);
                }
            }
            float *zi = z + ((size_t)b * p->Q + i) * H * E;
            for (int h = 0; h < H; h++)
                for (int e = 0; e < E; e++) zi[h * E + e] = ((const float *)zs)[e * HV * HEAD_LANES + h];
        }
    }
    free(w.kh);
}

/* A score gradient ds's share of query i's dq (dqs), key j's dk (dkh) and, where
   `biased`, the bias's gradient (bias_sum), for the g-th vector of heads. */
INLINE void head_score_gradient(const Spec *p, hf ds, const hf *restrict qs,
                                const hf *restrict kh, int i, int j, int g, hf *restrict dqs,
                                hf *restrict dkh, int biased, hf *restrict bias_sum) {
    const int D = p->D, HV = head_vectors(p);
    if (biased) bias_sum[((size_t)i * p->K + j) * HV + g] += ds;
    for (int d = 0; d < D; d++) {
        const size_t at = ((size_t)j * D + d) * HV + g;
        dqs[d * HV + g] = hfma(ds, kh[at], dqs[d * HV + g]);
        dkh[at] = hfma(qs[d * HV + g], ds, dkh[at]);
    }
}

/* The backward pass, query by query: one pass over the keys recomputes the pattern (the
   forward pass's, bit for bit: the same score and, for softmax, exp(s - top) * inverse from
   the saved rows) and takes da through dropout, dv and softmax's sum of a * da; a second
   turns da into ds and ds into dq, dk and the bias's gradient. Without a normalisation ds
   is da, and the first pass takes it at once (the same sums in the same order, no pattern
   or da stored and read back). */
INLINE void backward_heads_slice(const Spec *p, int b0, int b1, const float *q,
                                 const float *k, const float *v, const float *bias_t,
                                 const float *drop, const float *rows, const float *dz,
                                 float *dq, float *dk, float *dv, float *dbias) {
    const int H = p->H, D = p->D, E = p->E, K = p->K, HV = head_vectors(p);
    const int HP = HV * HEAD_LANES;
    HeadBuffers w = head_buffers(p, dbias != NULL);
    const hf *restrict kh = w.kh, *restrict vh = w.vh;
    hf *restrict dkh = w.dkh, *restrict dvh = w.dvh, *restrict pat = w.s, *restrict grad = w.ds;
    hf *restrict bias_sum = w.dbias;
    hf qs[D * HV], top[HV], inverse[HV], dzs[E * HV], dqs[D * HV], dot[HV];
    for (int b = b0; b < b1; b++) {
        keys_by_head(p, k, v, b, &w);
        memset(dkh, 0, sizeof(hf) * (size_t)K * (D + E) * HV); /* dvh follows dkh */
        for (int i = 0; i < p->Q; i++) {
            const int n = keys_seen(p, i);
            query_by_head(p, q, b, i, qs);
            for (int g = 0; g < HV; g++) top[g] = inverse[g] = dot[g] = hsplat(0.f);
            if (p->norm == 0) {
                const float *row = rows + ((size_t)b * p->Q + i) * H * 2;
                for (int h = 0; h < H; h++) {
                    ((float *)top)[h] = row[2 * h];
                    ((float *)inverse)[h] = row[2 * h + 1];
                }
            }
            zero_heads(dzs, E * HV);
            /* dq's sums start at the pass that takes them (zeroed before softmax's first
               pass, its backward ran 3-4% slower at SRAVEN's shapes) */
            if (p->norm != 0) zero_heads(dqs, D * HV);
            const float *dzq = dz + b * p->dz_batch + i * p->dz_pos;
            for (int h = 0; h < H; h++)
                for (int e = 0; e < E; e++)
                    ((float *)dzs)[e * HP + h] = dzq[h * p->dz_head + e * p->dz_elem];
            for (int j = 0; j < n; j++) {
                const float keep = drop ? drop[(size_t)i * p->KP + j] : 1.f;
                for (int g = 0; g < HV; g++) {
                    const hf s = head_score(p, qs, bias_t, kh, i, j, g);
                    const hf a = p->norm == 0 ? hexp_nonpositive(s - top[g]) * inverse[g] : s;
                    const hf ad = drop ? a * keep : a;
                    hf da = hsplat(0.f);
                    for (int e = 0; e < E; e++) {
                        const size_t at = ((size_t)j * E + e) * HV + g;
                        da = hfma(dzs[e * HV + g], vh[at], da);
                        dvh[at] = hfma(ad, dzs[e * HV + g], dvh[at]);
                    }
                    if (drop) da *= keep;
                    if (p->norm == 0) {
                        pat[j * HV + g] = a;
                        grad[j * HV + g] = da;
                        dot[g] = hfma(a, da, dot[g]);
                    } else /* ds = da: taken at once, in the same order */
                        head_score_gradient(p, da, qs, kh, i, j, g, dqs, dkh, dbias != NULL,
                                            bias_sum);
                }
            }
            if (p->norm == 0) { /* softmax's ds needs every key's a da first */
                zero_heads(dqs, D * HV);
                for (int j = 0; j < n; j++)
                    for (int g = 0; g < HV; g++) {
                        const hf ds = pat[j * HV + g] * (grad[j * HV + g] - dot[g]);
                        head_score_gradient(p, ds, qs, kh, i, j, g, dqs, dkh, dbias != NULL,
                                            bias_sum);
                    }
            }
            float *dqi = dq + b * p->q_batch + i * p->q_pos;
            for (int h = 0; h < H; h++)
                for (int d = 0; d < D; d++)
                    dqi[h * p->q_head + d] = ((const float *)dqs)[d * HP + h] * p->scale;
        }
        for (int j = 0; j < K; j++) /* dkh, dvh back to dk, dv's layout */
            for (int h = 0; h < H; h++) {
                float *dkj = dk + b * p->k_batch + j * p->k_pos + h * p->k_head;
                float *dvj = dv + b * p->v_batch + j * p->v_pos + h * p->v_head;
                for (int d = 0; d < D; d++) dkj[d] = ((const float *)dkh)[((size_t)j * D + d) * HP + h];
                for (int e = 0; e < E; e++) dvj[e] = ((const float *)dvh)[((size_t)j * E + e) * HP + h];
            }
    }
    if (dbias) /* the slice's [Q][K][HP] sum into its [H, Q, KP] */
        for (int h = 0; h < H; h++)
            for (int i = 0; i < p->Q; i++)
                for (int j = 0; j < K; j++)
                    dbias[((size_t)h * p->Q + i) * p->KP + j] =
                        ((const float *)bias_sum)[((size_t)i * K + j) * HP + h];
    free(w.kh);
}

/* A slice with the sizes and options of `p` fixed at compile time where this library was
   built for them (FIXED_D ... FIXED_VNET defined: build.py's per-model build, see
   attention_core.py): `p` is copied with those fields set to constants, so that the
   compiler unrolls the loops over a head's dimensions, the heads and the key blocks and
   drops the branches of the other options. The same arithmetic in the same order: the
   results are the generic path's, bit for bit. Any other spec takes the generic path. */
#ifdef FIXED_D
#define SPECIALISED(slice, p, ...)                                                            \
    do {                                                                                       \
        if ((p)->D == FIXED_D && (p)->E == FIXED_E && (p)->H == FIXED_H &&                     \
            (p)->K == FIXED_K && (p)->causal == FIXED_CAUSAL && (p)->norm == FIXED_NORM &&     \
            (p)->vnet == FIXED_VNET) {                                                         \
            Spec fixed = *(p);                                                                 \
            fixed.D = FIXED_D, fixed.E = FIXED_E, fixed.H = FIXED_H, fixed.K = FIXED_K;        \
            fixed.KP = (FIXED_K + KEY_BLOCK - 1) / KEY_BLOCK * KEY_BLOCK;                      \
            fixed.causal = FIXED_CAUSAL;                                                       \
            fixed.norm = FIXED_NORM, fixed.vnet = FIXED_VNET;                                  \
            slice(&fixed, __VA_ARGS__);                                                        \
        } else                                                                                 \
            slice(p, __VA_ARGS__);                                                             \
    } while (0)
#else
#define SPECIALISED(slice, p, ...) slice(p, __VA_ARGS__)
#endif

void attention_forward(const Spec *p, int threads, const float *q, const float *k,
                       const float *v, const float *bias, const float *drop, float *z,
                       float *rows) {
    float *bias_t = heads_as_lanes(p) ? bias_by_query(p, bias) : NULL;
#pragma omp parallel num_threads(threads)
    {
        const int part = omp_get_thread_num(), parts = omp_get_num_threads();
        const int b0 = p->B * part / parts, b1 = p->B * (part + 1) / parts;
        if (heads_as_lanes(p))
            SPECIALISED(forward_heads_slice, p, b0, b1, q, k, v, bias_t, drop, z, rows);
        else
            SPECIALISED(forward_slice, p, b0, b1, q, k, v, bias, drop, z, rows);
    }
    free(bias_t);
}

void attention_backward(const Spec *p, int threads, int slices, const float *q,
                        const float *k, const float *v, const float *bias, const float *drop,
                        const float *rows, const float *dz, float *dq, float *dk, float *dv,
                        float *dbias) {
    float *bias_t = heads_as_lanes(p) ? bias_by_query(p, bias) : NULL;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int part = 0; part < slices; part++) {
        float *own = dbias ? dbias + (size_t)part * p->H * p->Q * p->KP : NULL;
        const int b0 = p->B * part / slices, b1 = p->B * (part + 1) / slices;
        if (heads_as_lanes(p))
            SPECIALISED(backward_heads_slice, p, b0, b1, q, k, v, bias_t, drop, rows, dz, dq, dk,
                        dv, own);
        else
            SPECIALISED(backward_slice, p, b0, b1, q, k, v, bias, drop, rows, dz, dq, dk, dv, own);
    }
    free(bias_t);
    if (!dbias) return;
    const size_t size = (size_t)p->H * p->Q * p->KP; /* the slices' sums into the first */
    for (int part = 1; part < slices; part++) {
        const float *theirs = dbias + part * size;
#pragma omp simd
        for (size_t i = 0; i < size; i++) dbias[i] += theirs[i];
    }
}

/* Whether a call of spec `p` holds its heads in the vectors (else its keys): the tests
   check which layout they exercise. */
int heads_in_lanes(const Spec *p) { return heads_as_lanes(p); }

/* The floats a vector of this library holds (LANES): the tests compare the widths. */
int vector_lanes(void) { return LANES; }

/* How many threads a parallel region of this library gets when asked for `threads`
   (1 where it was built without OpenMP): the tests' check that the kernels run in
   parallel. */
int threads_used(int threads) {
    int used = 1;
#pragma omp parallel num_threads(threads)
    {
#pragma omp single
        used = omp_get_num_threads();
    }
    return used;
}
