// A case of the emulated-kernel runner (runner.cpp), as tests/emulator.py writes it: a folder
// with case.txt (one `key value` per line; `array NAME TYPE COUNT` for NAME.bin, raw
// little-endian) and, after the run, the outputs as NAME.bin and status.txt. Torch-free.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace mgg::emu {

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
  void write(const std::string& name, const void* data, size_t bytes) const;

 private:
  std::string dir_;
  std::map<std::string, std::string> values_;
  std::map<std::string, std::vector<unsigned char>> arrays_;  // kept 16-byte aligned by the allocator
};

}  // namespace mgg::emu
