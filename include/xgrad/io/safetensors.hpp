// .safetensors files (Hugging Face's format): an 8-byte little-endian header length N, N bytes of
// JSON {name: {"dtype", "shape", "data_offsets": [begin, end)}, "__metadata__": {str: str}}, then
// the tensors' bytes, little-endian, in C order.
//
//   auto st = io::SafetensorsFile::open("model.safetensors");  // mapped, checked as the reference checks
//   st.tensors().at("wte.weight").dtype;                        // SafetensorsDtype::BF16, its shape, its bytes
//   io::NpyArray w = st.array("wte.weight");                    // F16 and BF16 widened to float32
//   auto arrays = io::read_safetensors("model.safetensors");    // every tensor, as read_npz gives them
//   io::write_safetensors("out.safetensors", arrays, {.metadata = {{"format", "pt"}}});
//   io::write_safetensors("half.safetensors", arrays, {.float_dtype = io::SafetensorsDtype::BF16});
//
// Read as npz entries are (npy.hpp's NpyArray): F64 and F32 as they are, F16 and BF16 widened to
// float32 exactly, I64 as is, I32 and U8 widened to int64, BOOL as bool; a model of either float
// type loads them with LoadStateDictOptions::convert_dtype as it loads any npz. The file is checked
// as huggingface/safetensors checks it: the header length within the file and at most 100 MB, valid
// JSON, no name twice, known dtypes, the tensors covering the data contiguously (in the order of
// their offsets, no gap, no overlap, nothing after the last), each one's byte length = product of
// its shape × item size. Any problem is an io_error naming the file and the tensor or field.
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "xgrad/io/file.hpp"
#include "xgrad/io/npy.hpp"

namespace xgrad::io {

enum class SafetensorsDtype { F64, F32, F16, BF16, I64, I32, U8, BOOL };

const char* safetensors_dtype_name(SafetensorsDtype d);  // "F64", "BF16", ...
std::size_t safetensors_itemsize(SafetensorsDtype d);

// One tensor as the file stores it.
struct SafetensorsTensor {
    SafetensorsDtype dtype = SafetensorsDtype::F32;
    std::vector<std::size_t> shape;
    std::span<const std::byte> bytes;  // inside the mapped file (or the image given to parse)

    std::size_t size() const {
        std::size_t n = 1;
        for (auto d : shape) n *= d;
        return n;
    }
};

class SafetensorsFile {
public:
    // Maps the file read-only and checks its header: tensors are read only when asked for.
    static SafetensorsFile open(const std::filesystem::path& path);
    // A whole file's image held in memory, which must outlive the result; `source` names it in messages.
    static SafetensorsFile parse(std::span<const std::byte> image, const std::string& source);

    const std::map<std::string, SafetensorsTensor>& tensors() const { return tensors_; }
    const std::map<std::string, std::string>& metadata() const { return metadata_; }
    const std::string& source() const { return source_; }

    // Tensor `name` as an NpyArray (widened as the header comment says); io_error when there is none.
    NpyArray array(const std::string& name) const;
    std::map<std::string, NpyArray> arrays() const;

private:
    MappedFile file_;  // keeps the mapping of open() alive
    std::string source_;
    std::map<std::string, SafetensorsTensor> tensors_;
    std::map<std::string, std::string> metadata_;
};

// Every tensor of a .safetensors file, keyed by name, as read_npz gives an archive's arrays.
inline std::map<std::string, NpyArray> read_safetensors(const std::filesystem::path& path) {
    return SafetensorsFile::open(path).arrays();
}

struct SafetensorsWriteOptions {
    std::map<std::string, std::string> metadata{};  // "__metadata__" (Hugging Face writes {"format": "pt"})
    // Store every float32 and float64 tensor as this float dtype (F16 and BF16 round to nearest even);
    // unset: as each tensor's own dtype.
    std::optional<SafetensorsDtype> float_dtype{};
};

// A file's image: tensors ordered as the reference orders them (larger items first, then by name),
// the header padded with spaces to a multiple of 8 bytes.
std::vector<std::byte> encode_safetensors(const std::map<std::string, NpyArray>& arrays,
                                          const SafetensorsWriteOptions& opts = {}, const std::string& source = "safetensors");
// Written atomically (a temporary file and a rename), as write_npz writes.
void write_safetensors(const std::filesystem::path& path, const std::map<std::string, NpyArray>& arrays,
                       const SafetensorsWriteOptions& opts = {});

// IEEE half and bfloat16 to and from float (round to nearest even; NaN stays NaN).
float half_to_float(std::uint16_t h);
float bfloat16_to_float(std::uint16_t b);
std::uint16_t float_to_half(float f);
std::uint16_t float_to_bfloat16(float f);

}  // namespace xgrad::io
