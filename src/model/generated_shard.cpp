// write_generated_shard (see generated_shard.h).
#include "model/generated_shard.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

namespace dsv4 {

namespace {

std::string header_json(std::span<const GeneratedTensor* const> ts) {
    nlohmann::ordered_json h;
    uint64_t off = 0;
    for (const GeneratedTensor* t : ts) {
        h[t->name] = {{"dtype", dtype_name(t->dtype)}, {"shape", t->shape}, {"data_offsets", {off, off + t->bytes}}};
        off += t->bytes;
    }
    h["__metadata__"] = {{"format", "pt"}};
    std::string s = h.dump();
    while (s.size() % 8) s.push_back(' ');
    return s;
}

// pwrite of all n bytes (retrying short writes and EINTR); false on error (errno set).
bool pwrite_all(int fd, const uint8_t* p, size_t n, uint64_t off) {
    while (n > 0) {
        const ssize_t w = ::pwrite(fd, p, n, off_t(off));
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return false;
        p += w, n -= size_t(w), off += uint64_t(w);
    }
    return true;
}

}  // namespace

std::vector<uint64_t> chunk_cuts(std::span<const uint64_t> starts, uint64_t chunk_bytes) {
    const uint64_t step = std::max<uint64_t>(chunk_bytes & ~uint64_t(7), 8);
    const uint64_t total = starts.empty() ? 0 : starts.back();
    std::vector<uint64_t> cuts{0};
    size_t t = 0;  // the tensor holding the target (the last one starting at or before it)
    for (uint64_t pos = 0; pos < total;) {
        uint64_t cut = std::min(total, pos + step);
        if (cut < total) {
            while (t + 2 < starts.size() && starts[t + 1] <= cut) ++t;
            // Round down to 8 bytes into that tensor; its start is > pos, or pos is itself such a
            // cut in it, so the chunk stays non-empty.
            cut = starts[t] + ((cut - starts[t]) & ~uint64_t(7));
        }
        cuts.push_back(cut);
        pos = cut;
    }
    return cuts;
}

Status write_generated_shard(const std::string& path, std::span<const GeneratedTensor* const> ts,
                             const ShardWriteOptions& opt) {
    const std::string tmp = path + ".tmp";
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return error(StatusCode::kInternal, "cannot create {}: {}", tmp, std::strerror(errno));
    auto fail = [&](const char* what, int err) {
        ::close(fd);
        std::error_code ec;
        std::filesystem::remove(tmp, ec);
        return error(StatusCode::kInternal, "cannot {} {}: {}", what, tmp, std::strerror(err));
    };
    const std::string h = header_json(ts);
    std::vector<uint8_t> head(8 + h.size());
    for (int i = 0; i < 8; ++i) head[size_t(i)] = uint8_t(uint64_t(h.size()) >> (8 * i));
    std::memcpy(head.data() + 8, h.data(), h.size());
    if (!pwrite_all(fd, head.data(), head.size(), 0)) return fail("write", errno);
    const uint64_t data0 = head.size();

    std::vector<uint64_t> starts{0};
    for (const GeneratedTensor* t : ts) starts.push_back(starts.back() + t->bytes);
    const std::vector<uint64_t> cuts = chunk_cuts(starts, opt.chunk_bytes);
    const size_t n_chunks = cuts.size() - 1;
    std::atomic<size_t> next{0};
    std::atomic<int> write_errno{0};
    auto worker = [&] {
        std::vector<uint64_t> buf, tmp_buf;  // uint64_t: 8-byte aligned
        size_t t = 0;                        // first tensor ending after the chunk's start
        for (size_t c; write_errno.load() == 0 && (c = next.fetch_add(1)) < n_chunks;) {
            const uint64_t a = cuts[c], b = cuts[c + 1];
            buf.resize(size_t((b - a + 7) / 8));
            uint8_t* out = reinterpret_cast<uint8_t*>(buf.data());
            t = size_t(std::upper_bound(starts.begin() + 1, starts.end(), a) - starts.begin()) - 1;
            for (; t < ts.size() && starts[t] < b; ++t) {
                const uint64_t lo = std::max(a, starts[t]), hi = std::min(b, starts[t + 1]);
                if (lo >= hi) continue;  // an empty tensor
                uint8_t* dst = out + (lo - a);
                const size_t n = size_t(hi - lo);
                if ((lo - a) % dtype_size(ts[t]->dtype) == 0) {
                    ts[t]->gen({dst, n}, lo - starts[t]);
                } else {  // a piece behind a tensor of odd size: generate aligned, then move
                    tmp_buf.resize((n + 7) / 8);
                    uint8_t* p = reinterpret_cast<uint8_t*>(tmp_buf.data());
                    ts[t]->gen({p, n}, lo - starts[t]);
                    std::memcpy(dst, p, n);
                }
            }
            if (!pwrite_all(fd, out, size_t(b - a), data0 + a)) {
                int expected = 0;
                write_errno.compare_exchange_strong(expected, errno ? errno : EIO);
            }
        }
    };
    const int threads = std::max(1, opt.threads);
    std::vector<std::thread> pool;
    for (int i = 1; i < std::min<int>(threads, int(std::max<size_t>(n_chunks, 1))); ++i) pool.emplace_back(worker);
    worker();
    for (auto& th : pool) th.join();
    if (write_errno.load() != 0) return fail("write", write_errno.load());
    if (::close(fd) != 0) {
        const int err = errno;
        std::error_code ec;
        std::filesystem::remove(tmp, ec);
        return error(StatusCode::kInternal, "cannot write {}: {}", tmp, std::strerror(err));
    }
    std::error_code ec;
    std::filesystem::rename(tmp, path, ec);
    if (ec) return error(StatusCode::kInternal, "cannot rename {}: {}", tmp, ec.message());
    return Status::ok();
}

}  // namespace dsv4
