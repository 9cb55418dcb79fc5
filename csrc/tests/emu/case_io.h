// A case of the emulated-kernel runner (runner.cpp), as simt/emulator.py writes it: a folder
// with case.txt (one `key value` per line; `array NAME TYPE COUNT` for NAME.bin, raw
// little-endian) and, after the run, the outputs as NAME.bin and status.txt. Torch-free.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <new>
#include <string>
#include <vector>

namespace mgg::emu {

// Arrays start on 256-byte boundaries, as CUDA's allocations (and torch's caching allocator's)
// do, so that the emulator's sector counts see the GPU's alignment.
constexpr size_t kArrayAlign = 256;
template <typename T>
struct AlignedAllocator {
  using value_type = T;
  AlignedAllocator() = default;
  template <typename U>
  AlignedAllocator(const AlignedAllocator<U>&) {}
  T* allocate(size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t{kArrayAlign})); }
  void deallocate(T* p, size_t) { ::operator delete(p, std::align_val_t{kArrayAlign}); }
  bool operator==(const AlignedAllocator&) const { return true; }
};
using Bytes = std::vector<unsigned char, AlignedAllocator<unsigned char>>;

class Case {
 public:
  explicit Case(std::string dir);
  const std::string& dir() const { return dir_; }
  bool has(const std::string& key) const { return values_.count(key) > 0; }
  std::string text(const std::string& key) const;
  int64_t integer(const std::string& key) const;
  double real(const std::string& key) const;
  // An input array (nullptr when the case has none of that name); bytes of it.
  template <typename T>
  T* array(const std::string& name) {
    auto it = arrays_.find(name);
    return it == arrays_.end() ? nullptr : reinterpret_cast<T*>(it->second.data());
  }
  size_t bytes(const std::string& name) const;
  // Calls f(name, data, bytes) for every input array.
  void for_each_array(const std::function<void(const std::string&, const void*, size_t)>& f) const;
  void write(const std::string& name, const void* data, size_t bytes) const;

 private:
  std::string dir_;
  std::map<std::string, std::string> values_;
  std::map<std::string, Bytes> arrays_;
};

}  // namespace mgg::emu
