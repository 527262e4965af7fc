// cumulus._C.DiLoCoCore: <cumulus/diloco.h> over an ElasticCore's current membership, for
// python/cumulus/diloco.py's DiLoCo.

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include <memory>
#include <string>
#include <vector>

#include "cumulus/diloco.h"
#include "cumulus/elastic.h"
#include "cumulus/options.h"
#include "cumulus/process_group.h"
#include "python/elastic.h"

namespace py = pybind11;

namespace cumulus::python {
namespace {

using Release = py::call_guard<py::gil_scoped_release>;

// The members syncing now: the Elastic's group, or nobody else (null) alone.
ProcessGroup* membersOf(Elastic* elastic) {
  if (elastic == nullptr || elastic->size() <= 1) return nullptr;
  return &elastic->group();
}

}  // namespace

void bindDiloco(py::module_& m) {
  py::class_<DiLoCo>(m, "DiLoCoCore", "cumulus::DiLoCo; use cumulus.DiLoCo")
      .def(py::init([](std::vector<torch::Tensor> params, int64_t inner_steps, double outer_lr,
                       double outer_momentum, bool nesterov, int64_t fragments, bool overlap,
                       double mix, const std::string& outer_compression, double timeout) {
             DiLoCoOptions o;
             o.inner_steps = inner_steps;
             o.outer_lr = outer_lr;
             o.outer_momentum = outer_momentum;
             o.nesterov = nesterov;
             o.fragments = fragments;
             o.overlap = overlap;
             o.mix = mix;
             o.outer_compression = parseCompression(outer_compression);
             o.timeout_seconds = timeout;
             return std::make_unique<DiLoCo>(std::move(params), o);
           }),
           py::arg("params"), py::arg("inner_steps"), py::arg("outer_lr"),
           py::arg("outer_momentum"), py::arg("nesterov"), py::arg("fragments"), py::arg("overlap"),
           py::arg("mix"), py::arg("outer_compression"), py::arg("timeout"))
      .def("attach_buffers", &DiLoCo::attachBuffers, py::arg("buffers"))
      .def("fragments", &DiLoCo::fragments)
      .def("due_at", &DiLoCo::dueAt, py::arg("step"))
      .def(
          "begin_step",
          [](DiLoCo& d, int64_t step, Elastic* elastic) { d.beginStep(step, membersOf(elastic)); },
          py::arg("step"), py::arg("elastic").none(true), Release())
      .def("end_step", &DiLoCo::endStep, Release())
      .def(
          "sync_all", [](DiLoCo& d, Elastic* elastic) { d.syncAll(membersOf(elastic)); },
          py::arg("elastic").none(true), Release())
      .def("cancel", &DiLoCo::cancel)
      .def_property("outer_lr", &DiLoCo::outerLr, &DiLoCo::setOuterLr)
      .def("state",
           [](const DiLoCo& d) {
             const DiLoCoState s = d.state();
             return std::make_pair(s.global, s.momentum);
           })
      .def(
          "load_state",
          [](DiLoCo& d, std::vector<torch::Tensor> global, std::vector<torch::Tensor> momentum) {
            d.loadState(DiLoCoState{std::move(global), std::move(momentum)});
          },
          py::arg("global_params"), py::arg("momentum"))
      .def("reset_replica", &DiLoCo::resetReplica)
      .def("residual", &DiLoCo::residual)
      .def("set_residual", &DiLoCo::setResidual, py::arg("residual"))
      .def("stats", [](const DiLoCo& d) {
        const DiLoCoStats s = d.stats();
        py::dict out;
        out["rounds"] = s.rounds;
        out["wait_seconds"] = s.wait_seconds;
        out["payload_bytes"] = s.payload_bytes;
        return out;
      });
}

}  // namespace cumulus::python
