// SafetensorsWriter implementation (format and layout invariants in safetensors_writer.h).
#include "model/safetensors_writer.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include <nlohmann/json.hpp>

#include "model/quant.h"
#include "model/safetensors.h"

namespace dsv4 {

Status SafetensorsWriter::add(const std::string& name, DType dtype, std::vector<int64_t> shape,
                              std::span<const uint8_t> bytes) {
    if (name.empty() || name == "__metadata__")
        return invalid_argument("safetensors writer: bad tensor name '{}'", name);
    if (tensors_.count(name)) return invalid_argument("safetensors writer: tensor '{}' added twice", name);
    int64_t numel = 0;
    if (!shape_numel(shape, &numel))
        return invalid_argument("safetensors writer: tensor '{}': bad shape {}", name, shape_to_string(shape));
    if (uint64_t(numel) * dtype_size(dtype) != bytes.size())
        return invalid_argument("safetensors writer: tensor '{}': shape {} of {} needs {} bytes, got {}", name,
                                shape_to_string(shape), dtype_name(dtype), uint64_t(numel) * dtype_size(dtype),
                                bytes.size());
    tensors_.emplace(name, Tensor{dtype, std::move(shape), std::vector<uint8_t>(bytes.begin(), bytes.end())});
    return Status::ok();
}

Status SafetensorsWriter::add_f32(const std::string& name, std::vector<int64_t> shape, std::span<const float> v) {
    return add(name, DType::kF32, std::move(shape),
               std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(v.data()), v.size_bytes()));
}

Status SafetensorsWriter::add_bf16(const std::string& name, std::vector<int64_t> shape, std::span<const float> v) {
    std::vector<uint16_t> b(v.size());
    std::transform(v.begin(), v.end(), b.begin(), f32_to_bf16);
    return add(name, DType::kBF16, std::move(shape),
               std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(b.data()), b.size() * 2));
}

Status SafetensorsWriter::add_i64(const std::string& name, std::vector<int64_t> shape, std::span<const int64_t> v) {
    return add(name, DType::kI64, std::move(shape),
               std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(v.data()), v.size_bytes()));
}

Status SafetensorsWriter::add_i32(const std::string& name, std::vector<int64_t> shape, std::span<const int32_t> v) {
    return add(name, DType::kI32, std::move(shape),
               std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(v.data()), v.size_bytes()));
}

Status SafetensorsWriter::add_fp8_block(const std::string& base, const float* w, int64_t N, int64_t K, bool f32_scale) {
    if (N <= 0 || K <= 0) return invalid_argument("safetensors writer: '{}': bad FP8 shape [{}, {}]", base, N, K);
    const Fp8BlockQuant q = quantize_fp8_block(w, N, K);
    const int64_t gn = (N + kFp8Block - 1) / kFp8Block, gk = (K + kFp8Block - 1) / kFp8Block;
    DSV4_RETURN_IF_ERROR(add(base + ".weight", DType::kF8E4M3, {N, K}, q.q));
    if (!f32_scale) return add(base + ".scale", DType::kF8E8M0, {gn, gk}, q.scale_ue8m0);
    std::vector<float> s(q.scale_ue8m0.size());
    std::transform(q.scale_ue8m0.begin(), q.scale_ue8m0.end(), s.begin(), ue8m0_to_f32);
    return add_f32(base + ".scale", {gn, gk}, s);
}

Status SafetensorsWriter::add_mxfp4(const std::string& base, const float* w, int64_t N, int64_t K) {
    if (N <= 0 || K <= 0 || K % kMxfp4Group != 0)
        return invalid_argument("safetensors writer: '{}': MXFP4 needs K a positive multiple of {}, got [{}, {}]", base,
                                kMxfp4Group, N, K);
    const Mxfp4Quant q = quantize_mxfp4(w, N, K);
    DSV4_RETURN_IF_ERROR(add(base + ".weight", DType::kI8, {N, K / 2}, q.packed));
    return add(base + ".scale", DType::kF8E8M0, {N, K / kMxfp4Group}, q.scales);
}

Result<std::vector<uint8_t>> SafetensorsWriter::serialize() const {
    std::vector<const std::pair<const std::string, Tensor>*> order;
    for (const auto& kv : tensors_) order.push_back(&kv);
    // Larger elements first: with an 8-aligned data start every tensor is then element-aligned.
    std::stable_sort(order.begin(), order.end(), [](const auto* a, const auto* b) {
        return dtype_size(a->second.dtype) > dtype_size(b->second.dtype);
    });
    nlohmann::json header = nlohmann::json::object();
    if (!metadata_.empty()) header["__metadata__"] = metadata_;
    uint64_t offset = 0;
    for (const auto* kv : order) {
        const Tensor& t = kv->second;
        header[kv->first] = {{"dtype", std::string(dtype_name(t.dtype))},
                             {"shape", t.shape},
                             {"data_offsets", {offset, offset + t.bytes.size()}}};
        offset += t.bytes.size();
    }
    std::string text;
    try {
        text = header.dump();
    } catch (const nlohmann::json::exception& e) {  // invalid UTF-8 in a name or metadata
        return invalid_argument("safetensors writer: {}", e.what());
    }
    text.append((8 - text.size() % 8) % 8, ' ');
    std::vector<uint8_t> out;
    out.reserve(8 + text.size() + offset);
    for (int i = 0; i < 8; ++i) out.push_back(uint8_t(uint64_t(text.size()) >> (8 * i)));
    out.insert(out.end(), text.begin(), text.end());
    for (const auto* kv : order) out.insert(out.end(), kv->second.bytes.begin(), kv->second.bytes.end());
    return out;
}

Status SafetensorsWriter::write(const std::string& path) const {
    DSV4_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, serialize());
    const std::string tmp = path + ".tmp";
    std::FILE* f = std::fopen(tmp.c_str(), "wb");
    if (f == nullptr) return error(StatusCode::kInternal, "{}: cannot create: {}", tmp, std::strerror(errno));
    const bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
    if (std::fclose(f) != 0 || !ok) {
        std::remove(tmp.c_str());
        return error(StatusCode::kInternal, "{}: write failed", tmp);
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0)
        return error(StatusCode::kInternal, "{}: rename to {} failed: {}", tmp, path, std::strerror(errno));
    return Status::ok();
}

}  // namespace dsv4
