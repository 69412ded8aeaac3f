// SentencePiece models, the tokenizer of Llama 2 and of llama2.c (compiled in libxgrad:
// lib/sentencepiece.cpp, over Debian's libsentencepiece). Used through text::Tokenizer
// (tokenizer.hpp), which it shares with the byte, character and GPT-2 BPE tokenizers:
//
//   auto tok = text::Tokenizer::sentencepiece("tokenizer.model");  // Meta's or llama2.c's file
//   auto ids = tok.encode("Once upon a time");                       // no BOS: prepend bos_id() if wanted
//   std::string s = tok.decode(ids);                                 // "Once upon a time"
//
//   // a BPE vocabulary of 512 pieces learned from a text, with llama2.c's train_vocab options
//   auto model = text::SentencePieceModel::train(corpus.text(), 512, corpus.name());
//   std::string bytes = model->serialized();              // tok512.model's bytes
//   std::string bin = model->llama2c_tokenizer_bin();     // tokenizer.bin, what run.c reads
//
// Training reads the text line by line (a line is a sentence; newlines become byte tokens when
// encoding, as in Llama's vocabulary). Encoding is the library's: xgrad adds nothing to it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace xgrad::text {

class SentencePieceModel {
public:
    // A tokenizer.model file (a serialized ModelProto); io_error naming the file when it is not one.
    static std::shared_ptr<const SentencePieceModel> load(const std::filesystem::path& path);
    // The same from the file's bytes, named `name` in errors.
    static std::shared_ptr<const SentencePieceModel> parse(std::string_view serialized, const std::string& name);
    // A BPE model of `vocab_size` pieces learned from `text` (UTF-8, one sentence per line) with the
    // options of llama2.c's `tinystories.py train_vocab`: byte fallback, digits split, whitespace-only
    // pieces allowed, every character covered, no normalization, <unk> shown as " ⁇ " (what train_vocab
    // means: its raw string r" \342\201\207 " reaches the library unescaped). The library
    // reserves 259 ids (<unk>, <s>, </s>, the 256 bytes) and needs the text to hold at least the rest
    // as pieces: value_error naming `name` otherwise. Deterministic: the same text gives the same model.
    static std::shared_ptr<const SentencePieceModel> train(std::string_view text, std::size_t vocab_size,
                                                           const std::string& name, std::size_t threads = 1);
    ~SentencePieceModel();

    std::size_t vocab_size() const;
    std::optional<std::int64_t> bos_id() const;  // <s>, when the model has one
    std::optional<std::int64_t> eos_id() const;  // </s>
    std::string piece(std::int64_t id) const;    // as stored: "▁the", "<0x0A>", "<s>"
    float score(std::int64_t id) const;

    // The ids of `text` (no BOS or EOS); value_error naming `what` for text that is not UTF-8.
    void encode(std::string_view text, const std::string& what, std::vector<std::int64_t>& out) const;
    // The text of `ids` as the library decodes a sequence (the leading space of the first piece
    // dropped, byte tokens joined into characters, control tokens empty).
    std::string decode(std::span<const std::int64_t> ids) const;
    // Appends token id's text alone: "▁" as a space, a byte token as its byte (possibly part of a
    // UTF-8 sequence), a control token as nothing, the unknown token as " ⁇ ". value_error for an id
    // outside the vocabulary.
    void append(std::string& out, std::int64_t id) const;

    // The tokenizer.model bytes (load() and parse() read them back).
    std::string serialized() const;
    // llama2.c's tokenizer.bin, as its tokenizer.py export writes it: the longest token's byte length
    // (uint32), then per id its score (float32), byte length (uint32) and bytes, with "▁" as a space
    // and <s>, </s> as "\n<s>\n", "\n</s>\n".
    std::string llama2c_tokenizer_bin() const;

private:
    struct Impl;
    explicit SentencePieceModel(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

}  // namespace xgrad::text
