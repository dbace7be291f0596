/* AdamW's update of every parameter tensor of a model in one call (torch.optim.AdamW's
   rule, decoupled weight decay, no amsgrad), where PyTorch's fused CPU step launches one
   kernel per tensor behind its Python bookkeeping: at Table A1's sizes (40 tensors, 151k
   numbers) those cost more than the arithmetic.
   For tensor t of n[t] floats, with its step count step[t] (a float, incremented here):
     p *= 1 - lr wd[t]
     m = beta1 m + (1 - beta1) g
     v = beta2 v + (1 - beta2) g^2
     p -= lr / (1 - beta1^step) m / (sqrt(v) / sqrt(1 - beta2^step) + eps)
   with the scalars in double, as PyTorch computes them. The tensors' loops share one
   OpenMP parallel region, each split over its threads. */

#include <math.h>
#include <stddef.h>

void adamw_step(int threads, int count, float *const *params, const float *const *grads,
                float *const *exp_avgs, float *const *exp_avg_sqs, float *const *steps,
                const long *sizes, const double *weight_decays, double lr, double beta1,
                double beta2, double eps) {
    for (int t = 0; t < count; t++) *steps[t] += 1.f;
#pragma omp parallel num_threads(threads)
    for (int t = 0; t < count; t++) {
        const double step = (double)*steps[t];
        const float decay = (float)(1.0 - lr * weight_decays[t]);
        const float step_size = (float)(lr / (1.0 - pow(beta1, step)));
        const float correction2_sqrt = (float)sqrt(1.0 - pow(beta2, step));
        const float b1 = (float)beta1, b2 = (float)beta2;
        const float g1 = (float)(1.0 - beta1), g2 = (float)(1.0 - beta2), e = (float)eps;
        float *restrict p = params[t], *restrict m = exp_avgs[t], *restrict v = exp_avg_sqs[t];
        const float *restrict g = grads[t];
#pragma omp for simd schedule(static) nowait
        for (long i = 0; i < sizes[t]; i++) {
            const float mi = b1 * m[i] + g1 * g[i];
            const float vi = b2 * v[i] + g2 * g[i] * g[i];
            m[i] = mi;
            v[i] = vi;
            p[i] = p[i] * decay - step_size * mi / (sqrtf(vi) / correction2_sqrt + e);
        }
    }
}
