// .npz archives with libzip: the reader and the writer of xgrad/io/npz.hpp, compiled once in
// libxgrad (lib/model_files.cpp; scripts/fuzz compiles it beside its harness).
#include <zip.h>

#include "xgrad/io/npz.hpp"

namespace xgrad::io {

namespace detail {

std::string zip_code_message(int code) {
    zip_error_t e;
    zip_error_init_with_code(&e, code);
    std::string msg = zip_error_strerror(&e);
    zip_error_fini(&e);
    return msg;
}

struct ZipDiscard {
    void operator()(zip_t* z) const { zip_discard(z); }
};
struct ZipFileClose {
    void operator()(zip_file_t* f) const { zip_fclose(f); }
};

// Every .npy entry of an open archive, keyed by entry name without the ".npy" suffix; `file` names
// the archive in messages ("file: ..." and "file:entry.npy: ...").
std::map<std::string, NpyArray> read_npz_entries(zip_t* za, const std::string& file) {
    std::map<std::string, NpyArray> out;
    const zip_int64_t n = zip_get_num_entries(za, 0);
    for (zip_int64_t i = 0; i < n; ++i) {
        zip_stat_t st;
        zip_stat_init(&st);
        if (zip_stat_index(za, zip_uint64_t(i), 0, &st) != 0 || !(st.valid & ZIP_STAT_NAME))
            throw io_error(file + ": cannot read entry " + std::to_string(i) + ": " + zip_strerror(za));
        const std::string name = st.name;
        if (!name.empty() && name.back() == '/') continue;  // a directory entry
        const std::string source = file + ":" + name;
        if (name.size() < 5 || name.compare(name.size() - 4, 4, ".npy") != 0)
            throw io_error(source + ": the entry is not an .npy file");
        const std::string key = name.substr(0, name.size() - 4);
        if (out.count(key)) throw io_error(source + ": duplicate entry");
        std::unique_ptr<zip_file_t, ZipFileClose> zf(zip_fopen_index(za, zip_uint64_t(i), 0));
        if (!zf) throw io_error(source + ": cannot open the entry: " + zip_strerror(za));
        // Grow the buffer with what actually decompresses, and stop one chunk past the declared size: a
        // lying size field allocates nothing up front, and a small archive cannot inflate into gigabytes.
        const bool sized = st.valid & ZIP_STAT_SIZE;
        std::vector<std::byte> bytes;
        constexpr std::size_t chunk = std::size_t(1) << 16;
        while (true) {
            const std::size_t at = bytes.size();
            bytes.resize(at + chunk);
            const zip_int64_t got = zip_fread(zf.get(), bytes.data() + at, chunk);
            if (got < 0) throw io_error(source + ": cannot read the entry: " + zip_file_strerror(zf.get()));
            bytes.resize(at + std::size_t(got));
            if (got == 0) break;
            if (sized && bytes.size() > st.size)
                throw io_error(source + ": the entry holds more than the " + std::to_string(st.size) +
                               " bytes its header says");
        }
        if (sized && st.size != bytes.size())
            throw io_error(source + ": the entry holds " + std::to_string(bytes.size()) + " bytes, its header says " +
                           std::to_string(st.size));
        out.emplace(key, parse_npy(bytes.data(), bytes.size(), source));
    }
    return out;
}

}  // namespace detail

std::map<std::string, NpyArray> read_npz(const std::filesystem::path& path) {
    const std::string file = path.string();
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec))
        throw io_error(file + (std::filesystem::exists(path, ec) ? ": not a regular file" : ": no such file"));
    int code = 0;
    std::unique_ptr<zip_t, detail::ZipDiscard> za(zip_open(file.c_str(), ZIP_RDONLY | ZIP_CHECKCONS, &code));
    if (!za) throw io_error(file + ": not a readable npz (zip) archive: " + detail::zip_code_message(code));
    return detail::read_npz_entries(za.get(), file);
}

std::map<std::string, NpyArray> parse_npz(const std::byte* data, std::size_t size, const std::string& source) {
    zip_error_t err;
    zip_error_init(&err);
    zip_source_t* src = zip_source_buffer_create(data, size, 0, &err);
    zip_t* za = src ? zip_open_from_source(src, ZIP_RDONLY | ZIP_CHECKCONS, &err) : nullptr;
    if (!za) {
        if (src) zip_source_free(src);  // not taken over by a failed zip_open_from_source
        const std::string msg = zip_error_strerror(&err);
        zip_error_fini(&err);
        throw io_error(source + ": not a readable npz (zip) archive: " + msg);
    }
    zip_error_fini(&err);
    const std::unique_ptr<zip_t, detail::ZipDiscard> owner(za);  // zip_discard also frees the source
    return detail::read_npz_entries(za, source);
}

void write_npz(const std::filesystem::path& path, const std::map<std::string, NpyArray>& arrays,
                      bool compress) {
    const std::string file = path.string();
    // An archive without entries is just the 22-byte end-of-central-directory record.
    if (arrays.empty()) {
        const unsigned char empty_zip[22] = {'P', 'K', 5, 6};
        write_file_atomic(path, empty_zip, sizeof empty_zip);
        return;
    }
    zip_error_t err;
    zip_error_init(&err);
    zip_source_t* buffer = zip_source_buffer_create(nullptr, 0, 0, &err);
    if (!buffer) throw io_error(file + ": cannot create an in-memory archive: " + zip_error_strerror(&err));
    zip_t* za = zip_open_from_source(buffer, ZIP_TRUNCATE, &err);
    if (!za) {
        zip_source_free(buffer);
        const std::string msg = zip_error_strerror(&err);
        zip_error_fini(&err);
        throw io_error(file + ": cannot create an in-memory archive: " + msg);
    }
    zip_source_keep(buffer);  // we read the archive back out of it after zip_close
    auto fail = [&](const std::string& what) {
        const std::string msg = file + ": " + what + ": " + zip_strerror(za);
        zip_discard(za);
        zip_source_free(buffer);
        throw io_error(msg);
    };
    std::vector<std::vector<std::byte>> images;  // must outlive zip_close, which reads them
    images.reserve(arrays.size());
    for (const auto& [name, array] : arrays) {
        images.push_back(encode_npy(array));
        const auto& img = images.back();
        zip_source_t* src = zip_source_buffer(za, img.data(), img.size(), 0);
        if (!src) fail("cannot add entry '" + name + ".npy'");
        const zip_int64_t idx = zip_file_add(za, (name + ".npy").c_str(), src, ZIP_FL_ENC_UTF_8);
        if (idx < 0) {
            zip_source_free(src);
            fail("cannot add entry '" + name + ".npy'");
        }
        if (zip_set_file_compression(za, zip_uint64_t(idx), compress ? ZIP_CM_DEFLATE : ZIP_CM_STORE, 0) != 0)
            fail("cannot set the compression of '" + name + ".npy'");
    }
    if (zip_close(za) != 0) fail("cannot build the archive");
    std::vector<std::byte> bytes;
    zip_stat_t st;
    zip_stat_init(&st);
    bool ok = zip_source_stat(buffer, &st) == 0 && (st.valid & ZIP_STAT_SIZE) && zip_source_open(buffer) == 0;
    if (ok) {
        bytes.resize(st.size);
        ok = zip_source_read(buffer, bytes.data(), st.size) == zip_int64_t(st.size);
        zip_source_close(buffer);
    }
    zip_source_free(buffer);
    if (!ok) throw io_error(file + ": cannot read back the in-memory archive");
    write_file_atomic(path, bytes.data(), bytes.size());
}

}  // namespace xgrad::io
