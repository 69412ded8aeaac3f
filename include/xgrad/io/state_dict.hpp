// State dicts: a module's parameters by PyTorch dotted name, saved to and loaded from .npz or
// .safetensors (by the file's extension: .safetensors is safetensors.hpp's format, any other npz).
//
//   io::save_state_dict(model, "ckpt.npz");                          // every name, tied ones too
//   io::save_state_dict(model, "model.safetensors");                 // the same, as safetensors
//   io::load_state_dict(model, "ckpt.npz");                          // strict: exact names, shapes, dtypes
//   io::load_state_dict(model, "ckpt.npz", {.convert_dtype = true}); // float32 file into a double model
//   io::load_state_dict(encoder, "detr.npz", {.strict = false, .prefix = "transformer.encoder."});
//   auto r = io::load_state_dict(model, "ckpt.npz", {.strict = false});  // r.missing_keys, r.unexpected_keys
//   io::load_state_dict(model, "port.npz", {.rename = [](const std::string& key) {   // the file's names
//       return key == "enc.ln.gamma" ? std::string("encoder.norm.weight") : key; }});   // are not the model's
//
// A tied tensor (two names, one tensor: nn/module.hpp) is loaded once; a file that gives its names
// different values is refused, naming both. Shape and dtype mismatches are errors in every mode.
#pragma once
#include <algorithm>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "xgrad/io/npz.hpp"
#include "xgrad/io/safetensors.hpp"
#include "xgrad/nn/module.hpp"

namespace xgrad::io {

// The arrays of a file of named tensors: safetensors for a .safetensors extension, npz otherwise.
inline bool is_safetensors_path(const std::filesystem::path& path) { return path.extension() == ".safetensors"; }
inline std::map<std::string, NpyArray> read_arrays(const std::filesystem::path& path) {
    return is_safetensors_path(path) ? read_safetensors(path) : read_npz(path);
}
// Written atomically in the format of the extension (`compress` deflates npz entries only).
inline void write_arrays(const std::filesystem::path& path, const std::map<std::string, NpyArray>& arrays,
                         bool compress = false) {
    if (is_safetensors_path(path)) write_safetensors(path, arrays);
    else write_npz(path, arrays, compress);
}

// Copies of every parameter of m, keyed by dotted name ("out_proj.weight"); a tied tensor under
// each of its names, as PyTorch's state_dict().
template <class M>
    requires Module<M>
std::map<std::string, NpyArray> state_dict(const M& m) {
    std::map<std::string, NpyArray> out;
    for_each_parameter_name(m, [&](const std::string& name, const auto& var) {
        auto a = NpyArray::from(var.value());
        a.source = name;
        out.emplace(name, std::move(a));
    });
    return out;
}

template <class M>
    requires Module<M>
void save_state_dict(const M& m, const std::filesystem::path& path, bool compress = false) {
    write_arrays(path, state_dict(m), compress);
}

// A training checkpoint (io/checkpoint.hpp) is a state dict plus entries under this prefix, which
// no parameter name can start with; loading a state dict from a file skips them.
inline constexpr std::string_view train_state_prefix = "train_state/";
inline bool is_train_state_key(const std::string& key) { return key.starts_with(train_state_prefix); }

struct LoadStateDictOptions {
    bool convert_dtype = false;  // accept float32 arrays for double parameters and vice versa
    // false: a parameter the file lacks keeps its value and a key the model lacks is ignored; both
    // are returned (LoadResult). Shape and dtype mismatches are errors either way.
    bool strict = true;
    // Load only the keys starting with it, with it removed: "transformer." loads a DETR checkpoint's
    // transformer.* into a Transformer model; other keys are neither loaded nor unexpected.
    std::string prefix = "";
    // Applied to every key (after the prefix is removed): the model's name for it, or "" to skip the
    // key. For files whose names are not the module's (a port keeps its own names); missing and
    // unexpected keys are reported under the model's names. Two keys renamed to one name is an error.
    std::function<std::string(const std::string&)> rename{};
};

// What a load left out (PyTorch's missing_keys / unexpected_keys); both empty after a strict load.
struct LoadResult {
    std::vector<std::string> missing_keys, unexpected_keys;
};

namespace detail {
inline std::string join_names(const std::vector<std::string>& v) {
    std::string s;
    for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
    return s;
}
// The entries under opts.prefix, with it removed (all of them when it is empty), under the names
// opts.rename gives them (skipped when it gives "").
inline std::map<std::string, NpyArray> for_model(const std::map<std::string, NpyArray>& arrays,
                                                 const LoadStateDictOptions& opts, const std::string& source) {
    if (opts.prefix.empty() && !opts.rename) return arrays;
    std::map<std::string, NpyArray> out;
    std::map<std::string, std::string> renamed_from;
    for (const auto& [key, a] : arrays) {
        if (!key.starts_with(opts.prefix) || key.size() == opts.prefix.size()) continue;
        std::string name = key.substr(opts.prefix.size());
        if (opts.rename) name = opts.rename(name);
        if (name.empty()) continue;
        if (const auto [it, fresh] = renamed_from.emplace(name, key); !fresh)
            throw io_error(source + ": cannot load the state dict: rename gives " + it->second + " and " + key +
                           " one name, " + name);
        out.emplace(name, a);
    }
    return out;
}
}  // namespace detail

// Checks that `arrays` (under opts.prefix) fits m: every name's shape and dtype, the values of tied
// names equal, and when strict no name missing and no key left over. On a problem, one io_error
// (prefixed by `source`) lists them all; otherwise returns the missing and unexpected names.
template <class M>
    requires Module<M>
LoadResult check_state_dict(const M& m, const std::map<std::string, NpyArray>& all_arrays,
                            const LoadStateDictOptions& opts = {}, const std::string& source = "state dict") {
    const auto arrays = detail::for_model(all_arrays, opts, source);
    LoadResult result;
    std::vector<std::string> mismatched, seen;
    std::vector<std::pair<const Node*, std::string>> first_name;  // tensor -> its first name in the file
    for_each_parameter_name(m, [&](const std::string& name, const auto& var) {
        using T = typename std::remove_cvref_t<decltype(var)>::value_type;
        const auto it = arrays.find(name);
        if (it == arrays.end()) return result.missing_keys.push_back(name);
        seen.push_back(name);
        const NpyArray& a = it->second;
        const bool same_shape = std::equal(a.shape.begin(), a.shape.end(), var.shape().begin(), var.shape().end());
        if (!same_shape)
            return mismatched.push_back(name + " has shape " + shape_str(a.shape) + ", the model expects " +
                                        shape_str(var.shape()));
        if (a.dtype != dtype_of<T>() && !(opts.convert_dtype && a.is_float()))
            return mismatched.push_back(name + " has dtype " + std::string(dtype_name(a.dtype)) +
                                        ", the model expects " + dtype_name(dtype_of<T>()) +
                                        (a.is_float() ? " (set convert_dtype to convert)" : ""));
        const auto tied = std::find_if(first_name.begin(), first_name.end(), [&](const auto& e) { return e.first == var.node(); });
        if (tied == first_name.end()) return void(first_name.emplace_back(var.node(), name));
        std::vector<T> mine(var.size()), theirs(var.size());  // compared as the model would hold them
        a.template copy_to<T>(mine.data(), opts.convert_dtype);
        arrays.at(tied->second).template copy_to<T>(theirs.data(), opts.convert_dtype);
        if (mine != theirs)
            mismatched.push_back(tied->second + " and " + name +
                                 " are one tensor in the model (tied) but have different values in the file"
                                 " (a copied module? nn::clone / nn::clones make independent ones)");
    });
    for (const auto& [key, a] : arrays)
        if (std::find(seen.begin(), seen.end(), key) == seen.end()) result.unexpected_keys.push_back(key);
    const bool strict_problem = opts.strict && (!result.missing_keys.empty() || !result.unexpected_keys.empty());
    if (!strict_problem && mismatched.empty()) return result;
    std::string msg = source + ": cannot load the state dict" + (opts.prefix.empty() ? "" : " under " + opts.prefix) + ":";
    if (opts.strict && !result.missing_keys.empty()) msg += " missing keys: " + detail::join_names(result.missing_keys) + ";";
    if (opts.strict && !result.unexpected_keys.empty())
        msg += " unexpected keys: " + detail::join_names(result.unexpected_keys) + ";";
    if (!mismatched.empty()) msg += " " + detail::join_names(mismatched) + ";";
    msg.pop_back();
    throw io_error(msg);
}

// Copies every parameter of m found in `arrays` in place (storage is kept, so optimizers stay
// valid) after check_state_dict: on any problem m is unchanged.
template <class M>
    requires Module<M>
LoadResult load_state_dict(M& m, const std::map<std::string, NpyArray>& arrays, const LoadStateDictOptions& opts = {},
                           const std::string& source = "state dict") {
    LoadResult result = check_state_dict(m, arrays, opts, source);
    const auto named = detail::for_model(arrays, opts, source);
    std::vector<const Node*> loaded;  // a tied tensor: from the first of its names the file has
    for_each_parameter_name(m, [&](const std::string& name, auto& var) {
        using T = typename std::remove_cvref_t<decltype(var)>::value_type;
        const auto it = named.find(name);
        if (it == named.end() || std::find(loaded.begin(), loaded.end(), var.node()) != loaded.end()) return;
        it->second.template copy_to<T>(var.value().data(), opts.convert_dtype);
        loaded.push_back(var.node());
    });
    return result;
}

template <class M>
    requires Module<M>
LoadResult load_state_dict(M& m, const std::filesystem::path& path, const LoadStateDictOptions& opts = {}) {
    auto arrays = read_arrays(path);
    std::erase_if(arrays, [](const auto& entry) { return is_train_state_key(entry.first); });
    return load_state_dict(m, arrays, opts, path.string());
}

}  // namespace xgrad::io
