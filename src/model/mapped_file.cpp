// MappedFile implementation: open + fstat + mmap(PROT_READ, MAP_PRIVATE); the fd is closed right
// after mapping because the mapping keeps the file alive on its own.
#include "model/mapped_file.h"

#include <cerrno>
#include <cstring>
#include <utility>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace dsv4 {

MappedFile::~MappedFile() { release(); }

MappedFile::MappedFile(MappedFile&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)), path_(std::move(other.path_)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
    if (this != &other) {
        release();
        data_ = std::exchange(other.data_, nullptr);
        size_ = std::exchange(other.size_, 0);
        path_ = std::move(other.path_);
    }
    return *this;
}

void MappedFile::release() {
    if (data_ != nullptr) munmap(const_cast<uint8_t*>(data_), size_);
    data_ = nullptr;
    size_ = 0;
}

Result<MappedFile> MappedFile::open(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        const int err = errno;
        return error(StatusCode::kNotFound, "{}: cannot open: {}", path, std::strerror(err));
    }
    struct stat st {};
    if (fstat(fd, &st) != 0) {
        const int err = errno;
        ::close(fd);
        return error(StatusCode::kInternal, "{}: fstat failed: {}", path, std::strerror(err));
    }
    if (!S_ISREG(st.st_mode)) {
        ::close(fd);
        return invalid_argument("{}: not a regular file", path);
    }
    MappedFile f;
    f.path_ = path;
    f.size_ = static_cast<size_t>(st.st_size);
    if (f.size_ > 0) {
        void* p = mmap(nullptr, f.size_, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            const int err = errno;
            ::close(fd);
            f.size_ = 0;
            return error(StatusCode::kInternal, "{}: mmap of {} bytes failed: {}", path,
                         static_cast<size_t>(st.st_size), std::strerror(err));
        }
        f.data_ = static_cast<const uint8_t*>(p);
    }
    ::close(fd);
    return f;
}

}  // namespace dsv4
