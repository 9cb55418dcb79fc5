// Reading and writing a runner case (case_io.h).
#include "case_io.h"

#include <fstream>
#include <sstream>
#include <stdexcept>

namespace mgg::emu {

Case::Case(std::string dir) : dir_(std::move(dir)) {
  std::ifstream in(dir_ + "/case.txt");
  if (!in) throw std::runtime_error("cannot read " + dir_ + "/case.txt");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string key, value;
    words >> key;
    if (key.empty()) continue;
    if (key == "array") {
      std::string name, type;
      size_t count = 0;
      words >> name >> type >> count;
      std::ifstream f(dir_ + "/" + name + ".bin", std::ios::binary);
      Bytes data((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
      arrays_[name] = std::move(data);
      continue;
    }
    std::getline(words >> std::ws, value);
    values_[key] = value;
  }
}

std::string Case::text(const std::string& key) const {
  auto it = values_.find(key);
  if (it == values_.end()) throw std::runtime_error(dir_ + ": no '" + key + "'");
  return it->second;
}

int64_t Case::integer(const std::string& key) const { return std::stoll(text(key)); }
double Case::real(const std::string& key) const { return std::stod(text(key)); }

size_t Case::bytes(const std::string& name) const {
  auto it = arrays_.find(name);
  return it == arrays_.end() ? 0 : it->second.size();
}

void Case::for_each_array(const std::function<void(const std::string&, const void*, size_t)>& f) const {
  for (const auto& [name, data] : arrays_) f(name, data.data(), data.size());
}

void Case::write(const std::string& name, const void* data, size_t n) const {
  std::ofstream out(dir_ + "/" + name + ".bin", std::ios::binary);
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(n));
}

}  // namespace mgg::emu
