// A task model's options as a checkpoint records them (io::CheckpointConfig: integers by name),
// read back with one-line errors (tasks/copy.hpp, tasks/sort.hpp).
#pragma once
#include <cstdint>
#include <map>
#include <string>

#include "xgrad/core/error.hpp"

namespace xgrad::tasks {

// c[key], which must be at least `lo`; otherwise a value_error naming `source` and the key, and
// asking whether it is a checkpoint of `xgrad train <task>`.
inline std::int64_t config_value(const std::map<std::string, std::int64_t>& c, const char* key, std::int64_t lo,
                                 const std::string& source, const std::string& task) {
    const auto it = c.find(key);
    if (it == c.end() || it->second < lo)
        throw value_error(source + ": the " + task + "-task config " +
                          (it == c.end() ? std::string("has no ") + key
                                         : std::string(key) + " = " + std::to_string(it->second) + " is invalid") +
                          " (is it a checkpoint of `xgrad train " + task + "`?)");
    return it->second;
}

}  // namespace xgrad::tasks
