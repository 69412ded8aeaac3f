// Helpers for the io tests: a scratch directory removed at scope exit, raw file bytes, the message
// of an io_error.
#pragma once
#include <algorithm>
#include <atomic>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <unistd.h>

#include <doctest/doctest.h>

#include "xgrad/core/error.hpp"

namespace xgrad::testing {

struct ScratchDir {
    std::filesystem::path path;
    ScratchDir() {
        static std::atomic<int> counter{0};
        path = std::filesystem::temp_directory_path() /
               ("xgrad_io_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
        std::filesystem::remove_all(path);
        std::filesystem::create_directories(path);
    }
    ~ScratchDir() {
        std::error_code ec;
        std::filesystem::remove_all(path, ec);
    }
    ScratchDir(const ScratchDir&) = delete;
    ScratchDir& operator=(const ScratchDir&) = delete;

    // File names in the directory, sorted (hidden temporaries included).
    std::vector<std::string> entries() const { return entries_of(path); }
    static std::vector<std::string> entries_of(const std::filesystem::path& dir) {
        std::vector<std::string> names;
        for (const auto& e : std::filesystem::directory_iterator(dir)) names.push_back(e.path().filename().string());
        std::sort(names.begin(), names.end());
        return names;
    }
};

inline void write_bytes(const std::filesystem::path& p, const std::string& bytes) {
    std::ofstream(p, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
}

inline std::string read_bytes(const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
}

// The error message of f(), which must throw io_error.
template <class F>
std::string io_error_of(F f) {
    try {
        f();
    } catch (const io_error& e) {
        return e.what();
    } catch (const std::exception& e) {
        FAIL("threw something other than io_error: " << e.what());
        return "";
    }
    FAIL("did not throw");
    return "";
}

}  // namespace xgrad::testing
