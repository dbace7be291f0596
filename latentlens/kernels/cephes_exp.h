/* Cephes's expf polynomial, shared by the kernels' exps: exp(r) for the reduced argument
   r = x - n ln 2 in [-ln 2 / 2, ln 2 / 2], within 2 ulp of glibc's expf once scaled by
   2^n. A macro, so that it serves a float and a vector of floats alike. */

#ifndef LATENTLENS_CEPHES_EXP_H
#define LATENTLENS_CEPHES_EXP_H

#define CEPHES_EXP_OF_REDUCED(r)                                                          \
    ((((((1.9875691500e-4f * (r) + 1.3981999507e-3f) * (r) + 8.3334519073e-3f) * (r) +      \
        4.1665795894e-2f) * (r) + 1.6666665459e-1f) * (r) + 5.0000001201e-1f) * (r) * (r) + \
     (r) + 1.f)

#endif
