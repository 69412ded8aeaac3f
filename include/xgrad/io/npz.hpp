// .npz archives (a zip of .npy files, as numpy.savez / savez_compressed write them) with libzip
// (compiled in libxgrad: lib/npz.cpp).
//
//   auto arrays = io::read_npz("ckpt.npz");   // {"fc.weight": NpyArray, ...}, names without ".npy"
//   auto same = io::parse_npz(bytes.data(), bytes.size(), "ckpt.npz");  // an archive held in memory
//   io::write_npz("ckpt.npz", arrays);        // stored; write_npz(path, arrays, true) deflates
#pragma once
#include <cstddef>
#include <filesystem>
#include <map>
#include <string>

#include "xgrad/io/npy.hpp"

namespace xgrad::io {

// Every array of an .npz file, keyed by entry name without the ".npy" suffix.
std::map<std::string, NpyArray> read_npz(const std::filesystem::path& path);

// The arrays of an .npz image held in memory (`size` bytes at `data`, which must stay valid for the
// call); `source` names it in messages as read_npz names the file.
std::map<std::string, NpyArray> parse_npz(const std::byte* data, std::size_t size, const std::string& source);

// Writes `arrays` as <name>.npy entries of a zip archive (stored, or deflated when `compress`),
// atomically: the archive is built in memory and written through a temporary file and a rename.
void write_npz(const std::filesystem::path& path, const std::map<std::string, NpyArray>& arrays,
               bool compress = false);

}  // namespace xgrad::io
