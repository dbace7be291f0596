/* Shared by the kernels: a vectorisable exp of non-positive arguments. */

#ifndef LATENTLENS_EXP_NONPOSITIVE_H
#define LATENTLENS_EXP_NONPOSITIVE_H

#include <string.h>

/* exp(x) for x <= 0 (a softmax's shifted scores) in a form the compiler vectorises:
   Cephes's expf, 2^n p(r) with r = x - n ln 2 in [-ln 2 / 2, ln 2 / 2], within 2 ulp of
   glibc's expf down to x = -87 (below, where glibc's result is denormal or 0, it gives
   2^-126 p(r) <= 1.2e-38: nothing a softmax's sum of terms >= 1 can tell apart). */
static inline float exp_nonpositive(float x) {
    x = x > -87.3f ? x : -87.3f;
    const float n = __builtin_floorf(x * 1.44269504088896341f + 0.5f);
    const float r = x - n * 0.693359375f + n * 2.12194440e-4f;
    float poly = 1.9875691500e-4f;
    poly = poly * r + 1.3981999507e-3f;
    poly = poly * r + 8.3334519073e-3f;
    poly = poly * r + 4.1665795894e-2f;
    poly = poly * r + 1.6666665459e-1f;
    poly = poly * r + 5.0000001201e-1f;
    poly = poly * r * r + r + 1.f;
    const int bits = ((int)n + 127) << 23;
    float two_n;
    memcpy(&two_n, &bits, sizeof two_n);
    return poly * two_n;
}

#endif
