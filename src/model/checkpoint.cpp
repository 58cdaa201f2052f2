// Checkpoint opening and tensor lookup. Layout discovery (single file / sharded index / directory
// of files) happens once in open(); afterwards lookups are pure map reads over the mappings.
#include "model/checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "model/safetensors.h"
#include "model/safetensors_index.h"

namespace dsv4 {
namespace fs = std::filesystem;

namespace {

constexpr const char* kIndexName = kSafetensorsIndexName;
constexpr uint64_t kMaxIndexBytes = 256ull * 1024 * 1024;

Result<std::string> read_text(const std::string& path) {
    std::error_code ec;
    const auto size = fs::file_size(path, ec);
    if (ec) return error(StatusCode::kNotFound, "{}: cannot read: {}", path, ec.message());
    if (size > kMaxIndexBytes)
        return error(StatusCode::kDataLoss, "{}: {} bytes is too large for an index", path, size);
    std::ifstream in(path, std::ios::binary);
    if (!in) return error(StatusCode::kNotFound, "{}: cannot open", path);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

}  // namespace

int64_t TensorView::numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
}

Status Checkpoint::add_file(const std::string& file_path, const std::vector<std::string>* expected) {
    DSV4_ASSIGN_OR_RETURN(MappedFile mf, MappedFile::open(file_path));
    DSV4_ASSIGN_OR_RETURN(SafetensorsHeader h, parse_safetensors(mf.bytes(), file_path));
    const size_t index = files_.size();
    if (index == 0 && metadata_.empty()) metadata_ = h.metadata;
    for (auto& t : h.tensors) {
        if (expected != nullptr && !std::binary_search(expected->begin(), expected->end(), t.name))
            return error(StatusCode::kDataLoss, "{}: tensor '{}' is in this shard but {} does not assign it here",
                         file_path, t.name, kIndexName);
        const auto it = tensors_.find(t.name);
        if (it != tensors_.end())
            return invalid_argument("tensor '{}' appears in both {} and {}", t.name, files_[it->second.file].path(),
                                    file_path);
        tensors_.emplace(std::move(t.name), Entry{index, t.dtype, std::move(t.shape), t.begin, t.end});
    }
    if (expected != nullptr) {
        for (const auto& name : *expected) {
            const auto it = tensors_.find(name);
            if (it == tensors_.end() || it->second.file != index)
                return error(StatusCode::kNotFound, "{}: tensor '{}' is assigned to this shard by {} but is not in it",
                             file_path, name, kIndexName);
        }
    }
    files_.push_back(std::move(mf));
    return Status::ok();
}

Result<Checkpoint> Checkpoint::open(const std::string& path) {
    Checkpoint ck;
    ck.path_ = path;
    std::error_code ec;
    const auto st = fs::status(path, ec);
    if (ec || !fs::exists(st)) return error(StatusCode::kNotFound, "checkpoint {}: no such file or directory", path);
    if (fs::is_regular_file(st)) {
        DSV4_RETURN_IF_ERROR(ck.add_file(path, nullptr));
        return ck;
    }
    if (!fs::is_directory(st)) return invalid_argument("checkpoint {}: neither a file nor a directory", path);

    const fs::path dir(path);
    const fs::path index_path = dir / kIndexName;
    if (fs::exists(index_path, ec)) {
        DSV4_ASSIGN_OR_RETURN(std::string text, read_text(index_path.string()));
        DSV4_ASSIGN_OR_RETURN(SafetensorsIndex idx, parse_safetensors_index(text, index_path.string()));
        for (const auto& [shard, names] : idx.shards) {
            const fs::path shard_path = dir / shard;
            if (!fs::is_regular_file(shard_path, ec))
                return error(StatusCode::kNotFound, "{}: shard {} (holding tensor '{}' and {} more) does not exist",
                             index_path.string(), shard_path.string(), names.front(), names.size() - 1);
            DSV4_RETURN_IF_ERROR(ck.add_file(shard_path.string(), &names));
        }
        if (idx.metadata) ck.metadata_ = std::move(*idx.metadata);
        return ck;
    }

    if (const fs::path single = dir / "model.safetensors"; fs::is_regular_file(single, ec)) {
        DSV4_RETURN_IF_ERROR(ck.add_file(single.string(), nullptr));
        return ck;
    }
    std::vector<std::string> files;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
        if (it->path().extension() == ".safetensors" && it->is_regular_file(ec)) files.push_back(it->path().string());
    }
    if (ec) return error(StatusCode::kNotFound, "checkpoint {}: cannot list directory: {}", path, ec.message());
    if (files.empty())
        return error(StatusCode::kNotFound, "checkpoint {}: no {} and no *.safetensors files", path, kIndexName);
    std::sort(files.begin(), files.end());
    for (const auto& f : files) DSV4_RETURN_IF_ERROR(ck.add_file(f, nullptr));
    return ck;
}

bool Checkpoint::has(std::string_view name) const { return tensors_.find(name) != tensors_.end(); }

Result<TensorView> Checkpoint::get(std::string_view name) const {
    const auto it = tensors_.find(name);
    if (it == tensors_.end())
        return error(StatusCode::kNotFound, "tensor '{}' not found in checkpoint {}", name, path_);
    const Entry& e = it->second;
    const MappedFile& f = files_[e.file];
    return TensorView{it->first, e.dtype, e.shape, f.data() + e.begin, size_t(e.end - e.begin), f.path()};
}

Result<TensorView> Checkpoint::get(std::string_view name, DType dtype, std::span<const int64_t> shape) const {
    DSV4_ASSIGN_OR_RETURN(TensorView t, get(name));
    if (t.dtype != dtype || !std::equal(t.shape.begin(), t.shape.end(), shape.begin(), shape.end()))
        return invalid_argument("{}: tensor '{}': expected {} {}, got {} {}", t.file, t.name, dtype_name(dtype),
                                shape_to_string(shape), dtype_name(t.dtype), shape_to_string(t.shape));
    return t;
}

std::vector<std::string> Checkpoint::names() const {
    std::vector<std::string> out;
    out.reserve(tensors_.size());
    for (const auto& [name, unused] : tensors_) out.push_back(name);
    return out;
}

}  // namespace dsv4
