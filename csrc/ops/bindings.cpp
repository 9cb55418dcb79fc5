// Python module mgg._C: loading it registers the torch ops (schema.cpp and the device
// implementations). It exports the limits and layouts the C++ side defines once
// (core/limits.h, core/schedule.h, core/step_layout.h) and the kernels' launch-shape model, so
// that the planner, the tuner and the command line use the launcher's own numbers; the reuse
// distances of a trace (core/reuse_distance.h) for the runtime's order-aware L2 model; which copy of
// the CPU kernels runs (ops/cpu/row_kernels.h); and, in CUDA
// builds, the extension's side of NVSHMEM (attach/detach of its device state).
#include <torch/extension.h>

#include "../core/launch_shape.h"
#include "../core/limits.h"
#include "../core/reuse_distance.h"
#include "../core/schedule.h"
#include "../core/step_layout.h"
#include "cpu/row_kernels.h"

#ifdef MGG_WITH_NVSHMEM
#include "../nvshmem/attach.h"
#endif

namespace {

template <size_t N>
py::tuple names(const char* const (&list)[N]) {
  py::tuple t(N);
  for (size_t i = 0; i < N; ++i) t[i] = py::str(list[i]);
  return t;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
#ifdef MGG_WITH_CUDA
  m.attr("with_cuda") = true;
#else
  m.attr("with_cuda") = false;
#endif
  py::dict limits;
  limits["ps"] = py::make_tuple(mgg::kPsMin, mgg::kPsMax);
  limits["dist"] = py::make_tuple(mgg::kDistMin, mgg::kDistMax);
  limits["wpb"] = py::make_tuple(mgg::kWpbMin, mgg::kWpbMax);
  limits["warp"] = mgg::kWarp;
  limits["max_tile"] = mgg::kMaxTile;
  limits["rows_in_flight"] = mgg::kRowsInFlight;
  limits["chunk"] = mgg::kChunk;
  limits["max_pes"] = mgg::kMaxPes;
  m.attr("limits") = limits;
  m.attr("RANGE_FIELDS") = names(mgg::kRangeFieldNames);
  m.attr("FIXUP_FIELDS") = names(mgg::kFixupFieldNames);
  m.attr("STEP_FIELDS") = names(mgg::kStepFieldNames);
  m.attr("STEP_PARAMS") = names(mgg::kStepParamNames);
  m.attr("FETCH") = names(mgg::kFetchNames);
  m.def("landing_rows", &mgg::landing_rows_for, py::arg("ps"), py::arg("remote_edges"),
        "Rows of a warp's landing chunk for a step's remote rows fetched into shared memory.");
  m.def(
      "launch_shape",
      [](int64_t dim, int64_t wpb, int64_t landing_rows, int64_t elem_bytes, bool landing, int64_t smem_limit) {
        const int rows = landing ? static_cast<int>(landing_rows) : 0;
        const int tile = mgg::choose_tile(dim, wpb, rows, elem_bytes, smem_limit);
        py::dict d;
        d["tile"] = tile;
        d["landing_rows"] = rows;
        d["smem"] = tile ? mgg::smem_bytes(wpb, tile, rows, elem_bytes) : 0;
        d["threads"] = wpb * mgg::kWarp;
        d["grid_y"] = tile ? mgg::ceil_div(std::max<int64_t>(dim, 1), tile) : 0;
        return d;
      },
      py::arg("dim"), py::arg("wpb"), py::arg("landing_rows"), py::arg("elem_bytes"), py::arg("landing"),
      py::arg("smem_limit"),
      "The range kernel's launch shape for a step: columns of a pass (tile), landing rows, dynamic shared memory "
      "(bytes), threads and grid.y; tile 0 means nothing fits smem_limit.");
  m.def(
      "reuse_distances",
      [](const at::Tensor& units, int64_t num_units) {
        TORCH_CHECK(units.dim() == 1 && units.scalar_type() == at::kLong && units.is_cpu() && units.is_contiguous(),
                    "mgg._C.reuse_distances: units must be a contiguous 1-D int64 CPU tensor");
        TORCH_CHECK(num_units >= 0, "mgg._C.reuse_distances: num_units must be >= 0, got ", num_units);
        at::Tensor distinct = at::empty_like(units), gap = at::empty_like(units);
        try {
          py::gil_scoped_release unlocked;
          mgg::reuse_distances(units.data_ptr<int64_t>(), units.numel(), num_units, distinct.data_ptr<int64_t>(),
                               gap.data_ptr<int64_t>());
        } catch (const std::invalid_argument& e) {
          TORCH_CHECK(false, "mgg._C.", e.what());
        }
        return py::make_tuple(distinct, gap);
      },
      py::arg("units"), py::arg("num_units"),
      "Per access of a trace of unit ids in [0, num_units): the distinct other units accessed since the unit's "
      "previous access and the accesses between them (LRU stack distance; -1, -1 for a first access).");
  m.def(
      "cpu_kernels", [] { return std::string(mgg::cpu::row_kernels().isa); },
      "The instruction set of the CPU kernels this process runs (default, avx2, avx512): ATen's choice for this "
      "CPU, capped by ATEN_CPU_CAPABILITY.");
#ifdef MGG_WITH_NVSHMEM
  m.attr("with_nvshmem") = true;
  auto s = m.def_submodule("nvshmem", "the extension's side of NVSHMEM, whose runtime nvshmem4py owns");
  s.def("attach", &mgg::shmem::attach, "Attaches this module's device state (after nvshmem.core.init).");
  s.def("detach", &mgg::shmem::detach, "Detaches it (before nvshmem.core.finalize).");
  s.def("attached", &mgg::shmem::attached);
  s.def("my_pe", &mgg::shmem::my_pe);
  s.def("n_pes", &mgg::shmem::n_pes);
  s.def("compiled_version", &mgg::shmem::compiled_version, "The NVSHMEM version of the linked device library.");
#else
  m.attr("with_nvshmem") = false;
#endif
}
