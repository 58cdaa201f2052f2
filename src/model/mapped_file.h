// MappedFile: a whole file mapped read-only into memory (POSIX mmap).
// Invariants: a non-empty MappedFile owns exactly one mapping of size() bytes that stays at the same
// address for the object's lifetime (moves transfer ownership, so views into it survive a move of
// the owner); the mapping is released in the destructor. Empty files are represented without a
// mapping (data() == nullptr, size() == 0) because mmap rejects length 0.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "core/status.h"

namespace dsv4 {

class MappedFile {
public:
    MappedFile() = default;
    ~MappedFile();
    MappedFile(MappedFile&& other) noexcept;
    MappedFile& operator=(MappedFile&& other) noexcept;
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;

    // Errors: NotFound when the file cannot be opened, InvalidArgument when it is not a regular
    // file, Internal when mmap fails. Messages name the path and the OS error.
    static Result<MappedFile> open(const std::string& path);

    const uint8_t* data() const { return data_; }
    size_t size() const { return size_; }
    std::span<const uint8_t> bytes() const { return {data_, size_}; }
    const std::string& path() const { return path_; }

private:
    void release();

    const uint8_t* data_ = nullptr;
    size_t size_ = 0;
    std::string path_;
};

}  // namespace dsv4
