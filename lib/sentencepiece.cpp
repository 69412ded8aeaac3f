// SentencePiece models (include/xgrad/text/sentencepiece.hpp) over Debian's libsentencepiece: its
// processor encodes and decodes, its trainer learns a vocabulary; here are the options, the checks
// and llama2.c's tokenizer.bin.
#include "xgrad/text/sentencepiece.hpp"

#include <algorithm>
#include <cstring>
#include <unordered_map>

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include "xgrad/core/error.hpp"
#include "xgrad/io/file.hpp"

namespace xgrad::text {
namespace {

constexpr std::string_view whitespace_mark = "\xE2\x96\x81";  // U+2581 "▁", SentencePiece's space

// A piece's text: "▁" as a space (appended, not replaced in place: g++ 12 warns falsely on that).
std::string with_spaces(std::string_view piece) {
    std::string out;
    for (std::size_t at = 0; at < piece.size();) {
        const std::size_t mark = std::min(piece.find(whitespace_mark, at), piece.size());
        out.append(piece.substr(at, mark - at));
        if (mark == piece.size()) break;
        out += ' ';
        at = mark + whitespace_mark.size();
    }
    return out;
}

// The text's lines, one sentence each, as the trainer reads a text file.
class LineIterator : public sentencepiece::SentenceIterator {
public:
    explicit LineIterator(std::string_view text) : text_(text) { Next(); }
    bool done() const override { return done_; }
    void Next() override {
        if (at_ >= text_.size()) {
            done_ = true;
            return;
        }
        const std::size_t end = std::min(text_.find('\n', at_), text_.size());
        line_.assign(text_.substr(at_, end - at_));
        at_ = end + 1;
    }
    const std::string& value() const override { return line_; }
    sentencepiece::util::Status status() const override { return {}; }

private:
    std::string_view text_;
    std::size_t at_ = 0;
    std::string line_;
    bool done_ = false;
};

}  // namespace

struct SentencePieceModel::Impl {
    sentencepiece::SentencePieceProcessor processor;
    std::string name;

    int checked(std::int64_t id) const {
        if (id < 0 || id >= processor.GetPieceSize())
            throw value_error("SentencePiece " + name + ": id " + std::to_string(id) + " is outside the vocabulary of " +
                              std::to_string(processor.GetPieceSize()));
        return int(id);
    }
};

SentencePieceModel::SentencePieceModel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SentencePieceModel::~SentencePieceModel() = default;

std::shared_ptr<const SentencePieceModel> SentencePieceModel::parse(std::string_view serialized, const std::string& name) {
    auto impl = std::make_unique<Impl>();
    impl->name = name;
    const auto status = impl->processor.LoadFromSerializedProto({serialized.data(), serialized.size()});
    if (!status.ok()) throw io_error(name + ": not a SentencePiece model (" + status.ToString() + ")");
    if (impl->processor.GetPieceSize() <= 0) throw io_error(name + ": a SentencePiece model without pieces");
    return std::shared_ptr<const SentencePieceModel>(new SentencePieceModel(std::move(impl)));
}

std::shared_ptr<const SentencePieceModel> SentencePieceModel::load(const std::filesystem::path& path) {
    const auto bytes = io::read_file_bytes(path);
    return parse({reinterpret_cast<const char*>(bytes.data()), bytes.size()}, path.string());
}

std::shared_ptr<const SentencePieceModel> SentencePieceModel::train(std::string_view text, std::size_t vocab_size,
                                                                    const std::string& name, std::size_t threads) {
    constexpr std::size_t reserved = 3 + 256;  // <unk>, <s>, </s> and the byte tokens
    if (vocab_size <= reserved)
        throw value_error("SentencePiece training on " + name + ": a vocab_size of " + std::to_string(vocab_size) +
                          " leaves no piece beside the " + std::to_string(reserved) + " reserved ids");
    // llama2.c's tinystories.py train_vocab, option for option; minloglevel 2 keeps the trainer quiet
    const std::unordered_map<std::string, std::string> options{
        {"model_type", "bpe"},          {"vocab_size", std::to_string(vocab_size)},
        {"self_test_sample_size", "0"}, {"input_format", "text"},
        {"character_coverage", "1.0"},  {"num_threads", std::to_string(std::max<std::size_t>(threads, 1))},
        {"split_digits", "true"},       {"allow_whitespace_only_pieces", "true"},
        {"byte_fallback", "true"},      {"unk_surface", " \xE2\x81\x87 "},
        {"normalization_rule_name", "identity"}, {"minloglevel", "2"}};
    LineIterator lines(text);
    std::string serialized;
    const auto status = sentencepiece::SentencePieceTrainer::Train(options, &lines, &serialized);
    if (!status.ok())
        throw value_error("SentencePiece training on " + name + " with vocab_size " + std::to_string(vocab_size) +
                          " failed: " + status.ToString());
    return parse(serialized, "the SentencePiece model of " + name);
}

std::size_t SentencePieceModel::vocab_size() const { return std::size_t(impl_->processor.GetPieceSize()); }

std::optional<std::int64_t> SentencePieceModel::bos_id() const {
    const int id = impl_->processor.bos_id();
    return id >= 0 ? std::optional<std::int64_t>(id) : std::nullopt;
}
std::optional<std::int64_t> SentencePieceModel::eos_id() const {
    const int id = impl_->processor.eos_id();
    return id >= 0 ? std::optional<std::int64_t>(id) : std::nullopt;
}
std::string SentencePieceModel::piece(std::int64_t id) const { return impl_->processor.IdToPiece(impl_->checked(id)); }
float SentencePieceModel::score(std::int64_t id) const { return impl_->processor.GetScore(impl_->checked(id)); }

void SentencePieceModel::encode(std::string_view text, const std::string& what, std::vector<std::int64_t>& out) const {
    std::vector<int> ids;
    const auto status = impl_->processor.Encode({text.data(), text.size()}, &ids);
    if (!status.ok()) throw value_error(what + ": SentencePiece " + impl_->name + " cannot encode it: " + status.ToString());
    out.insert(out.end(), ids.begin(), ids.end());
}

std::string SentencePieceModel::decode(std::span<const std::int64_t> ids) const {
    std::vector<int> checked(ids.size());
    std::transform(ids.begin(), ids.end(), checked.begin(), [&](std::int64_t id) { return impl_->checked(id); });
    std::string out;
    const auto status = impl_->processor.Decode(checked, &out);
    if (!status.ok()) throw value_error("SentencePiece " + impl_->name + ": cannot decode: " + status.ToString());
    return out;
}

void SentencePieceModel::append(std::string& out, std::int64_t id) const {
    const auto& p = impl_->processor;
    const int i = impl_->checked(id);
    if (p.IsControl(i)) return;
    if (p.IsUnknown(i)) {  // the model's unk_surface, which only the library's decoder knows
        out += decode(std::span(&id, 1));
        return;
    }
    const std::string& piece = p.IdToPiece(i);
    if (p.IsByte(i)) {  // "<0xAB>"
        out += char(std::stoi(piece.substr(3, 2), nullptr, 16));
        return;
    }
    out += with_spaces(piece);
}

std::string SentencePieceModel::serialized() const {
    const auto bytes = impl_->processor.serialized_model_proto();
    return std::string(bytes.begin(), bytes.end());
}

std::string SentencePieceModel::llama2c_tokenizer_bin() const {
    const auto& p = impl_->processor;
    std::vector<std::string> tokens;
    std::uint32_t longest = 0;
    for (int id = 0; id < p.GetPieceSize(); ++id) {
        tokens.push_back(id == p.bos_id()   ? std::string("\n<s>\n")
                         : id == p.eos_id() ? std::string("\n</s>\n")
                                            : with_spaces(p.IdToPiece(id)));
        longest = std::max(longest, std::uint32_t(tokens.back().size()));
    }
    std::string out;
    const auto put = [&](const auto& value) { out.append(reinterpret_cast<const char*>(&value), sizeof value); };
    put(longest);
    for (int id = 0; id < p.GetPieceSize(); ++id) {
        put(p.GetScore(id));
        put(std::uint32_t(tokens[std::size_t(id)].size()));
        out += tokens[std::size_t(id)];
    }
    return out;
}

}  // namespace xgrad::text
