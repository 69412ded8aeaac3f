// Text to train a language model on, and nanoGPT's random windows of it:
//
//   auto corpus = text::Corpus::map_file("input.txt");        // mapped, not read: any size
//   auto tok = text::Tokenizer::characters(corpus.text(), corpus.name());
//   text::Windows windows(corpus, tok, 0.1);                   // the last 10 % is the val split
//   windows.batch(text::Split::train, gen, x, y);             // x, y (B, T): y is x shifted by one
//
// Positions are tokens (characters or bytes), as nanoGPT's data/*/prepare.py counts them: train is
// the first ⌊N·(1 − val_fraction)⌋ tokens, val the rest; a window starts at a uniform position of
// its split with block_size + 1 tokens inside it (nanoGPT's get_batch). A sparse index (one byte
// offset per 1024 tokens) finds a position without holding the token stream in memory; a BPE
// or SentencePiece tokenizer, which encodes whole texts, has the text encoded once and its ids kept.
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <xtensor/xtensor.hpp>

#include "xgrad/core/random.hpp"
#include "xgrad/io/file.hpp"
#include "xgrad/text/tokenizer.hpp"

namespace xgrad::text {

class Corpus {
public:
    // The file mapped read-only: pages are read as windows touch them.
    static Corpus map_file(const std::filesystem::path& path) {
        Corpus c;
        c.name_ = path.string();
        auto mapped = std::make_shared<io::MappedFile>(io::MappedFile::open(path));
        c.view_ = std::string_view(reinterpret_cast<const char*>(mapped->bytes().data()), mapped->bytes().size());
        c.mapping_ = std::move(mapped);
        return c;
    }
    // Text held in memory, named `name` in errors.
    static Corpus from_string(std::string text, std::string name) {
        Corpus c;
        c.name_ = std::move(name);
        auto owned = std::make_shared<std::string>(std::move(text));
        c.view_ = *owned;
        c.mapping_ = owned;
        return c;
    }

    std::string_view text() const { return view_; }
    const std::string& name() const { return name_; }

private:
    std::shared_ptr<const void> mapping_;  // keeps the mapping or the string alive (copies share it)
    std::string_view view_;
    std::string name_;
};

enum class Split { train, val };

class Windows {
public:
    static constexpr std::size_t index_stride = 1024;  // tokens per index entry

    // Tokenizes nothing up front: one pass counts the tokens (and checks every one is in the
    // vocabulary) and records the index.
    Windows(const Corpus& corpus, const Tokenizer& tokenizer, double val_fraction = 0.1)
        : corpus_(corpus), tok_(tokenizer) {
        if (!(val_fraction >= 0 && val_fraction < 1))
            throw value_error("Windows: val_fraction must be in [0, 1), got " + std::to_string(val_fraction));
        const std::string_view s = corpus_.text();
        std::size_t n = 0;
        if (tok_.encodes_whole_texts()) {  // BPE and SentencePiece: the ids of the whole text are kept
            ids_ = tok_.encode(s, corpus_.name());
            n = ids_.size();
        }
        for (std::size_t at = 0; ids_.empty() && at < s.size(); ++n) {
            if (n % index_stride == 0) index_.push_back(at);
            at += tok_.next(s, at, corpus_.name()).second;
        }
        tokens_ = n;
        train_tokens_ = std::size_t(double(n) * (1 - val_fraction));
    }

    std::size_t tokens() const { return tokens_; }
    std::size_t tokens(Split split) const { return split == Split::train ? train_tokens_ : tokens_ - train_tokens_; }
    const Corpus& corpus() const { return corpus_; }
    const Tokenizer& tokenizer() const { return tok_; }

    // x (B, T) and y (B, T) = tokens [i, i + T) and [i + 1, i + T + 1) of the split for B uniform
    // starts i in [0, split length − T); x and y are resized only when their shape changes.
    void batch(Split split, std::size_t batch_size, std::size_t block_size, Generator& gen,
               xt::xtensor<std::int64_t, 2>& x, xt::xtensor<std::int64_t, 2>& y) const {
        const std::size_t first = split == Split::train ? 0 : train_tokens_, length = tokens(split);
        if (length <= block_size)
            throw value_error(corpus_.name() + ": the " + (split == Split::train ? "train" : "val") + " split has " +
                              std::to_string(length) + " tokens, a window needs block_size + 1 = " +
                              std::to_string(block_size + 1));
        if (x.shape()[0] != batch_size || x.shape()[1] != block_size) x.resize({batch_size, block_size});
        if (y.shape()[0] != batch_size || y.shape()[1] != block_size) y.resize({batch_size, block_size});
        for (std::size_t b = 0; b < batch_size; ++b) {
            const std::size_t start = first + std::size_t(gen.uniform() * double(length - block_size));
            read(start, block_size + 1, [&](std::size_t t, std::int64_t id) {
                if (t < block_size) x(b, t) = id;
                if (t > 0) y(b, t - 1) = id;
            });
        }
    }
    // The tokens [start, start + count) of the whole stream, to f(k, id).
    template <class F>
    void read(std::size_t start, std::size_t count, F&& f) const {
        if (!ids_.empty()) {
            for (std::size_t k = 0; k < count; ++k) f(k, ids_.at(start + k));
            return;
        }
        const std::string_view s = corpus_.text();
        std::size_t at = index_[start / index_stride];
        for (std::size_t skip = start % index_stride; skip > 0; --skip) at += tok_.next(s, at, corpus_.name()).second;
        for (std::size_t k = 0; k < count; ++k) {
            const auto [id, length] = tok_.next(s, at, corpus_.name());
            f(k, id);
            at += length;
        }
    }

private:
    Corpus corpus_;
    Tokenizer tok_;
    std::vector<std::size_t> index_;  // byte offset of token k·index_stride
    std::vector<std::int64_t> ids_;   // a BPE or SentencePiece tokenizer's ids of the whole text
    std::size_t tokens_ = 0, train_tokens_ = 0;
};

}  // namespace xgrad::text
