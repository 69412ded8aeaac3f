// State dicts: a module's parameters by PyTorch dotted name, saved to and loaded from .npz.
//
//   io::save_state_dict(model, "ckpt.npz");
//   io::load_state_dict(model, "ckpt.npz");                         // exact names, shapes, dtypes
//   io::load_state_dict(model, "ckpt.npz", {.convert_dtype = true}); // float32 file into a double model
#pragma once
#include <algorithm>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "xgrad/io/npz.hpp"
#include "xgrad/nn/module.hpp"

namespace xgrad::io {

// Copies of every parameter of m, keyed by dotted name ("out_proj.weight").
template <class M>
    requires Module<M>
std::map<std::string, NpyArray> state_dict(const M& m) {
    std::map<std::string, NpyArray> out;
    for_each_parameter(m, [&](const std::string& name, const auto& var) {
        auto a = NpyArray::from(var.value());
        a.source = name;
        out.emplace(name, std::move(a));
    });
    return out;
}

template <class M>
    requires Module<M>
void save_state_dict(const M& m, const std::filesystem::path& path, bool compress = false) {
    write_npz(path, state_dict(m), compress);
}

// A training checkpoint (io/checkpoint.hpp) is a state dict plus entries under this prefix, which
// no parameter name can start with; loading a state dict from a file skips them.
inline constexpr std::string_view train_state_prefix = "train_state/";
inline bool is_train_state_key(const std::string& key) { return key.starts_with(train_state_prefix); }

struct LoadStateDictOptions {
    bool convert_dtype = false;  // accept float32 arrays for double parameters and vice versa
};

// Checks that `arrays` fits m: every parameter present with its exact shape and dtype and no key
// left over; otherwise one io_error (prefixed by `source`) lists every missing key, unexpected key
// and mismatch.
template <class M>
    requires Module<M>
void check_state_dict(const M& m, const std::map<std::string, NpyArray>& arrays, LoadStateDictOptions opts = {},
                      const std::string& source = "state dict") {
    std::vector<std::string> missing, mismatched, seen;
    for_each_parameter(m, [&](const std::string& name, const auto& var) {
        using T = typename std::remove_cvref_t<decltype(var)>::value_type;
        const auto it = arrays.find(name);
        if (it == arrays.end()) return missing.push_back(name);
        seen.push_back(name);
        const NpyArray& a = it->second;
        const bool same_shape = std::equal(a.shape.begin(), a.shape.end(), var.shape().begin(), var.shape().end());
        if (!same_shape)
            mismatched.push_back(name + " has shape " + shape_str(a.shape) + ", the model expects " +
                                 shape_str(var.shape()));
        else if (a.dtype != dtype_of<T>() && !(opts.convert_dtype && a.is_float()))
            mismatched.push_back(name + " has dtype " + std::string(dtype_name(a.dtype)) + ", the model expects " +
                                 dtype_name(dtype_of<T>()) + (a.is_float() ? " (set convert_dtype to convert)" : ""));
    });
    std::vector<std::string> unexpected;
    for (const auto& [key, a] : arrays)
        if (std::find(seen.begin(), seen.end(), key) == seen.end()) unexpected.push_back(key);
    if (missing.empty() && unexpected.empty() && mismatched.empty()) return;
    auto join = [](const std::vector<std::string>& v) {
        std::string s;
        for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
        return s;
    };
    std::string msg = source + ": cannot load the state dict:";
    if (!missing.empty()) msg += " missing keys: " + join(missing) + ";";
    if (!unexpected.empty()) msg += " unexpected keys: " + join(unexpected) + ";";
    if (!mismatched.empty()) msg += " " + join(mismatched) + ";";
    msg.pop_back();
    throw io_error(msg);
}

// Copies every parameter of m from `arrays` in place (storage is kept, so optimizers stay valid)
// after check_state_dict: on any problem m is unchanged.
template <class M>
    requires Module<M>
void load_state_dict(M& m, const std::map<std::string, NpyArray>& arrays, LoadStateDictOptions opts = {},
                     const std::string& source = "state dict") {
    check_state_dict(m, arrays, opts, source);
    for_each_parameter(m, [&](const std::string& name, auto& var) {
        using T = typename std::remove_cvref_t<decltype(var)>::value_type;
        arrays.at(name).copy_to<T>(var.value().data(), opts.convert_dtype);
    });
}

template <class M>
    requires Module<M>
void load_state_dict(M& m, const std::filesystem::path& path, LoadStateDictOptions opts = {}) {
    auto arrays = read_npz(path);
    std::erase_if(arrays, [](const auto& entry) { return is_train_state_key(entry.first); });
    load_state_dict(m, arrays, opts, path.string());
}

}  // namespace xgrad::io
