// load_f32 / load_i32: checkpoint tensors to host arrays with dtype dispatch, scale lookup and the
// dequantisation of spec §4.2. Every failure names the file, the tensor, and expected vs actual.
#include <algorithm>
#include <cstring>
#include <limits>
#include <unordered_set>

#include "model/checkpoint.h"
#include "model/quant.h"
#include "model/safetensors.h"

namespace dsv4 {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

bool same_shape(std::span<const int64_t> a, std::span<const int64_t> b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
}

Status shape_error(const TensorView& t, std::span<const int64_t> want, std::string_view what) {
    return invalid_argument("{}: tensor '{}': expected {}shape {}, got {} {}", t.file, t.name, what,
                            shape_to_string(want), dtype_name(t.dtype), shape_to_string(t.shape));
}

// The scale sibling of an FP8 weight; exactly one of the known spellings must exist (B14).
Result<TensorView> find_fp8_scale(const Checkpoint& ckpt, const TensorView& w) {
    constexpr std::string_view kSuffix = ".weight";
    std::string_view name = w.name;
    if (name.size() <= kSuffix.size() || name.substr(name.size() - kSuffix.size()) != kSuffix)
        return invalid_argument("{}: tensor '{}': F8_E4M3 tensor is not named '<base>.weight', so it has no scale",
                                w.file, w.name);
    const std::string base(name.substr(0, name.size() - kSuffix.size()));
    std::vector<std::string> found;
    for (const char* suffix : {".scale", ".weight_scale_inv", ".weight_scale"})
        if (ckpt.has(base + suffix)) found.push_back(base + suffix);
    if (found.empty())
        return error(StatusCode::kNotFound,
                     "{}: tensor '{}': F8_E4M3 weight has no block scale ('{}.scale', '{}.weight_scale_inv' or "
                     "'{}.weight_scale') in checkpoint {}",
                     w.file, w.name, base, base, base, ckpt.path());
    if (found.size() > 1)
        return invalid_argument("{}: tensor '{}': ambiguous block scales '{}' and '{}'", w.file, w.name, found[0],
                                found[1]);
    return ckpt.get(found[0]);
}

Status check_ue8m0(const TensorView& s) {
    const uint8_t* nan = std::find(s.data, s.data + s.nbytes, uint8_t(255));
    if (nan != s.data + s.nbytes)
        return error(StatusCode::kDataLoss, "{}: tensor '{}': UE8M0 scale byte 255 (NaN) at element {}", s.file, s.name,
                     nan - s.data);
    return Status::ok();
}

Result<std::vector<float>> load_fp8(const Checkpoint& ckpt, const TensorView& w, int64_t N, int64_t K) {
    DSV4_ASSIGN_OR_RETURN(TensorView s, find_fp8_scale(ckpt, w));
    const int64_t grid[2] = {ceil_div(N, kFp8Block), ceil_div(K, kFp8Block)};
    if (!same_shape(s.shape, grid)) return shape_error(s, grid, "block-scale ");
    std::vector<float> out(size_t(N * K));
    if (s.dtype == DType::kF8E8M0) {
        DSV4_RETURN_IF_ERROR(check_ue8m0(s));
        dequantize_fp8_block(w.data, s.data, N, K, out.data());
    } else if (s.dtype == DType::kF32) {
        std::vector<float> scale(size_t(s.numel()));
        std::memcpy(scale.data(), s.data, s.nbytes);  // unaligned-safe
        dequantize_fp8_block_f32scale(w.data, scale.data(), N, K, out.data());
    } else {
        return invalid_argument("{}: tensor '{}': block scale dtype {} is not F8_E8M0 or F32", s.file, s.name,
                                dtype_name(s.dtype));
    }
    return out;
}

Result<std::vector<float>> load_mxfp4(const Checkpoint& ckpt, const TensorView& w, int64_t N, int64_t K) {
    constexpr std::string_view kSuffix = ".weight";
    std::string_view name = w.name;
    if (K % 2 != 0 || name.size() <= kSuffix.size() || name.substr(name.size() - kSuffix.size()) != kSuffix)
        return invalid_argument("{}: tensor '{}': I8 (packed MXFP4) needs a '<base>.weight' name and even K, got K={}",
                                w.file, w.name, K);
    const std::string scale_name = std::string(name.substr(0, name.size() - kSuffix.size())) + ".scale";
    const int64_t grid[2] = {N, ceil_div(K, kMxfp4Group)};
    auto s = ckpt.get(scale_name, DType::kF8E8M0, grid);
    if (!s.is_ok()) return s.status().with_context(fmt::format("{}: tensor '{}': MXFP4 group scale", w.file, w.name));
    DSV4_RETURN_IF_ERROR(check_ue8m0(*s));
    std::vector<float> out(size_t(N * K));
    dequantize_mxfp4(w.data, s->data, N, K, out.data());
    return out;
}

template <typename Src, typename Conv>
std::vector<float> widen(const TensorView& t, Conv conv) {
    std::vector<float> out(size_t(t.numel()));
    for (size_t i = 0; i < out.size(); ++i) {
        Src v;
        std::memcpy(&v, t.data + i * sizeof(Src), sizeof(Src));
        out[i] = conv(v);
    }
    return out;
}

}  // namespace

Result<std::vector<float>> load_f32(const Checkpoint& ckpt, std::string_view name, std::span<const int64_t> shape) {
    DSV4_ASSIGN_OR_RETURN(TensorView t, ckpt.get(name));
    int64_t numel = 0;
    if (!shape_numel(shape, &numel))
        return invalid_argument("tensor '{}': invalid requested shape {}", name, shape_to_string(shape));
    switch (t.dtype) {
        case DType::kF32:
        case DType::kBF16:
        case DType::kF16:
            if (!same_shape(t.shape, shape)) return shape_error(t, shape, "");
            if (t.dtype == DType::kF32) return widen<float>(t, [](float v) { return v; });
            if (t.dtype == DType::kBF16) return widen<uint16_t>(t, [](uint16_t v) { return bf16_to_f32(v); });
            return widen<uint16_t>(t, [](uint16_t v) { return f16_to_f32(v); });
        case DType::kF8E4M3:
            if (shape.size() != 2 || !same_shape(t.shape, shape)) return shape_error(t, shape, "2-D ");
            return load_fp8(ckpt, t, shape[0], shape[1]);
        case DType::kI8: {
            if (shape.size() != 2) return shape_error(t, shape, "2-D logical ");
            const int64_t stored[2] = {shape[0], ceil_div(shape[1], 2)};
            if (!same_shape(t.shape, stored))
                return invalid_argument(
                    "{}: tensor '{}': packed MXFP4 of logical shape {} must be stored as {}, got {}", t.file, t.name,
                    shape_to_string(shape), shape_to_string(stored), shape_to_string(t.shape));
            return load_mxfp4(ckpt, t, shape[0], shape[1]);
        }
        default:
            return invalid_argument("{}: tensor '{}': dtype {} cannot be loaded as a float weight", t.file, t.name,
                                    dtype_name(t.dtype));
    }
}

Result<std::vector<int32_t>> load_i32(const Checkpoint& ckpt, std::string_view name, std::span<const int64_t> shape) {
    DSV4_ASSIGN_OR_RETURN(TensorView t, ckpt.get(name));
    if (t.dtype != DType::kI32 && t.dtype != DType::kI64)
        return invalid_argument("{}: tensor '{}': expected I32 or I64, got {}", t.file, t.name, dtype_name(t.dtype));
    if (!same_shape(t.shape, shape)) return shape_error(t, shape, "");
    std::vector<int32_t> out(size_t(t.numel()));
    if (t.dtype == DType::kI32) {
        std::memcpy(out.data(), t.data, t.nbytes);
        return out;
    }
    for (size_t i = 0; i < out.size(); ++i) {
        int64_t v;
        std::memcpy(&v, t.data + i * 8, 8);
        if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max())
            return error(StatusCode::kOutOfRange, "{}: tensor '{}': element {} = {} does not fit int32", t.file, t.name,
                         i, v);
        out[i] = int32_t(v);
    }
    return out;
}

Status check_int_range(std::span<const int32_t> values, int64_t lo, int64_t hi, std::string_view what) {
    for (size_t i = 0; i < values.size(); ++i)
        if (values[i] < lo || values[i] >= hi)
            return error(StatusCode::kOutOfRange, "{}: element {} = {} is outside [{}, {})", what, i, values[i], lo,
                         hi);
    return Status::ok();
}

Status check_rows_distinct(std::span<const int32_t> values, int64_t row_len, std::string_view what) {
    if (row_len <= 0 || values.size() % size_t(row_len) != 0)
        return invalid_argument("{}: {} values do not split into rows of {}", what, values.size(), row_len);
    std::vector<int32_t> row(static_cast<size_t>(row_len));
    for (size_t r = 0; r * size_t(row_len) < values.size(); ++r) {
        std::copy_n(values.begin() + ptrdiff_t(r * size_t(row_len)), row_len, row.begin());
        std::sort(row.begin(), row.end());
        if (const auto it = std::adjacent_find(row.begin(), row.end()); it != row.end())
            return error(StatusCode::kDataLoss, "{}: row {} repeats value {}", what, r, *it);
    }
    return Status::ok();
}

}  // namespace dsv4
