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
  s.def("initialized", &mgg::shmem::initialized);
  s.def("my_pe", &mgg::shmem::my_pe);
  s.def("n_pes", &mgg::shmem::n_pes);
  s.def("empty", [](std::vector<int64_t> sizes, at::ScalarType dtype) { return mgg::shmem::empty_symmetric(sizes, dtype); });
  s.def("free", &mgg::shmem::free_tensor);
  s.def("peer_tensor", &mgg::shmem::peer_tensor);
  s.def("is_symmetric", [](const at::Tensor& t) { return mgg::shmem::is_symmetric(reinterpret_cast<int64_t>(t.data_ptr())); });
  s.def("barrier_all_on_stream", &mgg::shmem::barrier_all_on_stream);
#else
  m.attr("with_nvshmem") = false;
#endif
}
