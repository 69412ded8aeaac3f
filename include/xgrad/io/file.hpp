// Whole-file reads and atomic whole-file writes, shared by the .npy/.npz readers and writers, the
// checkpoints and the command line tool.
//
//   auto bytes = io::read_file_bytes("w.npy");             // io_error naming the file on any problem
//   io::write_file_atomic("metrics.json", text.data(), text.size());
#pragma once
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

#include "xgrad/core/error.hpp"

namespace xgrad::io {

// The whole content of a regular file.
inline std::vector<std::byte> read_file_bytes(const std::filesystem::path& path) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) throw io_error(path.string() + ": no such file");
    if (!std::filesystem::is_regular_file(path, ec)) throw io_error(path.string() + ": not a regular file");
    std::ifstream in(path, std::ios::binary);
    if (!in) throw io_error(path.string() + ": cannot open: " + std::strerror(errno));
    in.seekg(0, std::ios::end);
    const auto end = in.tellg();
    in.seekg(0, std::ios::beg);
    if (end < 0) throw io_error(path.string() + ": cannot determine the file size");
    std::vector<std::byte> bytes(static_cast<std::size_t>(end));
    if (!bytes.empty() && !in.read(reinterpret_cast<char*>(bytes.data()), std::streamsize(bytes.size())))
        throw io_error(path.string() + ": read failed");
    return bytes;
}

// Writes `size` bytes to `path` through a temporary file in the same directory and a rename, so a
// reader never sees a half-written file and a failed write leaves nothing behind.
inline void write_file_atomic(const std::filesystem::path& path, const void* data, std::size_t size) {
    static std::atomic<std::size_t> counter{0};
    const auto dir = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
    // Appended, not `"." + std::string`: a known g++ 12 -O3 false positive reads that as an overlapping
    // memcpy (-Wrestrict).
    std::string tmp_name = ".";
    tmp_name += path.filename().string();
    tmp_name += ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
    const auto tmp = dir / tmp_name;
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) throw io_error(path.string() + ": cannot create a temporary file: " + std::strerror(errno));
    const char* p = static_cast<const char*>(data);
    std::size_t left = size;
    int err = 0;
    while (left > 0) {
        const ssize_t w = ::write(fd, p, left);
        if (w < 0) {
            if (errno == EINTR) continue;
            err = errno;
            break;
        }
        p += w, left -= std::size_t(w);
    }
    if (!err && ::fsync(fd) != 0) err = errno;
    if (::close(fd) != 0 && !err) err = errno;
    std::error_code ec;
    if (!err) {
        std::filesystem::rename(tmp, path, ec);
        if (!ec) {
            // Make the rename itself durable too (best effort: the file is complete either way).
            const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
            if (dfd >= 0) ::fsync(dfd), ::close(dfd);
            return;
        }
    }
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
    throw io_error(path.string() + ": write failed: " + (err ? std::string(std::strerror(err)) : ec.message()));
}

}  // namespace xgrad::io
