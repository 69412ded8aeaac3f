// Whole-file reads, atomic whole-file writes and folders written all at once, shared by the
// .npy/.npz readers and writers, the checkpoints and the command line tool.
//
//   auto bytes = io::read_file_bytes("w.npy");             // io_error naming the file on any problem
//   auto mapped = io::MappedFile::open("model.safetensors"); // mapped read-only: pages read as touched
//   io::write_file_atomic("metrics.json", text.data(), text.size());
//   io::StagingDir out("results");                         // files go to a hidden sibling folder...
//   io::write_npy(out.file("w.npy"), w);
//   out.commit();                                          // ...renamed to results/ at the end
#pragma once
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
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

// A regular file mapped read-only (its pages are read as they are touched, so a file larger than
// memory works); copies share the mapping, which lasts as long as one of them.
class MappedFile {
public:
    static MappedFile open(const std::filesystem::path& path) {
        MappedFile f;
        const std::string name = path.string();
        const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) throw io_error(name + ": cannot open: " + std::strerror(errno));
        struct stat st {};
        if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
            ::close(fd);
            throw io_error(name + ": not a regular file");
        }
        const std::size_t size = std::size_t(st.st_size);
        if (size > 0) {
            void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
            const int err = errno;
            ::close(fd);
            if (p == MAP_FAILED) throw io_error(name + ": cannot map the file: " + std::strerror(err));
            f.mapping_ = std::shared_ptr<void>(p, [size](void* q) { ::munmap(q, size); });
            f.bytes_ = {static_cast<const std::byte*>(p), size};
        } else {
            ::close(fd);
        }
        return f;
    }
    std::span<const std::byte> bytes() const { return bytes_; }

private:
    std::shared_ptr<void> mapping_;
    std::span<const std::byte> bytes_;
};

namespace detail {

// `path` without trailing slashes ("out/" -> "out"), so that it has a file name.
inline std::filesystem::path without_trailing_slash(const std::filesystem::path& path) {
    std::string s = path.string();
    while (s.size() > 1 && s.back() == '/') s.pop_back();
    return s;
}

inline std::filesystem::path parent_or_dot(const std::filesystem::path& path) {
    return path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
}

// A hidden name next to `path`, unique in this process and among processes: ".NAME.tmp-PID-N".
inline std::filesystem::path temporary_sibling(const std::filesystem::path& path) {
    static std::atomic<std::size_t> counter{0};
    // Appended, not `"." + std::string`: a known g++ 12 -O3 false positive reads that as an
    // overlapping memcpy (-Wrestrict).
    std::string name = ".";
    name += path.filename().string();
    name += ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
    return parent_or_dot(path) / name;
}

}  // namespace detail

// io_error unless the folder that would hold `path` exists.
inline void require_parent_dir(const std::filesystem::path& path) {
    const auto p = detail::without_trailing_slash(path);
    std::error_code ec;
    if (!std::filesystem::is_directory(detail::parent_or_dot(p), ec))
        throw io_error(p.string() + ": the parent directory does not exist");
}

// Writes `size` bytes to `path` through a temporary file in the same directory and a rename, so a
// reader never sees a half-written file and a failed write leaves nothing behind.
inline void write_file_atomic(const std::filesystem::path& path, const void* data, std::size_t size) {
    const auto dir = detail::parent_or_dot(path);
    const auto tmp = detail::temporary_sibling(path);
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

// A folder whose files appear all at once: they are written into a hidden folder next to `target`
// (file(name)), and commit() renames it to `target` or, when `target` exists, moves each file into
// it (replacing files of the same name, keeping the others). Destroyed without commit(), it removes
// what was written: a failed run leaves `target` as it was.
class StagingDir {
public:
    // io_error (before anything is computed) when `target` cannot become a folder: its parent is
    // missing or it is a file.
    static void check_target(const std::filesystem::path& target) {
        require_parent_dir(target);
        std::error_code ec;
        if (std::filesystem::exists(target, ec) && !std::filesystem::is_directory(target, ec))
            throw io_error(detail::without_trailing_slash(target).string() + ": exists and is not a directory");
    }

    explicit StagingDir(const std::filesystem::path& target)
        : target_(detail::without_trailing_slash(target)), tmp_(detail::temporary_sibling(target_)) {
        check_target(target_);
        std::error_code ec;
        std::filesystem::remove_all(tmp_, ec);  // left by a crashed process of the same pid
        if (!std::filesystem::create_directory(tmp_, ec))
            throw io_error(target_.string() + ": cannot create the staging directory " + tmp_.string() + ": " +
                           ec.message());
    }
    ~StagingDir() {
        std::error_code ec;
        if (!committed_) std::filesystem::remove_all(tmp_, ec);
    }
    StagingDir(const StagingDir&) = delete;
    StagingDir& operator=(const StagingDir&) = delete;

    // Where to write the file `name` before commit().
    std::filesystem::path file(const std::string& name) const { return tmp_ / name; }
    const std::filesystem::path& target() const { return target_; }
    const std::filesystem::path& dir() const { return tmp_; }  // the hidden folder the files go to

    void commit() {
        namespace fs = std::filesystem;
        std::error_code ec;
        if (!fs::exists(target_, ec)) {
            fs::rename(tmp_, target_, ec);
            if (ec) throw io_error(target_.string() + ": cannot rename " + tmp_.string() + ": " + ec.message());
        } else {
            for (const auto& e : fs::directory_iterator(tmp_)) {
                fs::rename(e.path(), target_ / e.path().filename(), ec);
                if (ec) throw io_error((target_ / e.path().filename()).string() + ": cannot move into place: " + ec.message());
            }
            fs::remove(tmp_, ec);
        }
        committed_ = true;
    }

private:
    std::filesystem::path target_, tmp_;
    bool committed_ = false;
};

}  // namespace xgrad::io
