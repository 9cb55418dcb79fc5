// The name of a kernel from its address, for the emulator's reports (simt.h's kernel_name). A
// launch knows its kernel only as a function pointer (launch.cuh picks one at run time), and the
// dynamic symbol table that dladdr reads lacks the kernels of anonymous namespaces (table.cu,
// peers.cu), so the function is looked up in the full symbol table (.symtab) of the executable or
// shared library that holds it, read from its file.
#include <cxxabi.h>
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "simt.h"

namespace simt {
namespace {

struct Object {  // the loaded object holding an address
  uintptr_t address;
  uintptr_t bias = 0;  // its load address: symbol values are relative to it
  std::string path;
};

int find_object(dl_phdr_info* info, size_t /*size*/, void* data) {
  auto* o = static_cast<Object*>(data);
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const Elf64_Phdr& ph = info->dlpi_phdr[i];
    const uintptr_t start = info->dlpi_addr + ph.p_vaddr;
    if (ph.p_type == PT_LOAD && o->address >= start && o->address < start + ph.p_memsz) {
      o->bias = info->dlpi_addr;
      o->path = info->dlpi_name && *info->dlpi_name ? info->dlpi_name : "/proc/self/exe";  // "": the executable
      return 1;
    }
  }
  return 0;
}

// The mangled name of the function covering `value` in the ELF file at `path` ("" if none).
std::string function_at(const std::string& path, uintptr_t value) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  struct stat st{};
  void* map = fstat(fd, &st) == 0 ? mmap(nullptr, st.st_size, PROT_READ, MAP_PRIVATE, fd, 0) : MAP_FAILED;
  close(fd);
  if (map == MAP_FAILED) return "";
  const auto* file = static_cast<const char*>(map);
  const auto* eh = reinterpret_cast<const Elf64_Ehdr*>(file);
  std::string name;
  if (static_cast<size_t>(st.st_size) >= sizeof(Elf64_Ehdr) && std::memcmp(eh->e_ident, ELFMAG, SELFMAG) == 0) {
    const auto* sections = reinterpret_cast<const Elf64_Shdr*>(file + eh->e_shoff);
    for (int i = 0; i < eh->e_shnum && name.empty(); ++i) {
      const Elf64_Shdr& table = sections[i];
      if (table.sh_type != SHT_SYMTAB && table.sh_type != SHT_DYNSYM) continue;
      const auto* symbols = reinterpret_cast<const Elf64_Sym*>(file + table.sh_offset);
      const char* strings = file + sections[table.sh_link].sh_offset;
      for (size_t k = 0; k < table.sh_size / sizeof(Elf64_Sym); ++k) {
        const Elf64_Sym& s = symbols[k];
        if (ELF64_ST_TYPE(s.st_info) == STT_FUNC && value >= s.st_value && value < s.st_value + s.st_size) {
          name = strings + s.st_name;
          break;
        }
      }
    }
  }
  munmap(map, st.st_size);
  return name;
}

// "void ns::kernel<float, A>(ns::Args<float>, A)" -> "ns::kernel<float, A>": the parameters (and
// the return type of a template) say nothing the template arguments do not.
std::string without_signature(std::string s) {
  if (s.starts_with("void ")) s.erase(0, 5);
  if (!s.ends_with(")")) return s;
  int depth = 0;
  for (size_t i = s.size(); i-- > 0;) {
    depth += s[i] == ')' ? 1 : s[i] == '(' ? -1 : 0;
    if (depth == 0) return s.substr(0, i);
  }
  return s;
}

}  // namespace

std::string kernel_name(const void* kernel) {
  Object o{reinterpret_cast<uintptr_t>(kernel)};
  std::string mangled;
  if (dl_iterate_phdr(&find_object, &o)) mangled = function_at(o.path, o.address - o.bias);
  if (mangled.empty()) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%p", kernel);
    return std::string("the kernel at ") + buf;
  }
  int status = 0;
  char* demangled = abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status);
  const std::string name = status == 0 && demangled ? without_signature(demangled) : mangled;
  std::free(demangled);
  return name;
}

}  // namespace simt
