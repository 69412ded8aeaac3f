// Tokenizers for language models on UTF-8 text, one interface for the four kinds:
//
//   auto bytes = text::Tokenizer::bytes();               // 256 ids, one per byte: any input works
//   auto gpt2 = text::Tokenizer::bpe_folder("gpt2/");    // GPT-2's byte-level BPE (bpe.hpp)
//   auto llama = text::Tokenizer::sentencepiece("tokenizer.model");  // Llama's (sentencepiece.hpp)
//   auto chars = text::Tokenizer::characters(corpus);    // one id per distinct character of the
//                                                        // corpus, sorted by code point (nanoGPT's
//                                                        // sorted(set(text)): the same ids)
//   std::vector<std::int64_t> ids = chars.encode("To be");   // value_error on a character not in it
//   std::string s = chars.decode(ids);
//
// The character vocabulary travels with a checkpoint as its code points (vocabulary()). Byte and
// character tokenizers also give one token at a time (next(), which text::Windows reads a corpus
// with); BPE and SentencePiece tokenize whole texts (encode()).
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "xgrad/core/error.hpp"
#include "xgrad/text/bpe.hpp"
#include "xgrad/text/sentencepiece.hpp"

namespace xgrad::text {

// The code point starting at s[at] and its length in bytes; value_error naming `what` and the byte
// offset if the bytes there are not UTF-8.
struct DecodedChar {
    char32_t code;
    std::size_t length;
};
inline DecodedChar decode_utf8(std::string_view s, std::size_t at, const std::string& what) {
    const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
    const unsigned char b0 = byte(at);
    const std::size_t length = b0 < 0x80 ? 1 : (b0 >> 5) == 0x6 ? 2 : (b0 >> 4) == 0xE ? 3 : (b0 >> 3) == 0x1E ? 4 : 0;
    bool ok = length != 0 && at + length <= s.size();
    char32_t code = length == 1 ? b0 : length == 2 ? b0 & 0x1F : length == 3 ? b0 & 0x0F : b0 & 0x07;
    for (std::size_t k = 1; ok && k < length; ++k) {
        ok = (byte(at + k) >> 6) == 0x2;
        code = (code << 6) | (byte(at + k) & 0x3F);
    }
    // overlong forms, surrogates and values past U+10FFFF are not UTF-8 either
    static constexpr char32_t smallest[] = {0, 0, 0x80, 0x800, 0x10000};
    ok = ok && code >= smallest[length] && code <= 0x10FFFF && !(code >= 0xD800 && code <= 0xDFFF);
    if (!ok) throw value_error(what + ": invalid UTF-8 at byte " + std::to_string(at));
    return {code, length};
}

inline void append_utf8(std::string& out, char32_t c) {
    if (c < 0x80) {
        out += char(c);
    } else if (c < 0x800) {
        out += char(0xC0 | (c >> 6)), out += char(0x80 | (c & 0x3F));
    } else if (c < 0x10000) {
        out += char(0xE0 | (c >> 12)), out += char(0x80 | ((c >> 6) & 0x3F)), out += char(0x80 | (c & 0x3F));
    } else {
        out += char(0xF0 | (c >> 18)), out += char(0x80 | ((c >> 12) & 0x3F));
        out += char(0x80 | ((c >> 6) & 0x3F)), out += char(0x80 | (c & 0x3F));
    }
}

// The length of the UTF-8 sequence at s[at] and whether it is valid; an invalid one's length is that
// of its maximal subpart, which WHATWG's decoder (node's) and Python's errors="replace" each read as
// one U+FFFD.
struct Utf8Step {
    std::size_t length;
    bool valid;
};
inline Utf8Step utf8_step(std::string_view s, std::size_t at) {
    const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
    const unsigned char b0 = byte(at);
    if (b0 < 0x80) return {1, true};
    std::size_t need = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // the range of the next byte (no overlong form, surrogate or > U+10FFFF)
    if (b0 >= 0xC2 && b0 <= 0xDF) need = 1;
    else if (b0 >= 0xE0 && b0 <= 0xEF) need = 2, lo = b0 == 0xE0 ? 0xA0 : 0x80, hi = b0 == 0xED ? 0x9F : 0xBF;
    else if (b0 >= 0xF0 && b0 <= 0xF4) need = 3, lo = b0 == 0xF0 ? 0x90 : 0x80, hi = b0 == 0xF4 ? 0x8F : 0xBF;
    else return {1, false};
    for (std::size_t k = 1; k <= need; ++k, lo = 0x80, hi = 0xBF)
        if (at + k >= s.size() || byte(at + k) < lo || byte(at + k) > hi) return {k, false};
    return {need + 1, true};
}

// `s` with each invalid UTF-8 sequence replaced by U+FFFD: bytes from decode() made printable.
inline std::string replace_invalid_utf8(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (std::size_t at = 0; at < s.size();) {
        const Utf8Step step = utf8_step(s, at);
        if (step.valid) out.append(s.substr(at, step.length));
        else out += "\xEF\xBF\xBD";
        at += step.length;
    }
    return out;
}

class Tokenizer {
public:
    enum class Kind { byte, character, bpe, sentencepiece };

    static Tokenizer bytes() { return Tokenizer(Kind::byte, {}); }
    // The distinct characters of `text` (UTF-8), sorted by code point; `what` names it in errors.
    static Tokenizer characters(std::string_view text, const std::string& what = "text") {
        std::vector<bool> seen(0x110000, false);  // one bit per code point: bounded for any text
        for (std::size_t at = 0; at < text.size();) {
            const unsigned char b = static_cast<unsigned char>(text[at]);
            if (b < 0x80) {  // the common case, without the general decoder
                seen[b] = true;
                ++at;
                continue;
            }
            const DecodedChar d = decode_utf8(text, at, what);
            seen[d.code] = true;
            at += d.length;
        }
        std::vector<char32_t> chars;
        for (char32_t c = 0; c < 0x110000; ++c)
            if (seen[c]) chars.push_back(c);
        if (chars.empty()) throw value_error(what + ": no characters to build a vocabulary from");
        return Tokenizer(Kind::character, std::move(chars));
    }
    // A character vocabulary as vocabulary() gave it (sorted, distinct code points).
    static Tokenizer from_vocabulary(std::vector<char32_t> chars) {
        for (std::size_t i = 0; i < chars.size(); ++i)
            if (chars[i] > 0x10FFFF || (i > 0 && chars[i] <= chars[i - 1]))
                throw value_error("Tokenizer: a character vocabulary must be distinct code points in increasing order");
        if (chars.empty()) throw value_error("Tokenizer: an empty character vocabulary");
        return Tokenizer(Kind::character, std::move(chars));
    }

    // GPT-2's byte-level BPE from its two files (bpe.hpp).
    static Tokenizer bpe(const std::filesystem::path& vocab_json, const std::filesystem::path& merges_txt) {
        return Tokenizer(BpeModel::load(vocab_json, merges_txt));
    }
    // A folder's BPE files: vocab.json + merges.txt (Hugging Face's names) or encoder.json + vocab.bpe
    // (OpenAI's); io_error naming the folder when it has neither pair.
    static Tokenizer bpe_folder(const std::filesystem::path& dir) {
        std::error_code ec;
        for (const auto& [vocab, merges] : {std::pair{"vocab.json", "merges.txt"}, std::pair{"encoder.json", "vocab.bpe"}})
            if (std::filesystem::exists(dir / vocab, ec) || std::filesystem::exists(dir / merges, ec))
                return bpe(dir / vocab, dir / merges);
        throw io_error(dir.string() + ": has no tokenizer files (vocab.json and merges.txt, or encoder.json and vocab.bpe)");
    }
    explicit Tokenizer(std::shared_ptr<const BpeModel> model) : kind_(Kind::bpe), bpe_(std::move(model)) {}

    // A SentencePiece model file (tokenizer.model: Llama's, llama2.c's, or one trained by
    // SentencePieceModel::train).
    static Tokenizer sentencepiece(const std::filesystem::path& model) {
        return Tokenizer(SentencePieceModel::load(model));
    }
    explicit Tokenizer(std::shared_ptr<const SentencePieceModel> model)
        : kind_(Kind::sentencepiece), sentencepiece_(std::move(model)) {}

    Kind kind() const { return kind_; }
    std::size_t vocab_size() const {
        return kind_ == Kind::byte ? 256
               : kind_ == Kind::bpe ? bpe_->vocab_size()
               : kind_ == Kind::sentencepiece ? sentencepiece_->vocab_size()
                                              : chars_.size();
    }
    // BPE and SentencePiece: encode() takes whole texts, next() is refused.
    bool encodes_whole_texts() const { return kind_ == Kind::bpe || kind_ == Kind::sentencepiece; }
    // Whether character c is a token of a byte or character vocabulary (value_error for the others).
    bool contains(char32_t c) const {
        if (encodes_whole_texts())
            throw value_error("Tokenizer::contains: a BPE or SentencePiece vocabulary holds strings, not characters");
        return kind_ == Kind::byte ? c < 256 : std::binary_search(chars_.begin(), chars_.end(), c);
    }
    const std::vector<char32_t>& vocabulary() const { return chars_; }  // empty but for characters
    const BpeModel* bpe_model() const { return bpe_.get(); }           // null unless BPE
    const SentencePieceModel* sentencepiece_model() const { return sentencepiece_.get(); }  // null unless SentencePiece

    // The id of the token starting at s[at] and its length in bytes.
    std::pair<std::int64_t, std::size_t> next(std::string_view s, std::size_t at, const std::string& what) const {
        if (encodes_whole_texts())
            throw value_error(what + (kind_ == Kind::bpe ? ": a BPE" : ": a SentencePiece") +
                              " tokenizer encodes whole texts (encode), not one token at a time");
        if (kind_ == Kind::byte) return {std::int64_t(static_cast<unsigned char>(s[at])), 1};
        const DecodedChar d = decode_utf8(s, at, what);
        const auto it = std::lower_bound(chars_.begin(), chars_.end(), d.code);
        if (it == chars_.end() || *it != d.code)
            throw value_error(what + ": the character " + describe(d.code) + " at byte " + std::to_string(at) +
                              " is not in the vocabulary (" + std::to_string(chars_.size()) +
                              " characters of the training text)");
        return {std::int64_t(it - chars_.begin()), d.length};
    }
    // `special` matters to GPT-2's BPE only (bpe.hpp): SentencePiece reads "<s>" as text, as its
    // library does, and the other kinds have no special tokens.
    std::vector<std::int64_t> encode(std::string_view s, const std::string& what = "text",
                                     Special special = Special::as_text) const {
        std::vector<std::int64_t> ids;
        if (kind_ == Kind::bpe) {
            bpe_->encode(s, special, ids);
            return ids;
        }
        if (kind_ == Kind::sentencepiece) {
            sentencepiece_->encode(s, what, ids);
            return ids;
        }
        for (std::size_t at = 0; at < s.size();) {
            const auto [id, length] = next(s, at, what);
            ids.push_back(id);
            at += length;
        }
        return ids;
    }
    // Appends token `id`'s text (a byte, BPE or SentencePiece byte token may be part of a UTF-8
    // sequence; a SentencePiece piece's "▁" is a space).
    void append(std::string& out, std::int64_t id) const {
        if (kind_ == Kind::bpe) return bpe_->append(out, id);
        if (kind_ == Kind::sentencepiece) return sentencepiece_->append(out, id);
        if (id < 0 || std::size_t(id) >= vocab_size())
            throw value_error("Tokenizer: id " + std::to_string(id) + " is outside the vocabulary of " +
                              std::to_string(vocab_size()));
        if (kind_ == Kind::byte) out += char(static_cast<unsigned char>(id));
        else append_utf8(out, chars_[std::size_t(id)]);
    }
    // The tokens' texts joined; SentencePiece decodes as its library does (sentencepiece.hpp).
    std::string decode(std::span<const std::int64_t> ids) const {
        if (kind_ == Kind::sentencepiece) return sentencepiece_->decode(ids);
        std::string out;
        for (std::int64_t id : ids) append(out, id);
        return out;
    }

private:
    Tokenizer(Kind kind, std::vector<char32_t> chars) : kind_(kind), chars_(std::move(chars)) {}
    static std::string describe(char32_t c) {
        std::string s = "'";
        append_utf8(s, c);
        char hex[16];
        std::snprintf(hex, sizeof hex, "' (U+%04X)", unsigned(c));
        return s + hex;
    }

    Kind kind_;
    std::vector<char32_t> chars_;  // sorted code points; the id is the index
    std::shared_ptr<const BpeModel> bpe_;
    std::shared_ptr<const SentencePieceModel> sentencepiece_;
};

}  // namespace xgrad::text
