// The Python module flagcx._C: the process group class and a few queries.
#include <pybind11/chrono.h>
#include <torch/python.h>

#include "process_group_flagcx.hpp"

namespace py = pybind11;
using flagcx_torch::ProcessGroupFlagcx;

PYBIND11_MODULE(_C, m) {
  m.doc() = "flagcx backend for torch.distributed (use `import flagcx`)";
  // The base class must be known to pybind11 before we derive from it.
  py::module::import("torch.distributed");
  py::class_<ProcessGroupFlagcx, flagcx_torch::PgBase, c10::intrusive_ptr<ProcessGroupFlagcx>>(
      m, "ProcessGroupFlagcx")
      .def(py::init([](const c10::intrusive_ptr<c10d::Store> &store, int rank, int size,
                       std::chrono::milliseconds timeout) {
             return c10::make_intrusive<ProcessGroupFlagcx>(store, rank, size, timeout);
           }),
           py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
           py::call_guard<py::gil_scoped_release>())
      // The survivors' group (every torch release; torch >= 2.10 also
      // reaches it through Backend.shrink and torch.distributed.shrink_group).
      .def("shrink_group", &ProcessGroupFlagcx::shrinkGroup, py::arg("ranks_to_exclude"),
           py::arg("shrink_flags") = 0, py::call_guard<py::gil_scoped_release>());
  m.attr("SHRINK_DEFAULT") = FLAGCX_SHRINK_DEFAULT;
  m.attr("SHRINK_ABORT") = FLAGCX_SHRINK_ABORT;
  m.def("device", &ProcessGroupFlagcx::deviceName,
        "The device flagcx drives in this process: 'host' or the GPU vendor");
  m.def("version", [] {
    int v = 0;
    flagcxGetVersion(&v);
    return v;
  }, "flagcx's version code (major*10000 + minor*100 + patch)");
#ifdef FLAGCX_TORCH_CUDA
  m.attr("cuda") = true;
#else
  m.attr("cuda") = false;
#endif
}
