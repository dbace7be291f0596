/* The attention core of docs/methods/attention.md for small heads, fused on the CPU.

   For each batch element b and query i, everything from the scores to z is computed in
   [head, key] buffers that stay in the L1 cache; nothing of size [batch, head, query, key]
   is written. The backward pass recomputes the scores, the pattern and (for the mlp value
   network) u from q, k and v instead of storing them. Inner loops run over keys, which
   are contiguous in every buffer (k and v come transposed), so that they vectorise.

   Shapes (float32, contiguous): q, dq [B, Q, H, D]; kt, dkt [B, H, D, K] (k transposed);
   vt, dvt [B, H, E, K]; bias, dbias [H, Q, K] (or NULL); drop [Q, K] (the dropout mask's
   keep / (1 - p), or NULL); z, dz [B, Q, H, E]. Query i sits at key position
   query_start + i: with the causal mask it sees keys 0 .. query_start + i.

   norm: 0 rms across heads (HYLA's), 1 none (linear attention). Softmax is not here: on
   the shapes measured (Table A1's and SRAVEN's) its fused version was no faster than
   PyTorch's softmax, whose rows of 18 to 32 keys each need a max and a sum.
   vnet: 0 linear (z[i,h] = sum_k a[h,i,k] v[k,h]), 1 relu mlp, 2 identity mlp
   (u[i,k] = sum_h a[h,i,k] v[k,h]; z[i,h] = sum_k a[h,i,k] phi(u[i,k])).
   The batch is cut into `threads` slices, one an OpenMP thread (the runtime PyTorch has
   loaded, so its threads are PyTorch's); dbias holds one [H, Q, K] sum per slice. */

#include <math.h>
#include <stdlib.h>
#include <omp.h>
#include <string.h>


typedef struct {
    int B, Q, K, H, D, E, query_start, causal, norm, vnet;
    float scale, eps;
} Spec;

typedef struct {
    float *s, *a, *ad, *r, *u, *phi, *da, *du;
} Buffers;

static Buffers buffers(const Spec *p) {
    const size_t hk = (size_t)p->H * p->K, ek = (size_t)p->E * p->K;
    float *all = malloc(sizeof(float) * (4 * hk + p->K + 3 * ek));
    Buffers w;
    w.s = all, w.a = w.s + hk, w.ad = w.a + hk, w.da = w.ad + hk, w.r = w.da + hk;
    w.u = w.r + p->K, w.phi = w.u + ek, w.du = w.phi + ek;
    return w;
}

static int keys_seen(const Spec *p, int i) {
    return p->causal && p->query_start + i + 1 < p->K ? p->query_start + i + 1 : p->K;
}

/* Scores s, pattern a (normalised), rms factors r and dropped pattern ad of query i of
   batch element b, over its n visible keys. */
static void pattern(const Spec *p, const float *q, const float *kt, const float *bias,
                    const float *drop, int b, int i, int n, Buffers *w) {
    const int H = p->H, K = p->K, D = p->D;
    const float *qi = q + ((size_t)b * p->Q + i) * H * D;
    for (int h = 0; h < H; h++) {
        float *restrict s = w->s + h * K;
        const float *kh = kt + ((size_t)b * H + h) * D * K;
        if (bias) {
            const float *bh = bias + ((size_t)h * p->Q + i) * K;
            for (int j = 0; j < n; j++) s[j] = bh[j];
        } else {
            for (int j = 0; j < n; j++) s[j] = 0.f;
        }
        for (int d = 0; d < D; d++) {
            const float qd = qi[h * D + d] * p->scale;
            const float *restrict kd = kh + (size_t)d * K;
            for (int j = 0; j < n; j++) s[j] += qd * kd[j];
        }
    }
    if (p->norm == 0) {
        float *restrict r = w->r;
        for (int j = 0; j < n; j++) r[j] = 0.f;
        for (int h = 0; h < H; h++)
            for (int j = 0; j < n; j++) r[j] += w->s[h * K + j] * w->s[h * K + j];
        for (int j = 0; j < n; j++) r[j] = 1.f / sqrtf(r[j] / H + p->eps);
        for (int h = 0; h < H; h++)
            for (int j = 0; j < n; j++) w->a[h * K + j] = w->s[h * K + j] * r[j];
    } else {
        memcpy(w->a, w->s, sizeof(float) * H * K);
    }
    const float *di = drop ? drop + (size_t)i * K : NULL;
    for (int h = 0; h < H; h++) {
        const float *restrict a = w->a + h * K;
        float *restrict ad = w->ad + h * K;
        if (di) {
            for (int j = 0; j < n; j++) ad[j] = a[j] * di[j];
        } else {
            for (int j = 0; j < n; j++) ad[j] = a[j];
        }
    }
}

/* u [E, K] = sum_h ad[h] vt[h] and phi = act(u), over n keys. */
static void value_hidden(const Spec *p, const float *vb, int n, Buffers *w) {
    const int H = p->H, K = p->K, E = p->E;
    for (int e = 0; e < E; e++) {
        float *restrict u = w->u + e * K;
        for (int j = 0; j < n; j++) u[j] = 0.f;
        for (int h = 0; h < H; h++) {
            const float *restrict ad = w->ad + h * K, *restrict v = vb + ((size_t)h * E + e) * K;
            for (int j = 0; j < n; j++) u[j] += ad[j] * v[j];
        }
        float *restrict phi = w->phi + e * K;
        if (p->vnet == 1) {
            for (int j = 0; j < n; j++) phi[j] = u[j] > 0.f ? u[j] : 0.f;
        } else {
            for (int j = 0; j < n; j++) phi[j] = u[j];
        }
    }
}

static void forward_slice(const Spec *p, int b0, int b1, const float *q, const float *kt,
                       const float *vt, const float *bias, const float *drop, float *z) {
    const int H = p->H, K = p->K, E = p->E;
    Buffers w = buffers(p);
    for (int b = b0; b < b1; b++) {
        const float *vb = vt + (size_t)b * H * E * K;
        for (int i = 0; i < p->Q; i++) {
            const int n = keys_seen(p, i);
            pattern(p, q, kt, bias, drop, b, i, n, &w);
            float *zi = z + ((size_t)b * p->Q + i) * H * E;
            if (p->vnet) value_hidden(p, vb, n, &w);
            for (int h = 0; h < H; h++) {
                const float *restrict ad = w.ad + h * K;
                for (int e = 0; e < E; e++) {
                    const float *restrict x = p->vnet ? w.phi + e * K : vb + ((size_t)h * E + e) * K;
                    float total = 0.f;
                    #pragma omp simd reduction(+ : total)
                    for (int j = 0; j < n; j++) total += ad[j] * x[j];
                    zi[h * E + e] = total;
                }
            }
        }
    }
    free(w.s);
}

static void backward_slice(const Spec *p, int b0, int b1, const float *q, const float *kt,
                        const float *vt, const float *bias, const float *drop, const float *dz,
                        float *dq, float *dkt, float *dvt, float *dbias) {
    const int H = p->H, K = p->K, D = p->D, E = p->E;
    Buffers w = buffers(p);
    for (int b = b0; b < b1; b++) {
        const float *vb = vt + (size_t)b * H * E * K, *kb = kt + (size_t)b * H * D * K;
        float *dvb = dvt + (size_t)b * H * E * K, *dkb = dkt + (size_t)b * H * D * K;
        for (int i = 0; i < p->Q; i++) {
            const int n = keys_seen(p, i);
            pattern(p, q, kt, bias, drop, b, i, n, &w);
            const float *dzi = dz + ((size_t)b * p->Q + i) * H * E;
            /* da [H, K]: the gradient with respect to the dropped pattern ad. */
            if (p->vnet == 0) {
                for (int h = 0; h < H; h++) {
                    float *restrict da = w.da + h * K;
                    const float *restrict ad = w.ad + h * K;
                    for (int j = 0; j < n; j++) da[j] = 0.f;
                    for (int e = 0; e < E; e++) {
                        const float g = dzi[h * E + e];
                        const float *restrict v = vb + ((size_t)h * E + e) * K;
                        float *restrict dv = dvb + ((size_t)h * E + e) * K;
                        for (int j = 0; j < n; j++) da[j] += g * v[j];
                        for (int j = 0; j < n; j++) dv[j] += g * ad[j];
                    }
                }
            } else {
                value_hidden(p, vb, n, &w);
                for (int e = 0; e < E; e++) { /* du = d phi * act'(u) */
                    float *restrict du = w.du + e * K;
                    const float *restrict u = w.u + e * K;
                    for (int j = 0; j < n; j++) du[j] = 0.f;
                    for (int h = 0; h < H; h++) {
                        const float g = dzi[h * E + e];
                        const float *restrict ad = w.ad + h * K;
                        for (int j = 0; j < n; j++) du[j] += g * ad[j];
                    }
                    if (p->vnet == 1)
                        for (int j = 0; j < n; j++) du[j] = u[j] > 0.f ? du[j] : 0.f;
                }
                for (int h = 0; h < H; h++) {
                    float *restrict da = w.da + h * K;
                    const float *restrict ad = w.ad + h * K;
                    for (int j = 0; j < n; j++) da[j] = 0.f;
                    for (int e = 0; e < E; e++) {
                        const float g = dzi[h * E + e];
                        const float *restrict phi = w.phi + e * K, *restrict du = w.du + e * K;
                        const float *restrict v = vb + ((size_t)h * E + e) * K;
                        float *restrict dv = dvb + ((size_t)h * E + e) * K;
                        for (int j = 0; j < n; j++) da[j] += g * phi[j] + du[j] * v[j];
                        for (int j = 0; j < n; j++) dv[j] += ad[j] * du[j];
                    }
                }
            }
            /* Through the dropout factors and the normalisation: da becomes ds. */
            if (drop) {
                const float *di = drop + (size_t)i * K;
                for (int h = 0; h < H; h++)
                    for (int j = 0; j < n; j++) w.da[h * K + j] *= di[j];
            }
            if (p->norm == 0) {
                float *restrict c = w.u; /* reused: [K] sums over heads */
                for (int j = 0; j < n; j++) c[j] = 0.f;
                for (int h = 0; h < H; h++)
                    for (int j = 0; j < n; j++) c[j] += w.s[h * K + j] * w.da[h * K + j];
                for (int j = 0; j < n; j++) c[j] *= w.r[j] * w.r[j] * w.r[j] / H;
                for (int h = 0; h < H; h++)
                    for (int j = 0; j < n; j++)
                        w.da[h * K + j] = w.r[j] * w.da[h * K + j] - c[j] * w.s[h * K + j];
            }
            /* ds into q, k and the bias. */
            const float *qi = q + ((size_t)b * p->Q + i) * H * D;
            float *dqi = dq + ((size_t)b * p->Q + i) * H * D;
            for (int h = 0; h < H; h++) {
                const float *restrict ds = w.da + h * K;
                if (dbias) {
                    float *restrict db = dbias + ((size_t)h * p->Q + i) * K;
                    for (int j = 0; j < n; j++) db[j] += ds[j];
                }
                for (int d = 0; d < D; d++) {
                    const float *restrict k = kb + ((size_t)h * D + d) * K;
                    float *restrict dk = dkb + ((size_t)h * D + d) * K;
                    const float qd = qi[h * D + d] * p->scale;
                    float total = 0.f;
                    #pragma omp simd reduction(+ : total)
                    for (int j = 0; j < n; j++) total += ds[j] * k[j];
                    for (int j = 0; j < n; j++) dk[j] += qd * ds[j];
                    dqi[h * D + d] = total * p->scale;
                }
            }
        }
    }
    free(w.s);
}

void attention_forward(const Spec *p, int threads, const float *q, const float *kt,
                       const float *vt, const float *bias, const float *drop, float *z) {
#pragma omp parallel num_threads(threads)
    {
        const int part = omp_get_thread_num(), parts = omp_get_num_threads();
        forward_slice(p, p->B * part / parts, p->B * (part + 1) / parts, q, kt, vt, bias, drop,
                      z);
    }
}

void attention_backward(const Spec *p, int threads, const float *q, const float *kt,
                        const float *vt, const float *bias, const float *drop, const float *dz,
                        float *dq, float *dkt, float *dvt, float *dbias) {
#pragma omp parallel num_threads(threads)
    {
        const int part = omp_get_thread_num(), parts = omp_get_num_threads();
        float *own = dbias ? dbias + (size_t)part * p->H * p->Q * p->K : NULL;
        backward_slice(p, p->B * part / parts, p->B * (part + 1) / parts, q, kt, vt, bias,
                       drop, dz, dq, dkt, dvt, own);
    }
}
