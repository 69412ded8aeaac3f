// Training checkpoints: everything a run needs to continue bit for bit, in one file written
// atomically (a killed save leaves the previous file, never a broken one), .npz or .safetensors by
// the path's extension as state dicts (state_dict.hpp):
//
//   <parameter name>                        the model's state dict (torch names), as save_state_dict
//   train_state/step                        int64 ()   optimizer steps taken so far
//   train_state/optimizer/lr                float64 ()
//   train_state/optimizer/<param>/<buffer>  Adam/AdamW: step (int64 ()), exp_avg, exp_avg_sq
//                                           [, max_exp_avg_sq]; SGD: momentum_buffer
//   train_state/rng/<name>                  int64 (n,) a Generator's state() (the words' bits)
//   train_state/config/<key>                int64 ()   what the run was made with (sizes, flags)
//
//   auto gens = named_generators(model, "model.");   // "model.layers.0.dropout.generator", ...
//   gens.emplace_back("data", &data_gen);
//   io::save_checkpoint("ckpt.npz", model, adam, step, gens, {{"heads", 4}});
//   step = io::load_checkpoint("ckpt.npz", model, adam, gens);      // or "ckpt.safetensors" both times
//   auto config = io::read_checkpoint_config("ckpt.npz");   // {{"heads", 4}}: build the model first
//
// load_state_dict and numpy see the parameters (the train_state/ entries are skipped there).
// load_checkpoint checks everything first and changes nothing unless all of it fits: one io_error
// names the file and every missing, unexpected, mismatched or non-finite entry.
#pragma once
#include <bit>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <xtensor/xadapt.hpp>

#include "xgrad/core/random.hpp"
#include "xgrad/io/state_dict.hpp"
#include "xgrad/optim/adam.hpp"
#include "xgrad/optim/sgd.hpp"

namespace xgrad::io {

// The generators a checkpoint saves and restores, by name: a model's own from named_generators(model)
// (nn/module.hpp: every Dropout's and attention's), plus any the loop keeps (the data's).
using xgrad::NamedGenerators;
// Integers describing the run (model sizes, flags as 0/1), saved so that a tool can rebuild the model.
using CheckpointConfig = std::map<std::string, std::int64_t>;

namespace detail {

inline const std::string optimizer_prefix = std::string(train_state_prefix) + "optimizer/";
inline const std::string rng_prefix = std::string(train_state_prefix) + "rng/";
inline const std::string config_prefix = std::string(train_state_prefix) + "config/";

template <class V>
NpyArray scalar_array(V v) {
    NpyArray a;
    a.dtype = dtype_of<V>();
    a.bytes.resize(sizeof(V));
    std::memcpy(a.bytes.data(), &v, sizeof(V));
    return a;
}

// Reads entries out of a checkpoint's arrays; every problem is collected, not thrown, so one
// message can list them all.
class EntryReader {
public:
    explicit EntryReader(const std::map<std::string, NpyArray>& arrays) : arrays_(arrays) {}

    const NpyArray* find(const std::string& key) {
        const auto it = arrays_.find(key);
        if (it == arrays_.end()) return nullptr;
        used_.insert(key);
        return &it->second;
    }
    const NpyArray* need(const std::string& key) {
        const NpyArray* a = find(key);
        if (!a) problems.push_back("missing " + key);
        return a;
    }
    // A () array of V, or nullopt (with a problem recorded).
    template <class V>
    std::optional<V> scalar(const std::string& key) {
        const NpyArray* a = need(key);
        if (!a) return std::nullopt;
        if (!a->shape.empty() || a->dtype != dtype_of<V>()) {
            problems.push_back(key + " must be a () " + dtype_name(dtype_of<V>()) + " array, got " +
                               dtype_name(a->dtype) + " " + shape_str(a->shape));
            return std::nullopt;
        }
        V v;
        a->copy_to<V>(&v);
        return v;
    }
    // An array of T shaped `shape`, or nullopt (with a problem recorded).
    template <class T>
    std::optional<xt::xarray<T>> buffer(const std::string& key, const std::vector<std::size_t>& shape,
                                        bool required = true) {
        const NpyArray* a = required ? need(key) : find(key);
        if (!a) return std::nullopt;
        if (a->shape != shape || a->dtype != dtype_of<T>()) {
            problems.push_back(key + " is " + dtype_name(a->dtype) + " " + shape_str(a->shape) + ", expected " +
                               dtype_name(dtype_of<T>()) + " " + shape_str(shape));
            return std::nullopt;
        }
        if (const auto bad = a->first_nonfinite()) problems.push_back(key + ": " + *bad);
        return a->as_xarray<T>();
    }
    // Keys under `prefix` that nothing asked for.
    void report_unused(const std::string& prefix) {
        for (const auto& [key, a] : arrays_)
            if (key.compare(0, prefix.size(), prefix) == 0 && !used_.count(key)) problems.push_back("unexpected " + key);
    }
    // Parameter names that have entries under optimizer_prefix.
    std::set<std::string> optimizer_parameters() const {
        std::set<std::string> names;
        for (const auto& [key, a] : arrays_) {
            if (key.compare(0, optimizer_prefix.size(), optimizer_prefix) != 0) continue;
            const auto slash = key.rfind('/');
            if (slash > optimizer_prefix.size()) names.insert(key.substr(optimizer_prefix.size(), slash - optimizer_prefix.size()));
        }
        return names;
    }

    std::vector<std::string> problems;

private:
    const std::map<std::string, NpyArray>& arrays_;
    std::set<std::string> used_;
};

// ---- per-optimizer state <-> entries: one pair of overloads per state type ----
template <Real T>
void put_state(std::map<std::string, NpyArray>& out, const std::string& at, const optim::AdamState<T>& s) {
    out.emplace(at + "step", scalar_array(s.step));
    out.emplace(at + "exp_avg", NpyArray::from(s.exp_avg));
    out.emplace(at + "exp_avg_sq", NpyArray::from(s.exp_avg_sq));
    if (s.max_exp_avg_sq) out.emplace(at + "max_exp_avg_sq", NpyArray::from(*s.max_exp_avg_sq));
}
template <Real T>
optim::AdamState<T> get_state(EntryReader& r, const std::string& at, const std::vector<std::size_t>& shape,
                              const optim::AdamState<T>*) {
    optim::AdamState<T> s;
    s.step = r.scalar<std::int64_t>(at + "step").value_or(0);
    if (s.step < 0) r.problems.push_back(at + "step is negative");
    s.exp_avg = r.buffer<T>(at + "exp_avg", shape).value_or(xt::xarray<T>());
    s.exp_avg_sq = r.buffer<T>(at + "exp_avg_sq", shape).value_or(xt::xarray<T>());
    s.max_exp_avg_sq = r.buffer<T>(at + "max_exp_avg_sq", shape, false);
    return s;
}
template <Real T>
void put_state(std::map<std::string, NpyArray>& out, const std::string& at, const optim::SGDState<T>& s) {
    if (s.momentum_buffer) out.emplace(at + "momentum_buffer", NpyArray::from(*s.momentum_buffer));
}
template <Real T>
optim::SGDState<T> get_state(EntryReader& r, const std::string& at, const std::vector<std::size_t>& shape,
                             const optim::SGDState<T>*) {
    return {r.buffer<T>(at + "momentum_buffer", shape, false)};
}

}  // namespace detail

// Saves model parameters, optimizer state, generators and the step count to `path` (atomic).
template <class M, class Opt>
    requires Module<M>
void save_checkpoint(const std::filesystem::path& path, const M& model, const Opt& optimizer, std::int64_t step,
                     const NamedGenerators& generators = {}, const CheckpointConfig& config = {},
                     bool compress = false) {
    auto arrays = state_dict(model);
    arrays.emplace(std::string(train_state_prefix) + "step", detail::scalar_array(step));
    arrays.emplace(detail::optimizer_prefix + "lr", detail::scalar_array(optimizer.lr()));
    for (const auto& [pname, s] : optimizer.state()) detail::put_state(arrays, detail::optimizer_prefix + pname + "/", s);
    for (const auto& [name, gen] : generators) {
        std::vector<std::int64_t> words;
        for (std::uint64_t w : gen->state()) words.push_back(std::bit_cast<std::int64_t>(w));
        arrays.emplace(detail::rng_prefix + name, NpyArray::from(xt::adapt(words, {words.size()})));
    }
    for (const auto& [key, value] : config) arrays.emplace(detail::config_prefix + key, detail::scalar_array(value));
    write_arrays(path, arrays, compress);
}

// A state dict with a config (as save_checkpoint stores it) and no training state: a model a tool
// rebuilds from read_checkpoint_config, which numpy and load_state_dict read as a state dict.
template <class M>
    requires Module<M>
void save_model_with_config(const std::filesystem::path& path, const M& model, const CheckpointConfig& config) {
    auto arrays = state_dict(model);
    for (const auto& [key, value] : config) arrays.emplace(detail::config_prefix + key, detail::scalar_array(value));
    write_arrays(path, arrays);
}

// The config save_checkpoint stored (empty if none); io_error naming the file and the entry if one
// is not an int64 scalar.
inline CheckpointConfig read_checkpoint_config(const std::filesystem::path& path) {
    CheckpointConfig config;
    for (const auto& [key, a] : read_arrays(path)) {
        if (key.compare(0, detail::config_prefix.size(), detail::config_prefix) != 0) continue;
        if (a.dtype != Dtype::int64 || !a.shape.empty())
            throw io_error(a.source + ": a checkpoint config entry must be a () int64 array, got " + dtype_name(a.dtype) +
                           " " + shape_str(a.shape));
        a.copy_to<std::int64_t>(&config[key.substr(detail::config_prefix.size())]);
    }
    return config;
}

// Restores what save_checkpoint wrote into model, optimizer and generators; returns the step.
// All or nothing: on any problem one io_error lists them all and nothing is changed.
template <class M, class Opt>
    requires Module<M>
std::int64_t load_checkpoint(const std::filesystem::path& path, M& model, Opt& optimizer,
                             const NamedGenerators& generators = {}) {
    const std::string file = path.string();
    const auto arrays = read_arrays(path);
    detail::EntryReader r(arrays);
    const auto step = r.scalar<std::int64_t>(std::string(train_state_prefix) + "step");
    if (step && *step < 0) r.problems.push_back(std::string(train_state_prefix) + "step is negative");
    const auto lr = r.scalar<double>(detail::optimizer_prefix + "lr");
    if (lr && !(*lr >= 0)) r.problems.push_back(detail::optimizer_prefix + "lr must be >= 0");

    using State = std::remove_cvref_t<decltype(optimizer.state())>;
    State state;
    const auto known = r.optimizer_parameters();
    for (const auto& p : optimizer.parameters()) {
        if (!known.count(p.name)) continue;  // never stepped: no state, as in torch
        const auto* tag = static_cast<const typename State::mapped_type*>(nullptr);
        state.emplace(p.name, detail::get_state(r, detail::optimizer_prefix + p.name + "/", p.shape, tag));
    }
    std::vector<std::vector<std::uint64_t>> rng_states;
    for (const auto& [name, gen] : generators) {
        const NpyArray* a = r.need(detail::rng_prefix + name);
        const std::size_t expected = gen->state().size();
        if (!a) continue;
        if (a->dtype != Dtype::int64 || a->shape != std::vector<std::size_t>{expected}) {
            r.problems.push_back(detail::rng_prefix + name + " is " + dtype_name(a->dtype) + " " +
                                 shape_str(a->shape) + ", expected int64 (" + std::to_string(expected) + ",)");
            continue;
        }
        std::vector<std::int64_t> words(expected);
        a->copy_to<std::int64_t>(words.data());
        auto& out = rng_states.emplace_back();
        for (std::int64_t w : words) out.push_back(std::bit_cast<std::uint64_t>(w));
    }
    for (const auto& [key, a] : arrays)  // the config is read by read_checkpoint_config, not restored
        if (key.compare(0, detail::config_prefix.size(), detail::config_prefix) == 0) r.find(key);
    r.report_unused(std::string(train_state_prefix));

    // The parameters: the same checks as load_state_dict, before anything is written.
    std::map<std::string, NpyArray> parameters;
    for (const auto& [key, a] : arrays)
        if (!is_train_state_key(key)) parameters.emplace(key, a);
    try {
        check_state_dict(model, parameters, {});
    } catch (const io_error& e) {
        r.problems.push_back(e.what());
    }
    // A diverged run's NaN would only come back as a NaN loss: refuse it here, by name.
    for (const auto& [key, a] : parameters)
        if (const auto bad = a.first_nonfinite()) r.problems.push_back(key + ": " + *bad);
    if (!r.problems.empty()) {
        std::string msg = file + ": cannot load the checkpoint:";
        for (const auto& p : r.problems) msg += " " + p + ";";
        msg.pop_back();
        throw io_error(msg);
    }
    // Everything fits: the generators' states are re-validated by set_state before anything changes.
    std::vector<Generator> restored;
    for (std::size_t i = 0; i < generators.size(); ++i) {
        restored.push_back(*generators[i].second);
        try {
            restored.back().set_state(rng_states[i]);
        } catch (const value_error& e) {
            throw io_error(file + ": " + detail::rng_prefix + generators[i].first + ": " + e.what());
        }
    }
    optimizer.load_state(state);
    optimizer.set_lr(*lr);
    load_state_dict(model, parameters, {}, file);
    for (std::size_t i = 0; i < generators.size(); ++i) *generators[i].second = restored[i];
    return *step;
}

}  // namespace xgrad::io
