// GPT-2's byte-level BPE (include/xgrad/text/bpe.hpp): the files, the pre-tokenizer (PCRE2, JIT
// when the library has it) and the merges, on token ids: a merge rule (left, right) is looked up as
// the pair of their ids and gives the id of left + right, which is the reference's merge of strings.
#include "xgrad/text/bpe.hpp"

#include <algorithm>
#include <array>
#include <climits>
#include <cstring>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "json.hpp"
#include "xgrad/io/file.hpp"
#include "xgrad/text/tokenizer.hpp"

namespace xgrad::text {
using xgrad::detail::json_text;
namespace {

// GPT-2's pre-tokenizer (OpenAI's encoder.py), as written there.
constexpr const char* gpt2_pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr std::string_view end_of_text = "<|endoftext|>";
constexpr std::size_t cache_limit = 1 << 17;  // pieces remembered; the cache starts over past it

// bytes_to_unicode(): printable bytes stand for themselves, the other 68 for 256, 257, ... in order.
std::array<char32_t, 256> byte_characters() {
    std::array<char32_t, 256> out{};
    char32_t next = 256;
    for (unsigned b = 0; b < 256; ++b) {
        const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        out[b] = printable ? char32_t(b) : next++;
    }
    return out;
}

}  // namespace

// The model's tables (named, not anonymous: BpeModel::Impl holds them).
namespace detail {

struct StringHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
template <class V>
using StringMap = std::unordered_map<std::string, V, StringHash, std::equal_to<>>;

struct Merge {
    std::int32_t rank, id;
};

// The merges by pair of ids, (left << 32 | right) -> rank and merged id: open addressing in a
// power-of-two table at most half full, probed linearly (a merge rule is looked up for every pair
// of every new piece: this is most of the first encoding of a text). No key is all ones: ids are
// below 2^31.
class MergeTable {
public:
    const Merge* find(std::uint64_t key) const {
        for (std::size_t i = home(key);; i = (i + 1) & mask_) {
            if (slots_[i].key == key) return &slots_[i].merge;
            if (slots_[i].key == empty) return nullptr;
        }
    }
    // false (and nothing changed) if the pair has a merge already
    bool insert(std::uint64_t key, Merge m) {
        if (2 * (size_ + 1) > slots_.size()) rehash(std::max<std::size_t>(16, 2 * slots_.size()));
        std::size_t i = home(key);
        for (; slots_[i].key != empty; i = (i + 1) & mask_)
            if (slots_[i].key == key) return false;
        slots_[i] = {key, m}, ++size_;
        return true;
    }
    void reserve(std::size_t n) {
        std::size_t capacity = 16;
        while (capacity < 2 * n) capacity *= 2;
        if (capacity > slots_.size()) rehash(capacity);
    }
    std::size_t size() const { return size_; }

private:
    static constexpr std::uint64_t empty = ~std::uint64_t(0);
    struct Slot {
        std::uint64_t key = empty;
        Merge merge{};
    };
    std::size_t home(std::uint64_t key) const { return std::size_t((key * 0x9E3779B97F4A7C15ull) >> 32) & mask_; }
    void rehash(std::size_t capacity) {
        std::vector<Slot> old = std::exchange(slots_, std::vector<Slot>(capacity));
        mask_ = capacity - 1, size_ = 0;
        for (const Slot& s : old)
            if (s.key != empty) insert(s.key, s.merge);
    }
    std::vector<Slot> slots_;
    std::size_t mask_ = 0, size_ = 0;
};

}  // namespace detail

struct BpeModel::Impl {
    std::vector<std::string> token_bytes;  // by id: a vocabulary of N tokens numbers them 0..N-1
    detail::StringMap<std::int32_t> id_by_token;   // as the vocabulary writes them ("Ġthe")
    std::array<std::int32_t, 256> byte_id{};
    detail::MergeTable merges;
    std::vector<std::uint64_t> pairs_by_rank;  // the merges' (left << 32 | right), in the file's order
    std::optional<std::int32_t> end_of_text_id;
    pcre2_code* pattern = nullptr;
    bool jit = false;  // the pattern is JIT-compiled: matched by pcre2_jit_match, which skips the checks
    mutable std::mutex cache_mutex;  // encode() holds it: concurrent encodes of one model take turns
    mutable detail::StringMap<std::vector<std::int32_t>> cache;

    ~Impl() { pcre2_code_free(pattern); }

    // The ids of one piece of the pre-tokenizer (its UTF-8 bytes).
    const std::vector<std::int32_t>& piece_ids(std::string_view piece) const {
        if (const auto it = cache.find(piece); it != cache.end()) return it->second;
        std::vector<std::int32_t> word(piece.size());
        for (std::size_t i = 0; i < piece.size(); ++i) word[i] = byte_id[static_cast<unsigned char>(piece[i])];
        while (word.size() > 1) {
            detail::Merge best{INT_MAX, -1};
            std::uint64_t best_key = 0;
            for (std::size_t i = 0; i + 1 < word.size(); ++i) {
                const std::uint64_t key = std::uint64_t(std::uint32_t(word[i])) << 32 | std::uint32_t(word[i + 1]);
                const detail::Merge* m = merges.find(key);
                if (m && m->rank < best.rank) best = *m, best_key = key;
            }
            if (best.id < 0) break;
            // every occurrence of the pair, left to right
            const auto left = std::int32_t(best_key >> 32), right = std::int32_t(best_key & 0xffffffff);
            std::size_t out = 0;
            for (std::size_t i = 0; i < word.size(); ++out) {
                const bool pair = i + 1 < word.size() && word[i] == left && word[i + 1] == right;
                word[out] = pair ? best.id : word[i];
                i += pair ? 2 : 1;
            }
            word.resize(out);
        }
        if (cache.size() >= cache_limit) cache.clear();
        return cache.emplace(std::string(piece), std::move(word)).first->second;
    }

    // A text with no special token: every piece of the pattern, then its merges.
    void encode_ordinary(std::string_view text, pcre2_match_data* match, std::vector<std::int64_t>& out) const {
        const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
        const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match);
        for (std::size_t at = 0; at < text.size();) {
            const int rc = jit ? pcre2_jit_match(pattern, subject, text.size(), at, 0, match, nullptr)
                               : pcre2_match(pattern, subject, text.size(), at, PCRE2_NO_UTF_CHECK, match, nullptr);
            // every character matches one of the alternatives, so a piece starts at each position
            if (rc < 0 || ovector[0] != at || ovector[1] <= at)
                throw value_error("BPE: the pre-tokenizer found no piece at byte " + std::to_string(at));
            for (std::int32_t id : piece_ids(text.substr(at, ovector[1] - at))) out.push_back(id);
            at = ovector[1];
        }
    }
};

BpeModel::BpeModel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
BpeModel::~BpeModel() = default;

std::shared_ptr<const BpeModel> BpeModel::load(const std::filesystem::path& vocab_json,
                                               const std::filesystem::path& merges_txt) {
    const auto text = [](const std::filesystem::path& p) {
        const auto mapped = io::MappedFile::open(p);
        return std::string(reinterpret_cast<const char*>(mapped.bytes().data()), mapped.bytes().size());
    };
    return parse(text(vocab_json), text(merges_txt), vocab_json.string(), merges_txt.string());
}

std::shared_ptr<const BpeModel> BpeModel::parse(std::string_view vocab_json, std::string_view merges_txt,
                                                const std::string& vocab_name, const std::string& merges_name) {
    auto impl = std::make_unique<Impl>();
    // the vocabulary: {token: id}, every token made of the 256 byte characters
    const auto vocab = xgrad::detail::parse_json_unique_keys(vocab_json.data(), vocab_json.data() + vocab_json.size(),
                                                                  vocab_name + ": the vocabulary");
    if (!vocab.is_object() || vocab.empty()) throw io_error(vocab_name + ": is not a JSON object of tokens and ids");
    const auto characters = byte_characters();
    std::unordered_map<char32_t, unsigned char> byte_of;
    for (unsigned b = 0; b < 256; ++b) byte_of[characters[b]] = static_cast<unsigned char>(b);
    // N tokens take the ids 0..N-1, each once (so an id cannot ask for a table larger than the file)
    const std::size_t n_tokens = vocab.size();
    impl->token_bytes.resize(n_tokens);
    std::vector<bool> taken(n_tokens);
    for (const auto& [token, id_json] : vocab.items()) {
        const std::string where = vocab_name + ": token '" + token + "'";
        if (!id_json.is_number_unsigned() || id_json.get<std::uint64_t>() >= n_tokens)
            throw io_error(where + ": its id " + json_text(id_json) + " is not an integer in [0, " + std::to_string(n_tokens) +
                           "): a vocabulary of " + std::to_string(n_tokens) + " tokens numbers them from 0");
        const auto id = std::size_t(id_json.get<std::uint64_t>());
        if (taken[id]) {
            const auto other = std::find_if(impl->id_by_token.begin(), impl->id_by_token.end(),
                                            [&](const auto& e) { return e.second == std::int32_t(id); });
            throw io_error(vocab_name + ": tokens '" + other->first + "' and '" + token + "' have one id, " + std::to_string(id));
        }
        if (token.empty()) throw io_error(vocab_name + ": token " + std::to_string(id) + " is empty");
        std::string bytes;
        for (std::size_t at = 0; at < token.size();) {
            const DecodedChar c = decode_utf8(token, at, where);
            const auto it = byte_of.find(c.code);
            if (it == byte_of.end())
                throw io_error(where + ": character " + std::to_string(unsigned(c.code)) +
                               " is not one of GPT-2's 256 byte characters");
            bytes += char(it->second);
            at += c.length;
        }
        impl->token_bytes[id] = std::move(bytes);
        taken[id] = true;
        impl->id_by_token.emplace(token, std::int32_t(id));
    }
    for (unsigned b = 0; b < 256; ++b) {
        std::string one;
        append_utf8(one, characters[b]);
        const auto it = impl->id_by_token.find(one);
        if (it == impl->id_by_token.end())
            throw io_error(vocab_name + ": has no token for byte " + std::to_string(b) + " ('" + one + "')");
        impl->byte_id[b] = it->second;
    }
    if (const auto it = impl->id_by_token.find(end_of_text); it != impl->id_by_token.end()) impl->end_of_text_id = it->second;

    // the merges: "left right" per line by rank, after a "#version" line
    impl->merges.reserve(std::size_t(std::count(merges_txt.begin(), merges_txt.end(), '\n')) + 1);
    std::size_t line_no = 0;
    for (std::size_t at = 0; at < merges_txt.size();) {
        std::size_t end = merges_txt.find('\n', at);
        if (end == std::string_view::npos) end = merges_txt.size();
        std::string_view line = merges_txt.substr(at, end - at);
        at = end + 1, ++line_no;
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        if (line.empty() || (line_no == 1 && line.starts_with("#version"))) continue;
        std::string where = merges_name;  // appended: `":" + std::string` trips g++ 12's false -Wrestrict
        where += ':';
        where += std::to_string(line_no);
        const std::size_t space = line.find(' ');
        if (space == 0 || space == std::string_view::npos || space + 1 == line.size() ||
            line.find(' ', space + 1) != std::string_view::npos)
            throw io_error(where + ": '" + std::string(line) + "' is not two tokens separated by one space");
        const std::string_view left = line.substr(0, space), right = line.substr(space + 1);
        const auto id = [&](std::string_view token) {
            const auto it = impl->id_by_token.find(token);
            if (it == impl->id_by_token.end())
                throw io_error(where + ": '" + std::string(token) + "' is not in " + vocab_name);
            return it->second;
        };
        const std::int32_t left_id = id(left), right_id = id(right), merged = id(std::string(left) + std::string(right));
        const std::uint64_t key = std::uint64_t(std::uint32_t(left_id)) << 32 | std::uint32_t(right_id);
        const auto rank = std::int32_t(impl->merges.size());
        if (!impl->merges.insert(key, detail::Merge{rank, merged}))
            throw io_error(where + ": the merge '" + std::string(line) + "' is given twice");
        impl->pairs_by_rank.push_back(key);
    }
    if (impl->merges.size() == 0) throw io_error(merges_name + ": has no merges");
    impl->cache.reserve(cache_limit);  // no rehashing while a first text fills it

    int code = 0;
    PCRE2_SIZE offset = 0;
    impl->pattern = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(gpt2_pattern), PCRE2_ZERO_TERMINATED,
                                  PCRE2_UTF | PCRE2_UCP, &code, &offset, nullptr);
    if (!impl->pattern) throw value_error("BPE: PCRE2 cannot compile GPT-2's pattern (error " + std::to_string(code) + ")");
    impl->jit = pcre2_jit_compile(impl->pattern, PCRE2_JIT_COMPLETE) == 0;  // without a JIT, pcre2_match interprets
    return std::shared_ptr<const BpeModel>(new BpeModel(std::move(impl)));
}

std::size_t BpeModel::vocab_size() const { return impl_->token_bytes.size(); }
std::size_t BpeModel::merges() const { return impl_->merges.size(); }

std::optional<std::int64_t> BpeModel::id_of(std::string_view token) const {
    const auto it = impl_->id_by_token.find(token);
    if (it == impl_->id_by_token.end()) return std::nullopt;
    return it->second;
}

void BpeModel::encode(std::string_view text, Special special, std::vector<std::int64_t>& out) const {
    // bytes that are not UTF-8 read as U+FFFD, as the reference reads them
    std::string replaced;
    for (std::size_t at = 0; at < text.size();) {
        const Utf8Step step = utf8_step(text, at);
        if (!step.valid) {
            replaced = replace_invalid_utf8(text);
            text = replaced;
            break;
        }
        at += step.length;
    }
    if (special == Special::recognized && !impl_->end_of_text_id)
        throw value_error("BPE: the vocabulary has no " + std::string(end_of_text) + " to recognize");
    const std::unique_ptr<pcre2_match_data, void (*)(pcre2_match_data*)> match(
        pcre2_match_data_create_from_pattern(impl_->pattern, nullptr), pcre2_match_data_free);
    if (!match) throw std::bad_alloc();
    const std::lock_guard lock(impl_->cache_mutex);
    while (special == Special::recognized) {
        const std::size_t at = text.find(end_of_text);
        if (at == std::string_view::npos) break;
        impl_->encode_ordinary(text.substr(0, at), match.get(), out);
        out.push_back(*impl_->end_of_text_id);
        text.remove_prefix(at + end_of_text.size());
    }
    impl_->encode_ordinary(text, match.get(), out);
}

void BpeModel::append(std::string& out, std::int64_t id) const {
    if (id < 0 || std::size_t(id) >= impl_->token_bytes.size())
        throw value_error("Tokenizer: id " + std::to_string(id) + " is not in the BPE vocabulary of " +
                          std::to_string(impl_->token_bytes.size()));
    out += impl_->token_bytes[std::size_t(id)];
}

std::string BpeModel::vocab_json() const {
    std::vector<const std::string*> token_of(impl_->token_bytes.size(), nullptr);
    for (const auto& [token, id] : impl_->id_by_token) token_of[std::size_t(id)] = &token;
    std::string out = "{";
    for (std::size_t id = 0; id < token_of.size(); ++id)
        if (token_of[id]) out += (out.size() > 1 ? ", " : "") + json_text(nlohmann::json(*token_of[id])) + ": " + std::to_string(id);
    return out + "}";
}

std::string BpeModel::merges_txt() const {
    std::vector<const std::string*> token_of(impl_->token_bytes.size(), nullptr);
    for (const auto& [token, id] : impl_->id_by_token) token_of[std::size_t(id)] = &token;
    std::string out = "#version: 0.2\n";
    for (const std::uint64_t pair : impl_->pairs_by_rank)
        out += *token_of[pair >> 32] + " " + *token_of[pair & 0xffffffff] + "\n";
    return out;
}

}  // namespace xgrad::text
