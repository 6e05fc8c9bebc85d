// mlx-edge's CPU kernels for MLX: the attention softmax, GELU (with its derivative), LayerNorm and
// the hashed dropout as MLX primitives with vectorized loops, each with its backward pass; and the
// whole attention of inference (scores, softmax, context) as one forward-only primitive, whose
// gradient fastmath.attention takes from the explicit form.
//
// Why: MLX's Linux CPU backend runs its element-wise kernels one float at a time (its SIMD width is
// 1 off Apple silicon), and the kernels `mx.compile` generates take every input as a possibly
// aliased pointer, so g++ does not vectorize them either. Softmax, GELU, LayerNorm and dropout were
// ~30% of a distillation step on a 2-core x86 box. Here each is one pass (two for the reductions)
// over contiguous rows with `__restrict` pointers and branch-free math that g++ vectorizes for the
// CPU it is built on (-march=native: kernels.py builds it on the machine that runs it, and keys its
// cache on the CPU's flags; a portable -march where it cannot read them).
//
// Built by `mlx-edge doctor --build` (scripts/setup.sh runs it; mlx_edge/runtime/kernels.py) against
// the installed MLX's headers and the nanobind it was built with; nothing here runs on Metal or CUDA
// (fastmath.enabled() is Linux CPU only). Float32 only: callers fall back to their MLX expressions for
// other dtypes. First derivatives only: a second one raises (see FirstOrderOnly).
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <nanobind/nanobind.h>

#include "mlx/backend/cpu/encoder.h"
#include "mlx/mlx.h"
#include "mlx/primitives.h"

namespace nb = nanobind;
namespace mx = mlx::core;
using mx::array;
using mx::Shape;

namespace {

// ---------------------------------------------------------------------------------------------
// Scalar math written so that a loop over it vectorizes: no libm calls, no branches.
// ---------------------------------------------------------------------------------------------

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2Hi = 0.693145751953125f;
constexpr float kLn2Lo = 1.428606765330187e-06f;

// e^x: Cody-Waite reduction to |f| <= ln2/2 and a degree-7 Taylor polynomial (relative error
// ~1e-7); exactly 0 below -87 (a masked attention key's weight must be 0).
inline float exp_f(float x) {
  float r = std::min(std::max(x, -87.0f), 88.0f);
  int32_t n = static_cast<int32_t>(r * kLog2e + 128.5f) - 128;  // round(r log2 e); r log2 e > -128
  float nf = static_cast<float>(n);
  float f = r - nf * kLn2Hi - nf * kLn2Lo;
  float p = 1.0f / 5040;
  p = 1.0f / 720 + f * p;
  p = 1.0f / 120 + f * p;
  p = 1.0f / 24 + f * p;
  p = 1.0f / 6 + f * p;
  p = 0.5f + f * p;
  p = 1.0f + f * p;
  p = 1.0f + f * p;
  float scale = std::bit_cast<float>(static_cast<int32_t>((n + 127) << 23));
  return x < -87.0f ? 0.0f : p * scale;
}

// GELU(x) = x (1 + erf(x / sqrt 2)) / 2 and its derivative, erf by Abramowitz-Stegun 7.1.26
// (|error| <= 1.5e-7) whose exp(-a^2) is also the Gaussian factor of the derivative.
// Past the clamp GELU is x or 0 in float32: value and derivative are those limits there (the clamped
// exp(-a^2) would leak into x e^(-a^2), GELU'(1e8) = 5.49, and inf * 0 would be NaN).
// Written as selects, not a branch, so the loops that inline it stay vectorized.
inline void gelu_limits(bool far, float x, float& value, float& derivative) {
  value = far ? (x > 0.0f ? x : 0.0f) : value;
  derivative = far ? (x > 0.0f ? 1.0f : 0.0f) : derivative;
}

inline void gelu_erf(float x, float& value, float& derivative) {
  constexpr float kSqrt1_2 = 0.7071067811865476f, kInvSqrt2Pi = 0.3989422804014327f;
  float r = std::fabs(x) * kSqrt1_2;
  float a = std::min(r, 4.0f);  // erf(4) is 1 in float32
  float e = exp_f(-a * a);
  float t = 1.0f / (1.0f + 0.3275911f * a);
  float poly = t * (0.254829592f + t * (-0.284496736f + t * (1.421413741f + t * (-1.453152027f + t * 1.061405429f))));
  float erf_a = 1.0f - poly * e;
  float erf_x = x < 0.0f ? -erf_a : erf_a;
  float half = 0.5f + 0.5f * erf_x;
  value = x * half;
  derivative = half + x * e * kInvSqrt2Pi;
  gelu_limits(r >= 4.0f, x, value, derivative);
}

// tanh GELU (HF gelu_new / gelu_pytorch_tanh) and its derivative; tanh(z) = z P(z^2) / Q(z^2) on
// |z| <= 7.905 (the same minimax fit as fastmath.py, |error| <= 4e-7), +-1 beyond.
inline void gelu_tanh(float x, float& value, float& derivative) {
  constexpr float kC = 0.7978845608028654f, kK = 0.044715f, kClamp = 7.90531110763549805f;
  float x2 = x * x;
  float zr = kC * (x + kK * x2 * x);
  float z = std::min(std::max(zr, -kClamp), kClamp);
  float s = z * z;
  float p = -2.76076847742355e-16f;
  p = 2.00018790482477e-13f + s * p;
  p = -8.60467152213735e-11f + s * p;
  p = 5.12229709037114e-08f + s * p;
  p = 1.48572235717979e-05f + s * p;
  p = 6.37261928875436e-04f + s * p;
  p = 4.89352455891786e-03f + s * p;
  float q = 1.19825839466702e-06f;
  q = 1.18534705686654e-04f + s * q;
  q = 2.26843463243900e-03f + s * q;
  q = 4.89352518554385e-03f + s * q;
  float t = z * p / q;
  float half = 0.5f + 0.5f * t;
  value = x * half;
  derivative = half + 0.5f * x * (1.0f - t * t) * kC * (1.0f + 3.0f * kK * x2);
  gelu_limits(std::fabs(zr) >= kClamp, x, value, derivative);
}

// The hashed dropout mask of fastmath.keep_mask: murmur3's finalizer over (element index, seed).
inline bool kept(uint32_t index, uint32_t seed, uint32_t threshold) {
  uint32_t h = index * 0x9E3779B1u + seed * 0x85EBCA77u;
  h = (h ^ (h >> 16)) * 0x85EBCA6Bu;
  h = (h ^ (h >> 13)) * 0xC2B2AE35u;
  h ^= h >> 16;
  return h < threshold;
}

// ---------------------------------------------------------------------------------------------
// The loops (each over `rows` contiguous rows of `n` floats).
// ---------------------------------------------------------------------------------------------

// o[i] = e^(a[i] - max a) for one row of n (o may be a: each element is read before it is written);
// returns 1 / the sum, the softmax's scale
inline float shifted_exp_row(const float* a, float* o, size_t n) {
  float m = -INFINITY;
#pragma omp simd reduction(max : m)
  for (size_t i = 0; i < n; ++i) m = std::max(m, a[i]);
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (size_t i = 0; i < n; ++i) {
    float e = exp_f(a[i] - m);
    o[i] = e;
    sum += e;
  }
  return 1.0f / sum;
}

void softmax_rows(const float* __restrict x, float* __restrict y, size_t rows, size_t n) {
  for (size_t r = 0; r < rows; ++r) {
    float* __restrict o = y + r * n;
    float inv = shifted_exp_row(x + r * n, o, n);
#pragma omp simd
    for (size_t i = 0; i < n; ++i) o[i] *= inv;
  }
}

// d softmax: y (g - sum(g y)) per row
void softmax_vjp_rows(const float* __restrict y, const float* __restrict g, float* __restrict dx, size_t rows,
                      size_t n) {
  for (size_t r = 0; r < rows; ++r) {
    const float* __restrict yr = y + r * n;
    const float* __restrict gr = g + r * n;
    float* __restrict d = dx + r * n;
    float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
    for (size_t i = 0; i < n; ++i) dot += gr[i] * yr[i];
#pragma omp simd
    for (size_t i = 0; i < n; ++i) d[i] = yr[i] * (gr[i] - dot);
  }
}

template <bool kTanh, bool kDerivative>
inline void gelu_body(const float* __restrict x, float* __restrict y, float* __restrict dy, size_t size) {
#pragma omp simd
  for (size_t i = 0; i < size; ++i) {
    float v, d;
    if constexpr (kTanh) {
      gelu_tanh(x[i], v, d);
    } else {
      gelu_erf(x[i], v, d);
    }
    y[i] = v;
    if constexpr (kDerivative) dy[i] = d;
  }
}

// GELU'(x) into `dy` unless it is null
void gelu_loop(const float* __restrict x, float* __restrict y, float* __restrict dy, size_t size,
                           bool tanh_form) {
  if (tanh_form) {
    dy ? gelu_body<true, true>(x, y, dy, size) : gelu_body<true, false>(x, y, dy, size);
  } else {
    dy ? gelu_body<false, true>(x, y, dy, size) : gelu_body<false, false>(x, y, dy, size);
  }
}

void layer_norm_rows(const float* __restrict x, const float* __restrict w, const float* __restrict b,
                                 float* __restrict y, float* __restrict mean_out, float* __restrict rstd_out,
                                 size_t rows, size_t n, float eps) {
  for (size_t r = 0; r < rows; ++r) {
    const float* __restrict a = x + r * n;
    float* __restrict o = y + r * n;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (size_t i = 0; i < n; ++i) sum += a[i];
    float mean = sum / n;
    float sq = 0.0f;
#pragma omp simd reduction(+ : sq)
    for (size_t i = 0; i < n; ++i) sq += (a[i] - mean) * (a[i] - mean);
    float rstd = 1.0f / std::sqrt(sq / n + eps);
#pragma omp simd
    for (size_t i = 0; i < n; ++i) o[i] = (a[i] - mean) * rstd * w[i] + b[i];
    mean_out[r] = mean;
    rstd_out[r] = rstd;
  }
}

// dx = rstd (g w - mean(g w) - xhat mean(g w xhat)); dw = sum over rows of g xhat; db = sum of g
void layer_norm_vjp_rows(const float* __restrict x, const float* __restrict w,
                                     const float* __restrict mean, const float* __restrict rstd,
                                     const float* __restrict g, float* __restrict dx, float* __restrict dw,
                                     float* __restrict db, size_t rows, size_t n) {
  std::fill(dw, dw + n, 0.0f);
  std::fill(db, db + n, 0.0f);
  for (size_t r = 0; r < rows; ++r) {
    const float* __restrict a = x + r * n;
    const float* __restrict gr = g + r * n;
    float* __restrict d = dx + r * n;
    float m = mean[r], s = rstd[r];
    float sum_gw = 0.0f, sum_gwx = 0.0f;
#pragma omp simd reduction(+ : sum_gw, sum_gwx)
    for (size_t i = 0; i < n; ++i) {
      float xhat = (a[i] - m) * s;
      float gw = gr[i] * w[i];
      sum_gw += gw;
      sum_gwx += gw * xhat;
      dw[i] += gr[i] * xhat;
      db[i] += gr[i];
    }
    float mean_gw = sum_gw / n, mean_gwx = sum_gwx / n;
#pragma omp simd
    for (size_t i = 0; i < n; ++i) d[i] = s * (gr[i] * w[i] - mean_gw - (a[i] - m) * s * mean_gwx);
  }
}

void dropout_loop(const float* __restrict x, float* __restrict y, size_t size, uint32_t seed,
                              uint32_t threshold, float scale) {
#pragma omp simd
  for (size_t i = 0; i < size; ++i) y[i] = kept(static_cast<uint32_t>(i), seed, threshold) ? x[i] * scale : 0.0f;
}

// The attention's vector (GCC's vector extension; unaligned loads and stores through memcpy) and its
// block of query rows: 16 floats and 8 rows where the CPU has AVX-512 (one sentence's 128-token
// attention, 12 heads of 26, went from 0.51 ms per layer with 8 floats x 4 rows to 0.34 with 16 x 4
// and 0.25 with 16 x 8 here); else 8 floats (AVX registers on x86, two NEON registers on ARM) and 4 rows.
#if defined(__AVX512F__)
constexpr size_t W = 16;
constexpr size_t R = 8;  // query rows per block: 8 x 2 accumulators and two loads in AVX-512's 32 registers
#else
constexpr size_t W = 8;
constexpr size_t R = 4;  // 4 x 2 accumulators in AVX's 16 registers
#endif
typedef float vecf __attribute__((vector_size(W * sizeof(float))));
inline vecf loadv(const float* p) {
  vecf v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void storev(float* p, vecf v) { std::memcpy(p, &v, sizeof v); }

// One step of an R x 2W register tile: row r's two vectors += a[r * stride] * (b0, b1).
[[gnu::always_inline]] inline void tile_step(vecf (&acc)[R][2], const float* a, size_t stride, vecf b0, vecf b1) {
#pragma GCC unroll 8
  for (size_t r = 0; r < R; ++r) {
    const float x = a[r * stride];
    acc[r][0] += x * b0;
    acc[r][1] += x * b1;
  }
}

// Inference attention for all `pairs` (batch row, head) pairs: q and the context are rows of
// heads * d floats, `qlen` per batch row; k and v the same with `len` rows (qlen <= len: a layer whose
// output is needed only at [CLS] asks with its first query row alone). `mask` is the additive key mask,
// one row of `len` floats per batch row. Per pair, K is transposed and V copied once, padded to
// tiles of 2W floats (a padded key scores -inf); then, R query rows at a time, the scores are
// R x 2W register tiles over the head dimension, the softmax runs on the rows, and the context is
// R x 2W tiles over the keys: small matrix products that stay in registers and L1, where MLX runs
// 2 x heads BLAS calls, a mask add, a softmax pass and two head copies.

void attention_pairs(const float* __restrict q, const float* __restrict k, const float* __restrict v,
                     const float* __restrict mask, float* __restrict out, size_t qlen, size_t len, size_t heads,
                     size_t d, float scale, size_t pairs) {
  constexpr size_t T = 2 * W;               // tile width
  const size_t width = heads * d;
  const size_t dp = (d + T - 1) / T * T;    // V's columns, padded to whole tiles
  const size_t lp = (len + T - 1) / T * T;  // keys, padded likewise
  std::vector<float> kt(d * lp, 0.0f), vh(lp * dp, 0.0f), s(R * lp), mk(lp, -INFINITY), qs(R * d);
  float* __restrict ktp = kt.data();
  float* __restrict vhp = vh.data();
  float* __restrict sp = s.data();
  float* __restrict mp = mk.data();
  float* __restrict qp = qs.data();
  for (size_t pair = 0; pair < pairs; ++pair) {
    const size_t b = pair / heads, h = pair % heads;
    const size_t base = b * len * width + h * d;    // K and V
    const size_t qbase = b * qlen * width + h * d;  // Q and the context
    for (size_t j = 0; j < len; ++j) {
      const float* kr = k + base + j * width;
      const float* vr = v + base + j * width;
      for (size_t c = 0; c < d; ++c) {
        ktp[c * lp + j] = kr[c];
        vhp[j * dp + c] = vr[c];
      }
    }
    std::memcpy(mp, mask + b * len, len * sizeof(float));
    for (size_t i0 = 0; i0 < qlen; i0 += R) {
      const size_t rows = std::min(R, qlen - i0);
      for (size_t r = 0; r < R; ++r) {
        const float* qi = q + qbase + (i0 + std::min(r, rows - 1)) * width;
        for (size_t c = 0; c < d; ++c) qp[r * d + c] = qi[c] * scale;
      }
      // scores: R rows x 2W keys per tile, over the head dimension
      for (size_t j0 = 0; j0 < lp; j0 += T) {
        const vecf m0 = loadv(mp + j0), m1 = loadv(mp + j0 + W);
        vecf acc[R][2];
#pragma GCC unroll 8
        for (size_t r = 0; r < R; ++r) acc[r][0] = m0, acc[r][1] = m1;
        for (size_t c = 0; c < d; ++c) {
          tile_step(acc, qp + c, d, loadv(ktp + c * lp + j0), loadv(ktp + c * lp + j0 + W));
        }
#pragma GCC unroll 8
        for (size_t r = 0; r < R; ++r) storev(sp + r * lp + j0, acc[r][0]), storev(sp + r * lp + j0 + W, acc[r][1]);
      }
      float inv[R];
      for (size_t r = 0; r < R; ++r) inv[r] = shifted_exp_row(sp + r * lp, sp + r * lp, lp);
      // context: R rows x 2W columns per tile, over the keys
      for (size_t c0 = 0; c0 < dp; c0 += T) {
        vecf acc[R][2] = {};
        for (size_t j = 0; j < len; ++j) {
          tile_step(acc, sp + j, lp, loadv(vhp + j * dp + c0), loadv(vhp + j * dp + c0 + W));
        }
        float tile[R][T];
#pragma GCC unroll 8
        for (size_t r = 0; r < R; ++r) storev(tile[r], acc[r][0] * inv[r]), storev(tile[r] + W, acc[r][1] * inv[r]);
        const size_t cols = std::min<size_t>(T, d - std::min(d, c0));
        for (size_t r = 0; r < rows; ++r)
          std::memcpy(out + qbase + (i0 + r) * width + c0, tile[r], cols * sizeof(float));
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// MLX primitives
// ---------------------------------------------------------------------------------------------

size_t last_dim(const array& a) { return a.ndim() == 0 ? 1 : static_cast<size_t>(a.shape(-1)); }

size_t rows_of(const array& a) {
  size_t n = last_dim(a);
  return n ? a.size() / n : 0;
}

// x as float32 in row-major order (no copy when it already is)
array f32_rows(const array& x, mx::Stream s) { return mx::contiguous(mx::astype(x, mx::float32, s), false, s); }

Shape without_last(const Shape& shape) { return Shape(shape.begin(), shape.end() - 1); }

class CpuOnly : public mx::Primitive {
 public:
  using mx::Primitive::Primitive;
  // The stream's encoder with the inputs registered and every output allocated and registered: called
  // before the task is built, since the task captures the outputs' data pointers.
  mx::cpu::CommandEncoder& prepare(const std::vector<array>& in, std::vector<array>& out) {
    auto& enc = mx::cpu::get_command_encoder(stream());
    for (auto& i : in) enc.set_input_array(i);
    for (auto& o : out) {
      o.set_data(mx::allocator::malloc(o.nbytes()));
      enc.set_output_array(o);
    }
    return enc;
  }
  void eval_gpu(const std::vector<array>&, std::vector<array>&) override {
    throw std::runtime_error("mlx-edge's CPU kernels run on MLX's CPU device only");
  }
};

// A primitive that must not be differentiated: either derivative raises `why` (MLX's default would be
// "not implemented"; the GELU derivative's would silently be 0, see KeptDerivative).
class NoDerivative : public CpuOnly {
 public:
  NoDerivative(mx::Stream s, std::string why) : CpuOnly(s), why_(std::move(why)) {}
  std::vector<array> vjp(const std::vector<array>&, const std::vector<array>&, const std::vector<int>&,
                         const std::vector<array>&) override {
    throw std::invalid_argument(why_);
  }
  std::vector<array> jvp(const std::vector<array>&, const std::vector<array>&, const std::vector<int>&) override {
    throw std::invalid_argument(why_);
  }

 private:
  std::string why_;
};

// The backward passes are written for one differentiation: differentiating them again raises.
class FirstOrderOnly : public NoDerivative {
 public:
  FirstOrderOnly(mx::Stream s, const char* op)
      : NoDerivative(s, std::string("mlx-edge's CPU ") + op +
                            " has no second derivative; set MLX_EDGE_CPU_KERNELS=0 for higher-order gradients") {}
};

// GELU'(x) as Gelu's second output, seen through a primitive of its own that shares the buffer (no
// copy, no pass over it) and refuses to be differentiated: Gelu's VJP reads only the value's
// cotangent, so a gradient flowing into the derivative would otherwise be dropped without a word.
class KeptDerivative : public FirstOrderOnly {
 public:
  explicit KeptDerivative(mx::Stream s) : FirstOrderOnly(s, "GELU") {}
  void eval_cpu(const std::vector<array>& in, std::vector<array>& out) override { out[0].copy_shared_buffer(in[0]); }
  const char* name() const override { return "MlxEdgeGeluDerivative"; }
  bool is_equivalent(const mx::Primitive&) const override { return true; }
  std::vector<Shape> output_shapes(const std::vector<array>& in) override { return {in[0].shape()}; }
};

array kept_derivative(const array& derivative, mx::Stream s) {
  return array(derivative.shape(), mx::float32, std::make_shared<KeptDerivative>(s), {derivative});
}

class SoftmaxVjp : public FirstOrderOnly {
 public:
  explicit SoftmaxVjp(mx::Stream s) : FirstOrderOnly(s, "softmax") {}
  void eval_cpu(const std::vector<array>& in, std::vector<array>& out) override {
    auto& enc = prepare(in, out);
    enc.dispatch([y = in[0].data<float>(), g = in[1].data<float>(), d = out[0].data<float>(),
                  rows = rows_of(in[0]), n = last_dim(in[0])] { softmax_vjp_rows(y, g, d, rows, n); });
  }
  const char* name() const override { return "MlxEdgeSoftmaxVjp"; }
  bool is_equivalent(const mx::Primitive&) const override { return true; }
  std::vector<Shape> output_shapes(const std::vector<array>& in) override { return {in[0].shape()}; }
};

class Softmax : public CpuOnly {
 public:
  using CpuOnly::CpuOnly;
  void eval_cpu(const std::vector<array>& in, std::vector<array>& out) override {
    auto& enc = prepare(in, out);
    enc.dispatch([x = in[0].data<float>(), y = out[0].data<float>(), rows = rows_of(in[0]),
                  n = last_dim(in[0])] { softmax_rows(x, y, rows, n); });
  }
  std::vector<array> vjp(const std::vector<array>&, const std::vector<array>& cotangents, const std::vector<int>&,
                         const std::vector<array>& outputs) override {
    auto g = f32_rows(cotangents[0], stream());
    return {array(outputs[0].shape(), mx::float32, std::make_shared<SoftmaxVjp>(stream()), {outputs[0], g})};
  }
  const char* name() const override { return "MlxEdgeSoftmax"; }
  bool is_equivalent(const mx::Primitive&) const override { return true; }
  std::vector<Shape> output_shapes(const std::vector<array>& in) override { return {in[0].shape()}; }
};

// GELU; with `derivative`, a second output holds GELU'(x) and the VJP is one multiply by it.
class Gelu : public CpuOnly {
 public:
  Gelu(mx::Stream s, bool tanh_form, bool derivative) : CpuOnly(s), tanh_form_(tanh_form), derivative_(derivative) {}
  void eval_cpu(const std::vector<array>& in, std::vector<array>& out) override {
    auto& enc = prepare(in, out);
    float* dy = derivative_ ? out[1].data<float>() : nullptr;
    enc.dispatch([x = in[0].data<float>(), y = out[0].data<float>(), dy, size = in[0].size(), t = tanh_form_] {
      gelu_loop(x, y, dy, size, t);
    });
  }
  std::vector<array> vjp(const std::vector<array>& primals, const std::vector<array>& cotangents,
                         const std::vector<int>&, const std::vector<array>& outputs) override {
    array derivative = derivative_ ? outputs[1]
                                   : array::make_arrays({primals[0].shape(), primals[0].shape()},
                                                        {mx::float32, mx::float32},
                                                        std::make_shared<Gelu>(stream(), tanh_form_, true),
                                                        {primals[0]})[1];
    return {mx::multiply(cotangents[0], kept_derivative(derivative, stream()), stream())};
  }
  const char* name() const override { return "MlxEdgeGelu"; }
  bool is_equivalent(const mx::Primitive& other) const override {
    auto& o = static_cast<const Gelu&>(other);
    return o.tanh_form_ == tanh_form_ && o.derivative_ == derivative_;
  }
  std::vector<Shape> output_shapes(const std::vector<array>& in) override {
    return derivative_ ? std::vector<Shape>{in[0].shape(), in[0].shape()} : std::vector<Shape>{in[0].shape()};
  }

 private:
  bool tanh_form_, derivative_;
};

// inputs (x, w, mean, rstd, g) -> (dx, dw, db)
class LayerNormVjp : public FirstOrderOnly {
 public:
  explicit LayerNormVjp(mx::Stream s) : FirstOrderOnly(s, "LayerNorm") {}
  void eval_cpu(const std::vector<array>& in, std::vector<array>& out) override {
    size_t n = last_dim(in[0]), rows = rows_of(in[0]);
    auto& enc = prepare(in, out);
    enc.dispatch([x = in[0].data<float>(), w = in[1].data<float>(), mean = in[2].data<float>(),
                  rstd = in[3].data<float>(), g = in[4].data<float>(), dx = out[0].data<float>(),
                  dw = out[1].data<float>(), db = out[2].data<float>(), rows, n] {
      layer_norm_vjp_rows(x, w, mean, rstd, g, dx, dw, db, rows, n);
    });
  }
  const char* name() const override { return "MlxEdgeLayerNormVjp"; }
  bool is_equivalent(const mx::Primitive&) const override { return true; }
  std::vector<Shape> output_shapes(const std::vector<array>& in) override {
    return {in[0].shape(), in[1].shape(), in[1].shape()};
  }
};

// inputs (x, w, b) -> (y, mean, rstd); mean and rstd have x's shape without its last axis
class LayerNorm : public CpuOnly {
 public:
  LayerNorm(mx::Stream s, float eps) : CpuOnly(s), eps_(eps) {}
  void eval_cpu(const std::vector<array>& in, std::vector<array>& out) override {
    size_t n = last_dim(in[0]), rows = rows_of(in[0]);
    auto& enc = prepare(in, out);
    enc.dispatch([x = in[0].data<float>(), w = in[1].data<float>(), b = in[2].data<float>(),
                  y = out[0].data<float>(), mean = out[1].data<float>(), rstd = out[2].data<float>(), rows, n,
                  eps = eps_] { layer_norm_rows(x, w, b, y, mean, rstd, rows, n, eps); });
  }
  std::vector<array> vjp(const std::vector<array>& primals, const std::vector<array>& cotangents,
                         const std::vector<int>& argnums, const std::vector<array>& outputs) override {
    auto g = f32_rows(cotangents[0], stream());
    auto grads = array::make_arrays({primals[0].shape(), primals[1].shape(), primals[2].shape()},
                                    {mx::float32, mx::float32, mx::float32}, std::make_shared<LayerNormVjp>(stream()),
                                    {primals[0], primals[1], outputs[1], outputs[2], g});
    std::vector<array> picked;
    for (int i : argnums) picked.push_back(grads[i]);
    return picked;
  }
  const char* name() const override { return "MlxEdgeLayerNorm"; }
  bool is_equivalent(const mx::Primitive& other) const override {
    return static_cast<const LayerNorm&>(other).eps_ == eps_;
  }
  std::vector<Shape> output_shapes(const std::vector<array>& in) override {
    auto rows = without_last(in[0].shape());
    return {in[0].shape(), rows, rows};
  }

 private:
  float eps_;
};

// inputs (x, seed: a 0-d uint32) -> x * mask / keep
class Dropout : public CpuOnly {
 public:
  Dropout(mx::Stream s, uint32_t threshold, float scale) : CpuOnly(s), threshold_(threshold), scale_(scale) {}
  void eval_cpu(const std::vector<array>& in, std::vector<array>& out) override {
    auto& enc = prepare(in, out);
    // the seed is read in the task: eval_cpu only queues work, its inputs may not be computed yet
    enc.dispatch([x = in[0].data<float>(), seed = in[1].data<uint32_t>(), y = out[0].data<float>(),
                  size = in[0].size(), t = threshold_, s = scale_] { dropout_loop(x, y, size, *seed, t, s); });
  }
  std::vector<array> vjp(const std::vector<array>& primals, const std::vector<array>& cotangents,
                         const std::vector<int>& argnums, const std::vector<array>&) override {
    std::vector<array> grads;
    for (int i : argnums) {
      if (i == 0) {
        auto g = f32_rows(cotangents[0], stream());
        grads.push_back(array(g.shape(), mx::float32, std::make_shared<Dropout>(stream(), threshold_, scale_),
                              {g, primals[1]}));
      } else {
        grads.push_back(mx::zeros_like(primals[1], stream()));
      }
    }
    return grads;
  }
  const char* name() const override { return "MlxEdgeDropout"; }
  bool is_equivalent(const mx::Primitive& other) const override {
    auto& o = static_cast<const Dropout&>(other);
    return o.threshold_ == threshold_ && o.scale_ == scale_;
  }
  std::vector<Shape> output_shapes(const std::vector<array>& in) override { return {in[0].shape()}; }

 private:
  uint32_t threshold_;
  float scale_;
};

// inputs (q: (B, Lq, heads * d); k, v: (B, L, heads * d), Lq <= L; mask: (B, L) additive) -> the context
// (B, Lq, heads * d). Inference only: it has no derivative (training runs the explicit form, whose
// probabilities dropout and the attention loss need). One thread, the stream's: splitting one sentence's
// pairs over two threads took the kernel alone from 0.53 to 0.39 ms at 128 tokens, but the whole
// single-sentence forward not at all (8.26 vs 8.30 ms, interleaved), where OpenBLAS's workers spin
// between the projections; and batch inference already runs one stream per core.
class Attention : public NoDerivative {
 public:
  Attention(mx::Stream s, int heads, float scale)
      : NoDerivative(s, "mlx-edge's CPU attention is for inference only (it has no derivative)"),
        heads_(heads),
        scale_(scale) {}
  void eval_cpu(const std::vector<array>& in, std::vector<array>& out) override {
    auto& enc = prepare(in, out);
    size_t batch = in[0].shape(0), qlen = in[0].shape(1), len = in[1].shape(1), width = in[0].shape(2);
    size_t heads = heads_;
    enc.dispatch([q = in[0].data<float>(), k = in[1].data<float>(), v = in[2].data<float>(),
                  mask = in[3].data<float>(), o = out[0].data<float>(), batch, qlen, len, heads, d = width / heads,
                  scale = scale_] {
      attention_pairs(q, k, v, mask, o, qlen, len, heads, d, scale, batch * heads);
    });
  }
  const char* name() const override { return "MlxEdgeAttention"; }
  bool is_equivalent(const mx::Primitive& other) const override {
    auto& o = static_cast<const Attention&>(other);
    return o.heads_ == heads_ && o.scale_ == scale_;
  }
  std::vector<Shape> output_shapes(const std::vector<array>& in) override { return {in[0].shape()}; }

 private:
  int heads_;
  float scale_;
};

void require_float32(const array& x, const char* op) {
  if (x.dtype() != mx::float32) throw std::invalid_argument(std::string(op) + " takes float32 arrays only");
}

}  // namespace

NB_MODULE(_mlx_edge_kernels, m) {
  m.doc() = "mlx-edge's vectorized CPU kernels for MLX (see mlx_edge/runtime/kernels.py)";
  m.def(
      "softmax",
      [](const array& x) {
        require_float32(x, "softmax");
        auto s = mx::to_stream({});
        auto xc = f32_rows(x, s);
        return array(xc.shape(), mx::float32, std::make_shared<Softmax>(s), {xc});
      },
      nb::arg("x"), "Softmax over the last axis.");
  m.def(
      "attention",
      [](const array& q, const array& k, const array& v, const array& mask, int heads, float scale) {
        for (auto* a : {&q, &k, &v, &mask}) require_float32(*a, "attention");
        if (q.ndim() != 3 || k.ndim() != 3 || v.shape() != k.shape() || q.shape(0) != k.shape(0) ||
            q.shape(2) != k.shape(2) || q.shape(1) > k.shape(1))
          throw std::invalid_argument(
              "attention: q must be (batch, query rows, heads * head_dim) and k, v (batch, length, heads * head_dim), "
              "with no more query rows than keys");
        if (heads <= 0 || q.shape(2) % heads != 0)
          throw std::invalid_argument("attention: heads must divide the last axis");
        int batch = k.shape(0), len = k.shape(1);
        if (mask.size() != static_cast<size_t>(batch) * len)
          throw std::invalid_argument("attention: mask must hold one additive value per (batch row, key)");
        auto s = mx::to_stream({});
        auto m2 = f32_rows(mx::reshape(mask, {batch, len}, s), s);
        return array(q.shape(), mx::float32, std::make_shared<Attention>(s, heads, scale),
                     {f32_rows(q, s), f32_rows(k, s), f32_rows(v, s), m2});
      },
      nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("mask"), nb::arg("heads"), nb::arg("scale"),
      "softmax(q k^T * scale + mask) v per head, for inference: q (B, Lq, heads * d), k and v (B, L, heads * d) with Lq <= L, mask (B, L) or (B, 1, 1, L); the context is (B, Lq, heads * d).");
  m.def(
      "gelu",
      [](const array& x, bool tanh_form) {
        require_float32(x, "gelu");
        auto s = mx::to_stream({});
        auto xc = f32_rows(x, s);
        return array(xc.shape(), mx::float32, std::make_shared<Gelu>(s, tanh_form, false), {xc});
      },
      nb::arg("x"), nb::arg("tanh") = false, "GELU (exact erf form, or the tanh form with tanh=True).");
  m.def(
      "gelu_pair",
      [](const array& x, bool tanh_form) {
        require_float32(x, "gelu_pair");
        auto s = mx::to_stream({});
        auto xc = f32_rows(x, s);
        auto both = array::make_arrays({xc.shape(), xc.shape()}, {mx::float32, mx::float32},
                                       std::make_shared<Gelu>(s, tanh_form, true), {xc});
        return nb::make_tuple(both[0], kept_derivative(both[1], s));
      },
      nb::arg("x"), nb::arg("tanh") = false, "(GELU(x), GELU'(x)); the value's VJP multiplies by the second, which has no derivative itself.");
  m.def(
      "layer_norm",
      [](const array& x, const array& w, const array& b, float eps) {
        require_float32(x, "layer_norm");
        if (x.ndim() == 0 || w.ndim() != 1 || b.ndim() != 1 || w.shape(0) != x.shape(-1) || b.shape(0) != x.shape(-1))
          throw std::invalid_argument("layer_norm: weight and bias must be 1-d, the size of x's last axis");
        auto s = mx::to_stream({});
        auto xc = f32_rows(x, s);
        auto rows = without_last(xc.shape());
        auto outs = array::make_arrays({xc.shape(), rows, rows}, {mx::float32, mx::float32, mx::float32},
                                       std::make_shared<LayerNorm>(s, eps), {xc, f32_rows(w, s), f32_rows(b, s)});
        return outs[0];
      },
      nb::arg("x"), nb::arg("weight"), nb::arg("bias"), nb::arg("eps"), "LayerNorm over the last axis.");
  m.def(
      "dropout",
      [](const array& x, const array& seed, double keep) {
        require_float32(x, "dropout");
        if (seed.dtype() != mx::uint32 || seed.ndim() != 0)
          throw std::invalid_argument("dropout: seed must be a 0-d uint32");
        if (!(keep > 0.0 && keep <= 1.0)) throw std::invalid_argument("dropout: keep must be in (0, 1]");
        if (x.size() > 0xFFFFFFFFull) throw std::invalid_argument("dropout: over 2^32 elements");
        auto s = mx::to_stream({});
        auto threshold = static_cast<uint32_t>(std::min(keep * 4294967296.0, 4294967295.0));
        auto xc = f32_rows(x, s);
        return array(xc.shape(), mx::float32,
                     std::make_shared<Dropout>(s, threshold, static_cast<float>(1.0 / keep)), {xc, seed});
      },
      nb::arg("x"), nb::arg("seed"), nb::arg("keep"),
      "x * mask / keep, the mask hashed from (element index, seed) as fastmath.keep_mask draws it.");
}
