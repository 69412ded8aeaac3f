// Counts every heap allocation of the `xgrad` tool (see workloads/alloc_count.hpp) by interposing the C
// allocator, which operator new, xtensor's aligned allocator and the libraries all end in. The
// work is passed on to glibc's own entry points. Linked only into the tool, never the library.
#include "workloads/alloc_count.hpp"

#include <atomic>
#include <cerrno>
#include <cstddef>

extern "C" {
void* __libc_malloc(std::size_t);
void* __libc_calloc(std::size_t, std::size_t);
void* __libc_realloc(void*, std::size_t);
void* __libc_memalign(std::size_t, std::size_t);
}

namespace {
std::atomic<std::uint64_t> allocations{0};
[[maybe_unused]] void count() { allocations.fetch_add(1, std::memory_order_relaxed); }
}  // namespace

std::uint64_t xgrad::cli::heap_allocations() { return allocations.load(std::memory_order_relaxed); }

#ifdef __SANITIZE_ADDRESS__
// AddressSanitizer owns the allocator: nothing is interposed and nothing counted.
bool xgrad::cli::heap_allocations_counted() { return false; }
#else
bool xgrad::cli::heap_allocations_counted() { return true; }

extern "C" {
void* malloc(std::size_t size) {
    count();
    return __libc_malloc(size);
}
void* calloc(std::size_t n, std::size_t size) {
    count();
    return __libc_calloc(n, size);
}
void* realloc(void* p, std::size_t size) {
    count();
    return __libc_realloc(p, size);
}
void* memalign(std::size_t align, std::size_t size) {
    count();
    return __libc_memalign(align, size);
}
void* aligned_alloc(std::size_t align, std::size_t size) {
    count();
    return __libc_memalign(align, size);
}
int posix_memalign(void** out, std::size_t align, std::size_t size) {
    if (align < sizeof(void*) || (align & (align - 1)) != 0) return EINVAL;
    count();
    void* p = __libc_memalign(align, size);
    if (!p) return ENOMEM;
    *out = p;
    return 0;
}
}  // extern "C"
#endif
