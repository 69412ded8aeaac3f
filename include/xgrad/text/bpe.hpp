// GPT-2's byte-level BPE (compiled in libxgrad: lib/bpe.cpp, with PCRE2). Used through
// text::Tokenizer (tokenizer.hpp), which it shares with the byte and character tokenizers:
//
//   auto tok = text::Tokenizer::bpe_folder("gpt2/");   // vocab.json + merges.txt, or encoder.json + vocab.bpe
//   auto ids = tok.encode("Hello world");              // {15496, 995}
//   auto eot = tok.encode("a<|endoftext|>", "text", text::Special::recognized);  // {64, 50256}
//   std::string bytes = tok.decode(ids);               // raw bytes: a cut may end inside a character
//   std::cout << text::replace_invalid_utf8(bytes);    // U+FFFD for what is not UTF-8, to print
//
// Encoding is GPT-2's (OpenAI's encoder.py, the npm package gpt-3-encoder): the text is split by the
// pattern 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ (PCRE2, Unicode
// classes), each piece's UTF-8 bytes become the 256 byte characters, and merges apply lowest rank first
// (each piece's ids are cached). Bytes that are not UTF-8 are read as U+FFFD, as the reference reads a
// file (one per maximal invalid sequence, as WHATWG's and Python's decoders do).
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace xgrad::text {

// Whether encode() reads "<|endoftext|>" as its one token (GPT-2's 50256) or as text, as the
// reference always does.
enum class Special { as_text, recognized };

class BpeModel {
public:
    // vocab.json ({token: id}) and merges.txt (a "#version" line, then "left right" per line, by rank),
    // or OpenAI's encoder.json and vocab.bpe, which are the same formats. io_error naming the file and
    // the token or line that is wrong.
    static std::shared_ptr<const BpeModel> load(const std::filesystem::path& vocab_json,
                                                const std::filesystem::path& merges_txt);
    // The same from the files' contents; the names are used in messages.
    static std::shared_ptr<const BpeModel> parse(std::string_view vocab_json, std::string_view merges_txt,
                                                 const std::string& vocab_name, const std::string& merges_name);
    ~BpeModel();

    std::size_t vocab_size() const;   // the largest id + 1
    std::size_t merges() const;       // number of merge rules
    std::optional<std::int64_t> id_of(std::string_view token) const;  // a vocab entry as written ("Ġthe")
    void encode(std::string_view text, Special special, std::vector<std::int64_t>& out) const;
    // Appends token id's bytes; value_error for an id the vocabulary does not have.
    void append(std::string& out, std::int64_t id) const;
    // The two files again, as load() reads them: vocab.json ({token: id}, by id) and merges.txt (a
    // "#version: 0.2" line, then the merges by rank).
    std::string vocab_json() const;
    std::string merges_txt() const;

private:
    struct Impl;
    explicit BpeModel(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

}  // namespace xgrad::text
