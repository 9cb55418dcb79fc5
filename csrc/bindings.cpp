// Python module mgg._C: loading it registers the torch ops (ops.cpp and the device
// implementations); it also exposes build facts and, in CUDA builds, the NVSHMEM host runtime.
#include <torch/extension.h>

#ifdef MGG_WITH_NVSHMEM
#include "nvshmem/runtime.h"
#endif

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
#ifdef MGG_WITH_CUDA
  m.attr("with_cuda") = true;
#else
  m.attr("with_cuda") = false;
#endif
#ifdef MGG_WITH_NVSHMEM
  m.attr("with_nvshmem") = true;
  auto s = m.def_submodule("nvshmem", "NVSHMEM host runtime");
  s.def("unique_id", [] {
    auto v = mgg::shmem::unique_id();
    return py::bytes(reinterpret_cast<const char*>(v.data()), v.size());
  });
  s.def("init", [](py::bytes uid, int rank, int world) {
    std::string b = uid;
    mgg::shmem::init(std::vector<uint8_t>(b.begin(), b.end()), rank, world);
  });
  s.def("finalize", &mgg::shmem::finalize);
  s.def("my_pe", &mgg::shmem::my_pe);
  s.def("n_pes", &mgg::shmem::n_pes);
  s.def("malloc", &mgg::shmem::malloc_symmetric);
  s.def("free", &mgg::shmem::free_symmetric);
  s.def("peer_pointer", &mgg::shmem::peer_pointer);
  s.def("barrier_all_on_stream", &mgg::shmem::barrier_all_on_stream);
#else
  m.attr("with_nvshmem") = false;
#endif
}
