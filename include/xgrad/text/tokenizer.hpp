// Tokenizers for language models on UTF-8 text:
//
//   auto bytes = text::Tokenizer::bytes();               // 256 ids, one per byte: any input works
//   auto chars = text::Tokenizer::characters(corpus);    // one id per distinct character of the
//                                                        // corpus, sorted by code point (nanoGPT's
//                                                        // sorted(set(text)): the same ids)
//   std::vector<std::int64_t> ids = chars.encode("To be");   // value_error on a character not in it
//   std::string s = chars.decode(ids);
//
// The character vocabulary travels with a checkpoint as its code points (vocabulary()).
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "xgrad/core/error.hpp"

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

class Tokenizer {
public:
    enum class Kind { byte, character };

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

    Kind kind() const { return kind_; }
    std::size_t vocab_size() const { return kind_ == Kind::byte ? 256 : chars_.size(); }
    bool contains(char32_t c) const {
        return kind_ == Kind::byte ? c < 256 : std::binary_search(chars_.begin(), chars_.end(), c);
    }
    const std::vector<char32_t>& vocabulary() const { return chars_; }  // empty for bytes

    // The id of the token starting at s[at] and its length in bytes.
    std::pair<std::int64_t, std::size_t> next(std::string_view s, std::size_t at, const std::string& what) const {
        if (kind_ == Kind::byte) return {std::int64_t(static_cast<unsigned char>(s[at])), 1};
        const DecodedChar d = decode_utf8(s, at, what);
        const auto it = std::lower_bound(chars_.begin(), chars_.end(), d.code);
        if (it == chars_.end() || *it != d.code)
            throw value_error(what + ": the character " + describe(d.code) + " at byte " + std::to_string(at) +
                              " is not in the vocabulary (" + std::to_string(chars_.size()) +
                              " characters of the training text)");
        return {std::int64_t(it - chars_.begin()), d.length};
    }
    std::vector<std::int64_t> encode(std::string_view s, const std::string& what = "text") const {
        std::vector<std::int64_t> ids;
        for (std::size_t at = 0; at < s.size();) {
            const auto [id, length] = next(s, at, what);
            ids.push_back(id);
            at += length;
        }
        return ids;
    }
    // Appends token `id`'s text (a byte token may be part of a UTF-8 sequence).
    void append(std::string& out, std::int64_t id) const {
        if (id < 0 || std::size_t(id) >= vocab_size())
            throw value_error("Tokenizer: id " + std::to_string(id) + " is outside the vocabulary of " +
                              std::to_string(vocab_size()));
        if (kind_ == Kind::byte) out += char(static_cast<unsigned char>(id));
        else append_utf8(out, chars_[std::size_t(id)]);
    }
    std::string decode(std::span<const std::int64_t> ids) const {
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
};

}  // namespace xgrad::text
