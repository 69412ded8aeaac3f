// io::StagingDir: a folder's files appear all at once at commit(), into a new folder or an existing
// one; without commit() nothing is left behind; bad targets are io_errors naming the path.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "io_test_util.hpp"
#include "xgrad/io/file.hpp"

// Each test file in a namespace of its own: unity builds (scripts/sanitize) compile several in one unit.
namespace test_io_staging_dir {

using namespace xgrad;
using xgrad::testing::ScratchDir;
using xgrad::testing::read_bytes;
using xgrad::testing::write_bytes;
namespace fs = std::filesystem;

namespace {

std::string thrown_by(void (*f)(const fs::path&), const fs::path& p) {
    try {
        f(p);
    } catch (const io_error& e) {
        return e.what();
    }
    return "no io_error";
}

}  // namespace

TEST_CASE("staging dir: files appear in a new folder at commit, not before") {
    ScratchDir dir;
    const fs::path out = dir.path / "out";
    {
        io::StagingDir stage(out);
        write_bytes(stage.file("a.txt"), "alpha");
        write_bytes(stage.file("b.txt"), "beta");
        CHECK_FALSE(fs::exists(out));
        REQUIRE(dir.entries().size() == 1);                    // the hidden staging folder only
        CHECK(dir.entries()[0].rfind(".out.tmp-", 0) == 0);
        stage.commit();
    }
    CHECK(dir.entries() == std::vector<std::string>{"out"});
    CHECK(ScratchDir::entries_of(out) == std::vector<std::string>{"a.txt", "b.txt"});
    CHECK(read_bytes(out / "b.txt") == "beta");
}

TEST_CASE("staging dir: into an existing folder, files of the same name are replaced, others kept") {
    ScratchDir dir;
    const fs::path out = dir.path / "out";
    fs::create_directory(out);
    write_bytes(out / "a.txt", "old");
    write_bytes(out / "keep.txt", "kept");
    io::StagingDir stage(dir.path / "out/");  // a trailing slash names the same folder
    CHECK(stage.target() == out);
    write_bytes(stage.file("a.txt"), "new");
    CHECK(read_bytes(out / "a.txt") == "old");
    stage.commit();
    CHECK(ScratchDir::entries_of(out) == std::vector<std::string>{"a.txt", "keep.txt"});
    CHECK(read_bytes(out / "a.txt") == "new");
    CHECK(read_bytes(out / "keep.txt") == "kept");
    CHECK(dir.entries() == std::vector<std::string>{"out"});  // the staging folder is gone
}

TEST_CASE("staging dir: without commit nothing is left, an existing folder is unchanged") {
    ScratchDir dir;
    {
        io::StagingDir stage(dir.path / "new");
        write_bytes(stage.file("a.txt"), "alpha");
    }
    CHECK(dir.entries().empty());
    fs::create_directory(dir.path / "old");
    write_bytes(dir.path / "old" / "a.txt", "old");
    {
        io::StagingDir stage(dir.path / "old");
        write_bytes(stage.file("a.txt"), "new");
    }
    CHECK(dir.entries() == std::vector<std::string>{"old"});
    CHECK(read_bytes(dir.path / "old" / "a.txt") == "old");
}

TEST_CASE("staging dir: two stages of one target in one process do not share a folder") {
    ScratchDir dir;
    io::StagingDir first(dir.path / "out"), second(dir.path / "out");
    CHECK(first.file("x") != second.file("x"));
    CHECK(dir.entries().size() == 2);
}

TEST_CASE("staging dir: a missing parent or a file in the way is an io_error naming the path") {
    ScratchDir dir;
    write_bytes(dir.path / "file", "x");
    const auto check_target = [](const fs::path& p) { io::StagingDir::check_target(p); };
    const auto construct = [](const fs::path& p) { io::StagingDir stage(p); };
    for (auto* f : {+check_target, +construct}) {
        CHECK(thrown_by(f, dir.path / "missing" / "out") ==
              (dir.path / "missing" / "out").string() + ": the parent directory does not exist");
        CHECK(thrown_by(f, dir.path / "file") == (dir.path / "file").string() + ": exists and is not a directory");
        CHECK(thrown_by(f, dir.path / "out") == "no io_error");
    }
    CHECK(dir.entries() == std::vector<std::string>{"file"});
    CHECK(thrown_by([](const fs::path& p) { io::require_parent_dir(p); }, dir.path / "missing" / "a.dot") ==
          (dir.path / "missing" / "a.dot").string() + ": the parent directory does not exist");
}

}  // namespace test_io_staging_dir
