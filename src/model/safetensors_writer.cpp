// SafetensorsWriter implementation (format and layout invariants in safetensors_writer.h).
#include "model/safetensors_writer.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include <nlohmann/json.hpp>

#include "model/safetensors.h"

namespace dsv4 {

Status SafetensorsWriter::add(const std::string& name, DType dtype, std::vector<int64_t> shape,
                              std::span<const uint8_t> bytes) {
    if (name.empty() || name == "__metadata__") return invalid_argument("safetensors writer: bad tensor name '{}'", name);
    if (tensors_.count(name)) return invalid_argument("safetensors writer: tensor '{}' added twice", name);
    int64_t numel = 0;
    if (!shape_numel(shape, &numel)) return invalid_argument("safetensors writer: tensor '{}': bad shape {}", name, shape_to_string(shape));
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
