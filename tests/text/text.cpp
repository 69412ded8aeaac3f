// Tokenizers and corpus windows (xgrad/text/): nanoGPT's character ids, UTF-8 handling, the
// train/val split and get_batch's windows, a mapped file.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "xgrad/text/corpus.hpp"
#include "xgrad/text/tokenizer.hpp"

namespace test_text {

using namespace xgrad;
using text::Tokenizer;

TEST_CASE("character tokenizer: sorted distinct code points (nanoGPT's sorted(set(text))), round trip") {
    const std::string s = "héllo wörld\n€";
    const auto tok = Tokenizer::characters(s);
    // sorted by code point: '\n' ' ' d h l o r w é ö €
    const std::vector<char32_t> want{U'\n', U' ', U'd', U'h', U'l', U'o', U'r', U'w', U'é', U'ö', U'€'};
    CHECK(tok.vocabulary() == want);
    CHECK(tok.vocab_size() == 11);
    const auto ids = tok.encode("hé€");
    CHECK(ids == std::vector<std::int64_t>{3, 8, 10});
    CHECK(tok.decode(ids) == "hé€");
    CHECK(tok.decode(tok.encode(s)) == s);
    CHECK_THROWS_WITH_AS(tok.encode("hox", "the prompt"),
                         doctest::Contains("the prompt: the character 'x' (U+0078) at byte 2 is not in the vocabulary"),
                         value_error);
    CHECK_THROWS_WITH_AS(Tokenizer::characters("ab\xC3("), doctest::Contains("invalid UTF-8 at byte 2"), value_error);
    CHECK_THROWS_AS(Tokenizer::characters("\xC0\xAF"), value_error);  // overlong '/'
    CHECK_THROWS_AS(tok.decode(std::vector<std::int64_t>{11}), value_error);
    const auto again = Tokenizer::from_vocabulary(tok.vocabulary());
    CHECK(again.encode(s) == tok.encode(s));
    CHECK_THROWS_AS(Tokenizer::from_vocabulary({U'b', U'a'}), value_error);
}

TEST_CASE("byte tokenizer: every byte is a token") {
    const auto tok = Tokenizer::bytes();
    CHECK(tok.vocab_size() == 256);
    const auto ids = tok.encode("é");
    CHECK(ids == std::vector<std::int64_t>{0xC3, 0xA9});
    CHECK(tok.decode(ids) == "é");
}

TEST_CASE("windows: the split at ⌊0.9·N⌋ tokens, windows inside their split, y = x shifted by one") {
    std::string s;
    for (int i = 0; i < 3000; ++i) s += (i % 7 == 0) ? "ü" : std::string(1, char('a' + i % 26));  // multi-byte chars too
    const auto corpus = text::Corpus::from_string(s, "mem");
    const auto tok = Tokenizer::characters(corpus.text());
    const text::Windows w(corpus, tok, 0.1);
    CHECK(w.tokens() == 3000);
    CHECK(w.tokens(text::Split::train) == 2700);
    CHECK(w.tokens(text::Split::val) == 300);
    const auto all = tok.encode(s);
    Generator gen(1);
    xt::xtensor<std::int64_t, 2> x, y;
    std::set<std::size_t> starts;
    for (int round = 0; round < 40; ++round) {
        for (const auto split : {text::Split::train, text::Split::val}) {
            w.batch(split, 3, 16, gen, x, y);
            REQUIRE(x.shape()[0] == 3);
            REQUIRE(x.shape()[1] == 16);
            for (std::size_t b = 0; b < 3; ++b) {
                // find where the window is in the stream: it must lie wholly inside its split
                const std::size_t lo = split == text::Split::train ? 0 : 2700, hi = split == text::Split::train ? 2700 : 3000;
                bool found = false;
                for (std::size_t i = lo; i + 17 <= hi && !found; ++i) {
                    bool same = true;
                    for (std::size_t t = 0; t < 16 && same; ++t) same = x(b, t) == all[i + t] && y(b, t) == all[i + t + 1];
                    if (same) found = true, starts.insert(i);
                }
                CHECK(found);
            }
        }
    }
    CHECK(starts.size() > 100);  // random starts, not one window
    CHECK_THROWS_WITH_AS(w.batch(text::Split::val, 1, 300, gen, x, y), doctest::Contains("the val split has 300 tokens"),
                         value_error);
}

TEST_CASE("a mapped file is read in place; a missing one is an io_error naming it") {
    const auto path = std::filesystem::temp_directory_path() / "xgrad_test_corpus.txt";
    std::ofstream(path) << "First Citizen:\nBefore we proceed any further, hear me speak.\n";
    const auto corpus = text::Corpus::map_file(path);
    CHECK(corpus.text().substr(0, 14) == "First Citizen:");
    const text::Windows w(corpus, Tokenizer::bytes(), 0.5);
    CHECK(w.tokens() == corpus.text().size());
    std::filesystem::remove(path);
    CHECK_THROWS_WITH_AS(text::Corpus::map_file(path), doctest::Contains("xgrad_test_corpus.txt: cannot open"), io_error);
}

}  // namespace test_text
