// Where intermediate gradients go between uses when a backward releases them
// (BackwardOptions::keep_intermediate_grads false): a gradient buffer that has been passed on is
// returned here and handed to the next node that needs one of the same size, in this backward or
// the next step's. So a training loop holds only the gradients in flight (the residual stream
// and one layer's), as PyTorch does, and a steady step still allocates none.
#pragma once
#include <cstddef>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

namespace xgrad::detail {

// Buffers by element count; Storage is xtensor's storage type (moving one out leaves it empty).
template <class Storage>
class GradPool {
public:
    // storage becomes a buffer of `size` elements (its content is stale): one from the pool, or
    // a new one. What it held is returned to the pool.
    void take(Storage& storage, std::size_t size) {
        std::lock_guard<std::mutex> lock(mutex_);
        if (storage.size() > 0) free_[storage.size()].push_back(std::move(storage));
        auto it = free_.find(size);
        if (it != free_.end() && !it->second.empty()) {
            storage = std::move(it->second.back());
            it->second.pop_back();
        } else {
            storage.resize(size);
        }
    }
    // storage's buffer returned; storage is left empty.
    void give(Storage& storage) {
        if (storage.size() == 0) return;
        std::lock_guard<std::mutex> lock(mutex_);
        free_[storage.size()].push_back(std::move(storage));
    }

private:
    std::mutex mutex_;  // a node's backward may reach an input's gradient from a worker thread
    std::unordered_map<std::size_t, std::vector<Storage>> free_;
};

// One pool per storage type, for the process.
template <class Storage>
GradPool<Storage>& grad_pool() {
    static GradPool<Storage> pool;
    return pool;
}

// A buffer of `size` elements from the pool for a scope: an op's backward scratch the size of a
// gradient (linear's dY ⊙ act'(pre)) is held only while that backward runs.
template <class Storage>
struct PooledScratch {
    Storage storage;
    explicit PooledScratch(std::size_t size) { grad_pool<Storage>().take(storage, size); }
    ~PooledScratch() { grad_pool<Storage>().give(storage); }
    PooledScratch(const PooledScratch&) = delete;
    PooledScratch& operator=(const PooledScratch&) = delete;
    auto* data() { return storage.data(); }
};

}  // namespace xgrad::detail
