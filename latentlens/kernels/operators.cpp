/* The bodies of the kernels' PyTorch operators (torch.ops.latentlens) in C++.

   Each body does what its Python twin in the kernel's module does (the same checks, the
   same tensors made, the same C kernel called with the same arguments), without Python:
   a compiled step makes some 30 of these calls, and their Python (allocation, contiguity
   checks, ctypes converting up to eighteen arguments) took 7-9% of a fuzzy-logic step on
   a 2-core Zen 4 (docs/benchmarks.md). native.py builds it against PyTorch's headers,
   loads it in place of the Python bodies and hands it, through a callback, the address
   of each C kernel it calls (built by the kernels' own modules, once each). The
   constants the bodies share with Python (SLICES, ROWS_PER_SUM, ...) come as -D flags
   from native.py. */

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <tuple>
#include <vector>

using at::Tensor;
using Tensors2 = std::tuple<Tensor, Tensor>;
using Tensors3 = std::tuple<Tensor, Tensor, Tensor>;
using Tensors4 = std::tuple<Tensor, Tensor, Tensor, Tensor>;
using Tensors6 = std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor, Tensor>;
using MaybeTensor = std::optional<Tensor>;

namespace {

/* What native.py sets: where a kernel's symbol lies (its library built on first ask),
   whether oneDNN's linear runs here, whether PyTorch's sgemm_ does, and which engine sums
   the weights' gradients. */
using Resolver = uint64_t (*)(const char *library, const char *symbol, const int64_t *values,
                              int count);
Resolver resolver = nullptr;
bool onednn = false, sgemm = false;
const int *per_core = nullptr;  // linear.py's PER_CORE, read on each call

void *kernel(const char *library, const char *symbol, const std::vector<int64_t> &values = {}) {
    TORCH_CHECK(resolver, "latentlens's native operators were loaded without their kernels");
    const uint64_t found = resolver(library, symbol, values.data(), (int)values.size());
    TORCH_CHECK(found, "latentlens could not load the C kernel ", symbol, " of ", library,
                ".c (the warning above says why); train with --eager");
    return reinterpret_cast<void *>(found);
}

/* A kernel of a library built once (no defines), looked up on the first call. */
#define KERNEL(library, symbol, ...)                                                         \
    static const auto symbol =                                                               \
        reinterpret_cast<void (*)(__VA_ARGS__)>(kernel(library, #symbol))

int threads() { return at::get_num_threads(); }

int64_t slices(int64_t units, int64_t most = SLICES) {
    return std::max<int64_t>(1, std::min(units, most));
}

float *ptr(const Tensor &t) { return t.data_ptr<float>(); }
float *ptr(const MaybeTensor &t) { return t ? t->data_ptr<float>() : nullptr; }

MaybeTensor contiguous(const MaybeTensor &t) {
    return t ? MaybeTensor(t->contiguous()) : std::nullopt;
}

std::vector<int64_t> leading(const Tensor &t) {  // t.shape[:-1]
    auto sizes = t.sizes().vec();
    sizes.pop_back();
    return sizes;
}

int64_t rows_of(const Tensor &t) { return t.numel() / std::max<int64_t>(t.size(-1), 1); }

/* ---------------------------------------------------------------- linear.py */

Tensor linear(const Tensor &a, const Tensor &w, const MaybeTensor &bias = std::nullopt) {
    static const auto pointwise =
        c10::Dispatcher::singleton()
            .findSchemaOrThrow("mkldnn::_linear_pointwise", "")
            .typed<Tensor(const Tensor &, const Tensor &, const MaybeTensor &, c10::string_view,
                          c10::List<std::optional<at::Scalar>>,
                          std::optional<c10::string_view>)>();
    const Tensor rows = a.dim() == 2 ? a : a.reshape({-1, a.size(-1)});
    auto shape = leading(a);
    shape.push_back(w.size(0));
    if (rows.numel() == 0 || w.numel() == 0) {  // oneDNN refuses empty operands
        Tensor out = a.new_zeros(shape);
        return bias ? out.add(*bias) : out;
    }
    const Tensor out = pointwise.call(rows, w, bias, "none", c10::List<std::optional<at::Scalar>>(),
                                      c10::string_view(""));
    return out.view(shape);
}

Tensor transposed(const Tensor &given) {
    if (given.t().is_contiguous()) return given.t();
    KERNEL("transpose", transpose, int, size_t, size_t, const float *, float *);
    const Tensor x = given.contiguous();
    Tensor out = x.new_empty({x.size(1), x.size(0)});
    if (x.numel()) transpose(threads(), x.size(0), x.size(1), ptr(x), ptr(out));
    return out;
}

Tensor onednn_row_products(const Tensor &dy_in, const Tensor &x_in) {
    const Tensor dy = dy_in.reshape({-1, dy_in.size(-1)}), x = x_in.reshape({-1, x_in.size(-1)});
    const bool flipped = MIN_OUTPUTS <= x.size(1) && x.size(1) < dy.size(1);
    const Tensor &first = flipped ? x : dy, &second = flipped ? dy : x;
    std::optional<Tensor> total;
    for (int64_t start = 0; start < std::max<int64_t>(dy.size(0), 1); start += ROWS_PER_SUM) {
        const int64_t end = std::min(start + ROWS_PER_SUM, dy.size(0));
        const Tensor part = linear(transposed(first.slice(0, start, end)),
                                   second.slice(0, start, end).t());
        total = total ? total->add(part) : part;
    }
    return flipped ? transposed(*total) : *total;
}

Tensor per_core_row_products(const Tensor &dy_in, const Tensor &x_in) {
    KERNEL("row_products", row_products, int, int, int, int, int, const float *, int,
           const float *, int, float *, float *);
    const Tensor dy = dy_in.reshape({-1, dy_in.size(-1)}).contiguous();
    const Tensor x = x_in.reshape({-1, x_in.size(-1)}).contiguous();
    Tensor out = dy.new_empty({dy.size(1), x.size(1)});
    if (dy.size(0) == 0 || out.numel() == 0) return out.zero_();
    const Tensor work = dy.new_empty({(PARTS - 1) * out.numel()});
    row_products(threads(), PARTS, dy.size(0), out.size(0), out.size(1), ptr(dy), out.size(0),
                 ptr(x), out.size(1), ptr(out), ptr(work));
    return out;
}

Tensor row_products(const Tensor &dy, const Tensor &x) {
    return *per_core ? per_core_row_products(dy, x) : onednn_row_products(dy, x);
}

/* ---------------------------------------------------------------- bias_add.py */

Tensor column_sums(const Tensor &given) {
    KERNEL("bias_add", column_sums, int, int, size_t, size_t, const float *, float *, float *);
    const Tensor dy = given.contiguous();
    const int64_t columns = dy.size(-1), rows = rows_of(dy), count = slices(rows);
    Tensor sums = dy.new_empty({columns});
    const Tensor partial = dy.new_zeros({count, columns});
    column_sums(threads(), count, rows, columns, ptr(dy), ptr(sums), ptr(partial));
    return sums;
}

Tensor projection(const Tensor &x, const Tensor &weight, const MaybeTensor &bias) {
    return linear(x.contiguous(), weight.contiguous(), bias);
}

Tensors3 projection_backward(const Tensor &x, const Tensor &weight, const Tensor &dy_in,
                             bool biased) {
    const Tensor dy = dy_in.contiguous();
    Tensor dx = linear(dy, weight.contiguous().t());
    Tensor dbias = biased ? column_sums(dy) : dy.new_empty({0});
    return {dx, row_products(dy, x.contiguous()), dbias};
}

/* ---------------------------------------------------------------- gelu_tanh.py */

Tensor gelu_tanh(const Tensor &given) {
    KERNEL("gelu_tanh", gelu_tanh_forward, int, size_t, const float *, float *);
    const Tensor x = given.contiguous();
    Tensor y = at::empty_like(x);
    gelu_tanh_forward(threads(), x.numel(), ptr(x), ptr(y));
    return y;
}

Tensor gelu_tanh_backward(const Tensor &x_in, const Tensor &dy_in) {
    KERNEL("gelu_tanh", gelu_tanh_backward, int, size_t, const float *, const float *, float *);
    const Tensor x = x_in.contiguous(), dy = dy_in.contiguous();
    Tensor dx = at::empty_like(x);
    gelu_tanh_backward(threads(), x.numel(), ptr(x), ptr(dy), ptr(dx));
    return dx;
}

Tensor bias_gelu_tanh(const Tensor &h_in, const Tensor &bias_in) {
    KERNEL("gelu_tanh", bias_gelu_tanh_forward, int, size_t, size_t, const float *,
           const float *, float *);
    const Tensor h = h_in.contiguous(), bias = bias_in.contiguous();
    Tensor y = at::empty_like(h);
    bias_gelu_tanh_forward(threads(), rows_of(h), h.size(-1), ptr(h), ptr(bias), ptr(y));
    return y;
}

Tensors2 bias_gelu_tanh_backward(const Tensor &h_in, const Tensor &bias_in, const Tensor &dy_in) {
    KERNEL("gelu_tanh", bias_gelu_tanh_backward, int, int, size_t, size_t, const float *,
           const float *, const float *, float *, float *, float *);
    const Tensor h = h_in.contiguous(), dy = dy_in.contiguous(), bias = bias_in.contiguous();
    Tensor dh = at::empty_like(h), dbias = h.new_empty({h.size(-1)});
    const int64_t columns = h.size(-1), rows = rows_of(h), count = slices(rows);
    const Tensor partial = h.new_zeros({count, columns});
    bias_gelu_tanh_backward(threads(), count, rows, columns, ptr(h), ptr(bias), ptr(dy), ptr(dh),
                            ptr(dbias), ptr(partial));
    return {dh, dbias};
}

/* ---------------------------------------------------------------- layer_norm.py */

Tensors4 add_layer_norm(const Tensor &x_in, const MaybeTensor &delta_in,
                        const MaybeTensor &delta_bias_in, const Tensor &weight_in,
                        const Tensor &bias_in, double eps) {
    KERNEL("layer_norm", add_layer_norm_forward, int, size_t, size_t, const float *,
           const float *, const float *, const float *, const float *, float, float *, float *,
           float *, float *);
    const Tensor x = x_in.contiguous(), weight = weight_in.contiguous(), bias = bias_in.contiguous();
    const MaybeTensor delta = contiguous(delta_in), delta_bias = contiguous(delta_bias_in);
    Tensor total = at::empty_like(x), normed = at::empty_like(x);
    Tensor mean = x.new_empty(leading(x)), rstd = x.new_empty(leading(x));
    add_layer_norm_forward(threads(), rows_of(x), x.size(-1), ptr(x), ptr(delta), ptr(delta_bias),
                           ptr(weight), ptr(bias), (float)eps, ptr(total), ptr(normed), ptr(mean),
                           ptr(rstd));
    return {total, normed, mean, rstd};
}

Tensors4 norm_backward(const Tensor &total_in, const Tensor &mean_in, const Tensor &rstd_in,
                       const Tensor &weight_in, const Tensor &d_normed_in,
                       const MaybeTensor &d_kept_normed_in, const MaybeTensor &d_kept_total_in,
                       int64_t positions, int64_t keep_from) {
    KERNEL("layer_norm", add_layer_norm_backward, int, int, size_t, size_t, size_t, size_t,
           const float *, const float *, const float *, const float *, const float *,
           const float *, const float *, float *, float *, float *, float *, float *);
    const Tensor total = total_in.contiguous(), d_normed = d_normed_in.contiguous();
    const Tensor mean = mean_in.contiguous(), rstd = rstd_in.contiguous();
    const Tensor weight = weight_in.contiguous();
    const MaybeTensor d_kept_normed = contiguous(d_kept_normed_in);
    const MaybeTensor d_kept_total = contiguous(d_kept_total_in);
    const int64_t columns = total.size(-1), rows = rows_of(total), count = slices(rows);
    Tensor dx = at::empty_like(total);
    Tensor dweight = total.new_empty({columns}), dbias = total.new_empty({columns});
    Tensor ddelta_bias = total.new_empty({columns});
    const Tensor partial = total.new_zeros({count, 4, columns});
    add_layer_norm_backward(threads(), count, rows, columns, positions, keep_from, ptr(total),
                            ptr(mean), ptr(rstd), ptr(weight), ptr(d_normed), ptr(d_kept_normed),
                            ptr(d_kept_total), ptr(dx), ptr(dweight), ptr(dbias),
                            ptr(ddelta_bias), ptr(partial));
    return {dx, dweight, dbias, ddelta_bias};
}

Tensors4 add_layer_norm_backward(const Tensor &total, const Tensor &mean, const Tensor &rstd,
                                 const Tensor &weight, const Tensor &d_normed,
                                 const MaybeTensor &d_total) {
    return norm_backward(total, mean, rstd, weight, d_normed, std::nullopt, d_total,
                         rows_of(total), 0);
}

Tensors6 kept_add_layer_norm(const Tensor &x, const MaybeTensor &delta,
                             const MaybeTensor &delta_bias, const Tensor &weight,
                             const Tensor &bias, double eps, int64_t keep_from) {
    auto [total, normed, mean, rstd] = add_layer_norm(x, delta, delta_bias, weight, bias, eps);
    Tensor kept_total = total.slice(1, keep_from).clone();
    Tensor kept_normed = normed.slice(1, keep_from).clone();
    return {kept_total, normed, kept_normed, total, mean, rstd};
}

Tensors4 kept_add_layer_norm_backward(const Tensor &total, const Tensor &mean, const Tensor &rstd,
                                      const Tensor &weight, const Tensor &d_normed,
                                      const MaybeTensor &d_kept_normed,
                                      const MaybeTensor &d_kept_total, int64_t keep_from) {
    return norm_backward(total, mean, rstd, weight, d_normed, d_kept_normed, d_kept_total,
                         total.size(1), keep_from);
}

Tensors4 embed_layer_norm(const Tensor &inputs_in, const Tensor &embed_weight,
                          const Tensor &embed_bias_in, const Tensor &weight_in,
                          const Tensor &bias_in, double eps) {
    KERNEL("layer_norm", embed_layer_norm_forward, int, size_t, size_t, size_t, const float *,
           const float *, const float *, const float *, const float *, float, float *, float *,
           float *, float *);
    TORCH_CHECK_VALUE(inputs_in.size(-1) == embed_weight.size(1), "inputs of shape ",
                      inputs_in.sizes(), " do not fit an embedding weight of shape ",
                      embed_weight.sizes(), ": their last dimension must be ",
                      embed_weight.size(1));
    const Tensor inputs = inputs_in.contiguous(), embed_bias = embed_bias_in.contiguous();
    const Tensor embed_t = embed_weight.t().contiguous();
    const Tensor weight = weight_in.contiguous(), bias = bias_in.contiguous();
    const int64_t columns = embed_weight.size(0), width = embed_weight.size(1);
    const int64_t rows = inputs.numel() / std::max<int64_t>(width, 1);
    auto shape = leading(inputs);
    shape.push_back(columns);
    Tensor total = inputs.new_empty(shape), normed = at::empty_like(total);
    Tensor mean = inputs.new_empty(leading(inputs)), rstd = inputs.new_empty(leading(inputs));
    embed_layer_norm_forward(threads(), rows, columns, width, ptr(inputs), ptr(embed_t),
                             ptr(embed_bias), ptr(weight), ptr(bias), (float)eps, ptr(total),
                             ptr(normed), ptr(mean), ptr(rstd));
    return {total, normed, mean, rstd};
}

Tensors4 embed_layer_norm_backward(const Tensor &inputs_in, const Tensor &total_in,
                                   const Tensor &mean_in, const Tensor &rstd_in,
                                   const Tensor &weight_in, const Tensor &d_normed_in,
                                   const MaybeTensor &d_total_in) {
    KERNEL("layer_norm", embed_layer_norm_backward, int, int, size_t, size_t, size_t,
           const float *, const float *, const float *, const float *, const float *,
           const float *, const float *, float *, float *, float *, float *, float *);
    const Tensor inputs = inputs_in.contiguous(), total = total_in.contiguous();
    const Tensor d_normed = d_normed_in.contiguous();
    const Tensor mean = mean_in.contiguous(), rstd = rstd_in.contiguous();
    const Tensor weight = weight_in.contiguous();
    const MaybeTensor d_total = contiguous(d_total_in);
    const int64_t columns = total.size(-1), width = inputs.size(-1);
    const int64_t rows = rows_of(total), count = slices(rows);
    Tensor d_embed_weight = total.new_empty({columns, width});
    Tensor d_embed_bias = total.new_empty({columns}), dweight = total.new_empty({columns});
    Tensor dbias = total.new_empty({columns});
    const Tensor partial = total.new_zeros({count, 4 + width, columns});
    embed_layer_norm_backward(threads(), count, rows, columns, width, ptr(inputs), ptr(total),
                              ptr(mean), ptr(rstd), ptr(weight), ptr(d_normed), ptr(d_total),
                              ptr(dweight), ptr(dbias), ptr(d_embed_weight), ptr(d_embed_bias),
                              ptr(partial));
    return {d_embed_weight, d_embed_bias, dweight, dbias};
}

/* ---------------------------------------------------------------- mlp.py */

void check_mlp_shapes(const Tensor &x, const Tensor &w_in, const Tensor &b_in,
                      const Tensor &w_out) {
    for (const Tensor *t : {&x, &w_in, &b_in, &w_out})
        TORCH_CHECK_VALUE(t->scalar_type() == at::kFloat && t->device().is_cpu(),
                          "the fused MLP kernel takes float32 CPU tensors");
    const int64_t d_mlp = w_in.dim() == 2 ? w_in.size(0) : -1;
    const int64_t d_model = w_in.dim() == 2 ? w_in.size(1) : -1;
    const bool fits = x.dim() >= 1 && x.size(-1) == d_model && b_in.dim() == 1 &&
                      b_in.size(0) == d_mlp && w_out.dim() == 2 && w_out.size(0) == d_model &&
                      w_out.size(1) == d_mlp;
    TORCH_CHECK_VALUE(fits, "the fused MLP needs x [..., D], w_in [F, D], b_in [F] and w_out "
                      "[D, F]; got ", x.sizes(), ", ", w_in.sizes(), ", ", b_in.sizes(), " and ",
                      w_out.sizes());
}

bool mlp_on_onednn(const Tensor &w_in) {
    const bool narrow = std::min(w_in.size(0), w_in.size(1)) < MIN_OUTPUTS && sgemm;
    return onednn && !narrow;
}

int64_t block_rows(int64_t d_mlp) {
    return std::max<int64_t>(16, BLOCK_FLOATS / std::max<int64_t>(d_mlp, 1));
}

Tensors3 mlp(const Tensor &x_in, const Tensor &w_in_in, const Tensor &b_in_in,
             const Tensor &w_out_in) {
    check_mlp_shapes(x_in, w_in_in, b_in_in, w_out_in);
    const Tensor x = x_in.contiguous(), w_in = w_in_in.contiguous();
    const Tensor b_in = b_in_in.contiguous(), w_out = w_out_in.contiguous();
    if (mlp_on_onednn(w_in)) {
        Tensor h = linear(x, w_in);
        Tensor y = bias_gelu_tanh(h, b_in);
        return {linear(y, w_out), h, y};
    }
    KERNEL("mlp", mlp_forward, int, int, int, int, int, const float *, const float *,
           const float *, const float *, float *, float *, float *);
    const int64_t d_mlp = w_in.size(0), d_model = w_in.size(1);
    auto shape = leading(x);
    shape.push_back(d_mlp);
    Tensor h = x.new_empty(shape), y = at::empty_like(h), out = at::empty_like(x);
    mlp_forward(threads(), x.numel() / std::max<int64_t>(d_model, 1), d_model, d_mlp,
                block_rows(d_mlp), ptr(x), ptr(w_in), ptr(b_in), ptr(w_out), ptr(h), ptr(y),
                ptr(out));
    return {out, h, y};
}

Tensors4 mlp_backward(const Tensor &x_in, const Tensor &w_in_in, const Tensor &b_in_in,
                      const Tensor &w_out_in, const Tensor &h_in, const Tensor &y_in,
                      const Tensor &dout_in) {
    const Tensor x = x_in.contiguous(), w_in = w_in_in.contiguous(), b_in = b_in_in.contiguous();
    const Tensor w_out = w_out_in.contiguous(), h = h_in.contiguous(), y = y_in.contiguous();
    const Tensor dout = dout_in.contiguous();
    if (mlp_on_onednn(w_in)) {
        auto [dh, db_in] = bias_gelu_tanh_backward(h, b_in, linear(dout, w_out.t()));
        Tensor dw_out = row_products(dout, y), dw_in = row_products(dh, x);
        return {linear(dh, w_in.t()), dw_in, db_in, dw_out};
    }
    KERNEL("mlp", mlp_backward, int, int, int, int, int, int, const float *, const float *,
           const float *, const float *, const float *, const float *, const float *, float *,
           float *, float *, float *, float *);
    const int64_t d_mlp = w_in.size(0), d_model = w_in.size(1);
    const int64_t rows = x.numel() / std::max<int64_t>(d_model, 1), block = block_rows(d_mlp);
    const int64_t runs = slices((rows + block - 1) / block, BACKWARD_RUNS);
    const int64_t count = std::min<int64_t>(threads(), runs);
    Tensor dx = at::empty_like(x), dw_in = at::empty_like(w_in), db_in = at::empty_like(b_in);
    Tensor dw_out = at::empty_like(w_out);
    const Tensor work =
        x.new_empty({count * block * d_mlp + (runs - 1) * (2 * d_mlp * d_model + d_mlp)});
    mlp_backward(count, runs, rows, d_model, d_mlp, block, ptr(x), ptr(w_in), ptr(b_in),
                 ptr(w_out), ptr(h), ptr(y), ptr(dout), ptr(dx), ptr(dw_in), ptr(db_in),
                 ptr(dw_out), ptr(work));
    return {dx, dw_in, db_in, dw_out};
}

/* ---------------------------------------------------------------- attention_core.py */

struct Spec {  // attention_core.c's Spec, field for field
    int B, Q, K, KP, H, D, E, query_start, causal, norm, vnet;
    float scale, eps;
    long q_batch, q_pos, q_head, k_batch, k_pos, k_head, v_batch, v_pos, v_head;
    long dz_batch, dz_pos, dz_head, dz_elem;
};

using AttentionForward = void (*)(const Spec *, int, const float *, const float *,
                                  const float *, const float *, const float *, float *, float *);
using AttentionBackward = void (*)(const Spec *, int, int, const float *, const float *,
                                   const float *, const float *, const float *, const float *,
                                   const float *, float *, float *, float *, float *);

int normalization_code(c10::string_view name) {
    if (name == "softmax") return 0;
    if (name == "rms_head") return 1;
    TORCH_CHECK_VALUE(name == "none", "the fused attention core has no normalization '",
                      std::string(name), "'; use softmax, rms_head or none");
    return 2;
}

int value_network_code(const std::optional<c10::string_view> &activation) {
    if (!activation) return 0;
    if (*activation == "relu") return 1;
    TORCH_CHECK_VALUE(*activation == "identity", "the fused attention core has no value "
                      "network activation '", std::string(*activation),
                      "'; use relu, identity or None");
    return 2;
}

struct Options {
    c10::string_view normalization;
    std::optional<c10::string_view> activation;
    bool causal;
    int64_t query_start;
    double eps;
};

Spec core_spec(const Tensor &q, const Tensor &k, const Tensor &v, const Options &o) {
    Spec s{};
    s.B = q.size(0), s.Q = q.size(1), s.K = k.size(1), s.KP = (s.K + LANES - 1) / LANES * LANES;
    s.H = q.size(2), s.D = q.size(3), s.E = v.size(-1);
    s.query_start = o.query_start, s.causal = o.causal;
    s.norm = normalization_code(o.normalization), s.vnet = value_network_code(o.activation);
    s.scale = (float)std::pow((double)s.D, -0.5), s.eps = (float)o.eps;
    s.q_batch = q.stride(0), s.q_pos = q.stride(1), s.q_head = q.stride(2);
    s.k_batch = k.stride(0), s.k_pos = k.stride(1), s.k_head = k.stride(2);
    s.v_batch = v.stride(0), s.v_pos = v.stride(1), s.v_head = v.stride(2);
    return s;
}

/* The generic library's kernels, or those of one built for the spec's sizes and options
   where the call is large enough (attention_core.py's kernels_for), each looked up once. */
std::pair<AttentionForward, AttentionBackward> kernels_for(const Spec &s) {
    std::vector<int64_t> fixed;  // FIXED's fields in order: D, E, H, K, causal, norm, vnet
    if ((int64_t)s.B * s.K * s.H >= SPECIALISE_FROM)
        fixed = {s.D, s.E, s.H, s.K, s.causal, s.norm, s.vnet};
    static std::mutex guard;
    static std::map<std::vector<int64_t>, std::pair<AttentionForward, AttentionBackward>> found;
    std::lock_guard<std::mutex> hold(guard);
    auto at = found.find(fixed);
    if (at == found.end()) {
        auto forward = reinterpret_cast<AttentionForward>(
            kernel("attention_core", "attention_forward", fixed));
        auto backward = reinterpret_cast<AttentionBackward>(
            kernel("attention_core", "attention_backward", fixed));
        at = found.emplace(fixed, std::make_pair(forward, backward)).first;
    }
    return at->second;
}

Tensors2 core_forward(const Spec &s, const Tensor &q, const Tensor &k, const Tensor &v,
                      const MaybeTensor &bias, const MaybeTensor &drop) {
    for (auto [name, extra] : {std::make_pair("bias", &bias), std::make_pair("drop", &drop)})
        TORCH_CHECK_VALUE(!*extra || ((*extra)->size(-1) == s.KP && (*extra)->is_contiguous()),
                          "the fused core's ", name, " must come padded to ", s.KP,
                          " keys and contiguous (got shape ", (*extra)->sizes(),
                          "); pass it through padded()");
    Tensor z = q.new_empty({s.B, s.Q, s.H, s.E});
    Tensor rows = s.norm == 0 ? q.new_empty({s.B, s.Q, s.H, 2}) : q.new_empty({0});
    kernels_for(s).first(&s, threads(), ptr(q), ptr(k), ptr(v), ptr(bias), ptr(drop), ptr(z),
                         rows.numel() ? ptr(rows) : nullptr);
    return {z, rows};
}

/* The bias's gradient where there is a bias (else an empty tensor); dq, dk, dv written. */
Tensor core_backward(Spec s, const Tensor &q, const Tensor &k, const Tensor &v,
                     const MaybeTensor &bias, const MaybeTensor &drop, const Tensor &rows,
                     const Tensor &dz, const Tensor &dq, const Tensor &dk, const Tensor &dv) {
    const int64_t count = slices(s.B);
    MaybeTensor dbias;  // one [head, query, padded key] sum per slice of the batch
    if (bias) {
        auto shape = bias->sizes().vec();
        shape.insert(shape.begin(), count);
        dbias = bias->new_zeros(shape);
    }
    s.dz_batch = dz.stride(0), s.dz_pos = dz.stride(1), s.dz_head = dz.stride(2);
    s.dz_elem = dz.stride(3);
    kernels_for(s).second(&s, threads(), count, ptr(q), ptr(k), ptr(v), ptr(bias), ptr(drop),
                          rows.numel() ? ptr(rows) : nullptr, ptr(dz), ptr(dq), ptr(dk), ptr(dv),
                          ptr(dbias));
    return dbias ? dbias->select(0, 0) : q.new_empty({0});  // the kernel added the slices
}

/* q, k and v of a self-attention's projection packed [batch, pos, head, d_q + d_k + d_v]
   (made contiguous), viewed in place, and the kernel's Spec of them (packed_core). */
struct Packed {
    Tensor packed, q, k, v;
    Spec spec;
};

Tensors3 unpack(const Tensor &packed, int64_t d_q, int64_t d_k, int64_t query_start) {
    return {packed.slice(1, query_start).slice(3, 0, d_q), packed.slice(3, d_q, d_q + d_k),
            packed.slice(3, d_q + d_k)};
}

Packed packed_core(const Tensor &given, int64_t d_q, int64_t d_k, const Options &o) {
    const Tensor packed = given.contiguous();
    auto [q, k, v] = unpack(packed, d_q, d_k, o.query_start);
    return {packed, q, k, v, core_spec(q, k, v, o)};
}

/* q apart and k and v packed in kv [batch, key, head, d_k + d_v] (query_core). */
struct Queried {
    Tensor q, kv, k, v;
    Spec spec;
};

Queried query_core(const Tensor &q_in, const Tensor &kv_in, int64_t d_k, const Options &o) {
    const Tensor q = q_in.contiguous(), kv = kv_in.contiguous();
    const Tensor k = kv.slice(3, 0, d_k), v = kv.slice(3, d_k);
    return {q, kv, k, v, core_spec(q, k, v, o)};
}

Tensors2 self_attention_core(const Tensor &packed, const MaybeTensor &bias,
                             const MaybeTensor &drop, int64_t d_q, int64_t d_k,
                             c10::string_view normalization,
                             std::optional<c10::string_view> activation, bool causal,
                             int64_t query_start, double eps) {
    const Packed p = packed_core(packed, d_q, d_k,
                                 {normalization, activation, causal, query_start, eps});
    return core_forward(p.spec, p.q, p.k, p.v, bias, drop);
}

Tensors2 self_attention_core_backward(const Tensor &packed, const MaybeTensor &bias,
                                      const MaybeTensor &drop, const Tensor &rows,
                                      const Tensor &dz, int64_t d_q, int64_t d_k,
                                      c10::string_view normalization,
                                      std::optional<c10::string_view> activation, bool causal,
                                      int64_t query_start, double eps) {
    const Packed p = packed_core(packed, d_q, d_k,
                                 {normalization, activation, causal, query_start, eps});
    // Positions before the queries ask nothing of q: their gradient is left zero.
    Tensor d_packed = query_start ? at::zeros_like(p.packed) : at::empty_like(p.packed);
    auto [dq, dk, dv] = unpack(d_packed, d_q, d_k, query_start);
    return {d_packed, core_backward(p.spec, p.q, p.k, p.v, bias, drop, rows, dz, dq, dk, dv)};
}

Tensors2 query_attention_core(const Tensor &q, const Tensor &kv, const MaybeTensor &bias,
                              const MaybeTensor &drop, int64_t d_k,
                              c10::string_view normalization,
                              std::optional<c10::string_view> activation, bool causal,
                              int64_t query_start, double eps) {
    const Queried c = query_core(q, kv, d_k, {normalization, activation, causal, query_start, eps});
    return core_forward(c.spec, c.q, c.k, c.v, bias, drop);
}

Tensors3 query_attention_core_backward(const Tensor &q, const Tensor &kv, const MaybeTensor &bias,
                                       const MaybeTensor &drop, const Tensor &rows,
                                       const Tensor &dz, int64_t d_k,
                                       c10::string_view normalization,
                                       std::optional<c10::string_view> activation, bool causal,
                                       int64_t query_start, double eps) {
    const Queried c = query_core(q, kv, d_k, {normalization, activation, causal, query_start, eps});
    Tensor dq = at::empty_like(c.q), d_kv = at::empty_like(c.kv);
    Tensor dbias = core_backward(c.spec, c.q, c.k, c.v, bias, drop, rows, dz, dq,
                                 d_kv.slice(3, 0, d_k), d_kv.slice(3, d_k));
    return {dq, d_kv, dbias};
}

}  // namespace

TORCH_LIBRARY_IMPL(latentlens, CPU, m) {
    m.impl("projection", projection);
    m.impl("projection_backward", projection_backward);
    m.impl("column_sums", column_sums);
    m.impl("gelu_tanh", gelu_tanh);
    m.impl("gelu_tanh_backward", gelu_tanh_backward);
    m.impl("bias_gelu_tanh", bias_gelu_tanh);
    m.impl("bias_gelu_tanh_backward", bias_gelu_tanh_backward);
    m.impl("add_layer_norm", add_layer_norm);
    m.impl("add_layer_norm_backward", add_layer_norm_backward);
    m.impl("kept_add_layer_norm", kept_add_layer_norm);
    m.impl("kept_add_layer_norm_backward", kept_add_layer_norm_backward);
    m.impl("embed_layer_norm", embed_layer_norm);
    m.impl("embed_layer_norm_backward", embed_layer_norm_backward);
    m.impl("mlp", mlp);
    m.impl("mlp_backward", mlp_backward);
    m.impl("self_attention_core", self_attention_core);
    m.impl("self_attention_core_backward", self_attention_core_backward);
    m.impl("query_attention_core", query_attention_core);
    m.impl("query_attention_core_backward", query_attention_core_backward);
}

/* native.py's call (ctypes), before the first operator call. */
extern "C" void latentlens_native_configure(Resolver found, int has_onednn, int has_sgemm,
                                            const int *sums_per_core) {
    resolver = found, onednn = has_onednn, sgemm = has_sgemm, per_core = sums_per_core;
}
