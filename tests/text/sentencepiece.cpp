// SentencePiece models (xgrad/text/sentencepiece.hpp) against llama2.c's own vocabulary training and
// tokenizer export, run as written by tests/fixtures/make_sentencepiece.py on the same library
// through Python: the model file it trained, its pieces and scores, sp.encode / sp.decode of fixed
// strings and of the whole training text, and tokenizer.py's tokenizer.bin.
#include <doctest/doctest.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../io/io_test_util.hpp"
#include "xgrad/text/corpus.hpp"
#include "xgrad/text/tokenizer.hpp"

namespace test_text_sentencepiece {

using namespace xgrad;
using text::SentencePieceModel;
using text::Tokenizer;
using xgrad::testing::read_bytes;
using xgrad::testing::ScratchDir;
using xgrad::testing::write_bytes;
namespace fs = std::filesystem;

namespace {

const fs::path fixtures = fs::path(XGRAD_FIXTURES) / "sentencepiece";

nlohmann::json read_json(const std::string& name) { return nlohmann::json::parse(read_bytes(fixtures / name)); }

// The model's pieces and scores against pieces.json ([piece, score] per id).
void check_pieces(const SentencePieceModel& model) {
    const auto pieces = read_json("pieces.json");
    REQUIRE(model.vocab_size() == pieces.size());
    for (std::size_t id = 0; id < pieces.size(); ++id) {
        CHECK(model.piece(std::int64_t(id)) == pieces[id][0].get<std::string>());
        CHECK(model.score(std::int64_t(id)) == pieces[id][1].get<float>());
    }
}

}  // namespace

TEST_CASE("SentencePiece: a tokenizer.model trained by llama2.c's train_vocab encodes and decodes as the library in Python") {
    const Tokenizer tok = Tokenizer::sentencepiece(fixtures / "tok512.model");
    const auto cases = read_json("cases.json");
    CHECK(tok.kind() == Tokenizer::Kind::sentencepiece);
    CHECK(tok.encodes_whole_texts());
    CHECK(tok.vocab_size() == 512);
    CHECK(tok.sentencepiece_model()->bos_id() == cases["bos_id"].get<std::int64_t>());
    CHECK(tok.sentencepiece_model()->eos_id() == cases["eos_id"].get<std::int64_t>());
    check_pieces(*tok.sentencepiece_model());
    for (const auto& c : cases["cases"]) {
        const std::string text = c["text"];
        CAPTURE(text);
        const auto ids = tok.encode(text);
        CHECK(ids == c["ids"].get<std::vector<std::int64_t>>());
        CHECK(tok.decode(ids) == c["decoded"].get<std::string>());
    }
    // the whole training text as one string, as Windows encodes a corpus
    const text::Corpus corpus = text::Corpus::map_file(fixtures / "tiny.txt");
    const text::Windows windows(corpus, tok, 0.1);
    CHECK(windows.tokens() == cases["whole_count"].get<std::size_t>());
    std::int64_t sum = 0;
    windows.read(0, windows.tokens(), [&](std::size_t, std::int64_t id) { sum += id; });
    CHECK(sum == cases["whole_sum"].get<std::int64_t>());
}

TEST_CASE("SentencePiece: one token's text, as run.c prints it") {
    const auto model = SentencePieceModel::load(fixtures / "tok512.model");
    const Tokenizer tok(model);
    std::string s;
    tok.append(s, 1);  // <s>: control tokens print nothing
    CHECK(s.empty());
    tok.append(s, 3 + '\n');  // the byte tokens follow <unk>, <s>, </s>: <0x0A>
    CHECK(model->piece(3 + '\n') == "<0x0A>");
    CHECK(s == "\n");
    tok.append(s, 3 + 0xC3), tok.append(s, 3 + 0xA9);  // two byte tokens make one character
    CHECK(s == "\n\xC3\xA9");
    const auto ids = tok.encode("Once upon");
    std::string joined;
    for (auto id : ids) tok.append(joined, id);
    CHECK(joined == " Once upon");  // "▁" is a space, the first one included (decode() drops it)
    CHECK(tok.decode(ids) == "Once upon");
    // <unk>: the model's unk_surface. train_vocab's raw string r" \342\201\207 " reaches the library
    // unescaped, so its model shows the backslashes; SentencePieceModel::train gives " ⁇ ".
    std::string unknown;
    tok.append(unknown, 0);
    CHECK(unknown == R"( \342\201\207 )");
    std::string ours;
    Tokenizer(SentencePieceModel::train(read_bytes(fixtures / "tiny.txt"), 512, "tiny.txt")).append(ours, 0);
    CHECK(ours == " \xE2\x81\x87 ");
    CHECK_THROWS_AS(tok.append(s, 512), value_error);
    CHECK_THROWS_AS(tok.append(s, -1), value_error);
    CHECK_THROWS_WITH_AS(tok.decode(std::vector<std::int64_t>{5, 600}), doctest::Contains("id 600 is outside the vocabulary of 512"),
                         value_error);
    CHECK_THROWS_AS((void)tok.next("abc", 0, "text"), value_error);
    CHECK_THROWS_AS((void)tok.contains(U'a'), value_error);
}

TEST_CASE("SentencePiece: llama2.c's tokenizer.bin, byte for byte as its tokenizer.py exports it") {
    const auto model = SentencePieceModel::load(fixtures / "tok512.model");
    CHECK(model->llama2c_tokenizer_bin() == read_bytes(fixtures / "tok512.bin"));
}

TEST_CASE("SentencePiece: the model file round trip") {
    const auto model = SentencePieceModel::load(fixtures / "tok512.model");
    CHECK(model->serialized() == read_bytes(fixtures / "tok512.model"));
    const auto again = SentencePieceModel::parse(model->serialized(), "again");
    check_pieces(*again);
}

TEST_CASE("SentencePiece: training on the text gives train_vocab's vocabulary") {
    const std::string text = read_bytes(fixtures / "tiny.txt");
    const auto cases = read_json("cases.json");
    for (std::size_t threads : {1, 2}) {
        CAPTURE(threads);
        const auto model = SentencePieceModel::train(text, 512, "tiny.txt", threads);
        check_pieces(*model);
        const Tokenizer tok(model);
        for (const auto& c : cases["cases"])
            CHECK(tok.encode(c["text"].get<std::string>()) == c["ids"].get<std::vector<std::int64_t>>());
    }
}

TEST_CASE("SentencePiece: what it refuses") {
    const ScratchDir dir;
    write_bytes(dir.path / "broken.model", "not a model proto");
    CHECK_THROWS_WITH_AS(Tokenizer::sentencepiece(dir.path / "broken.model"),
                         doctest::Contains("broken.model: not a SentencePiece model"), io_error);
    CHECK_THROWS_AS(Tokenizer::sentencepiece(dir.path / "missing.model"), io_error);
    const std::string model = read_bytes(fixtures / "tok512.model");
    write_bytes(dir.path / "truncated.model", model.substr(0, model.size() / 2));
    CHECK_THROWS_AS(Tokenizer::sentencepiece(dir.path / "truncated.model"), io_error);
    CHECK_THROWS_WITH_AS(SentencePieceModel::train("some text\n", 259, "small.txt"),
                         doctest::Contains("a vocab_size of 259 leaves no piece"), value_error);
    // a text with fewer distinct pieces than asked for
    CHECK_THROWS_WITH_AS(SentencePieceModel::train("ab ab ab\n", 400, "small.txt"),
                         doctest::Contains("SentencePiece training on small.txt with vocab_size 400 failed"), value_error);
}

}  // namespace test_text_sentencepiece
