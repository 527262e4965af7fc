// cumulus._C: the extension module of the Python package (python/cumulus/__init__.py loads it).
// torch.distributed must be imported first: the Backend class registered here derives from the
// c10d Backend that torch._C registers with pybind11.

#include <pybind11/chrono.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include <algorithm>
#include <string>

#include "cumulus/errors.h"
#include "cumulus/options.h"
#include "cumulus/version.h"
#include "python/backend.h"
#include "python/elastic.h"

namespace py = pybind11;

namespace cumulus::python {
namespace {

template <typename Parse>
auto option(const char* key, const std::string& value, Parse&& parse) {
  try {
    return parse(value);
  } catch (const UserError& e) {
    throw std::invalid_argument(std::string("cumulus backend option ") + key + ": " + e.what());
  }
}

c10::intrusive_ptr<Backend> makeBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                        int size, double timeout_seconds,
                                        const std::string& algorithm,
                                        const std::string& compression,
                                        const std::string& cost_model,
                                        double init_timeout_seconds) {
  BackendOptions options;
  options.algorithm = option("algorithm", algorithm, parseAlgorithm);
  options.compression = option("compression", compression, parseCompression);
  options.cost_model = cost_model;
  if (!(timeout_seconds > 0)) {
    throw std::invalid_argument("cumulus backend: the timeout must be positive, got " +
                                std::to_string(timeout_seconds) + " s");
  }
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_seconds * 1000));
  // What is left of init's deadline; none left still gets a millisecond, to name who is missing.
  const auto init_timeout =
      init_timeout_seconds < 0
          ? timeout
          : std::chrono::milliseconds(std::max<int64_t>(
                1, static_cast<int64_t>(std::min(init_timeout_seconds, timeout_seconds) * 1000)));
  return c10::make_intrusive<Backend>(store, rank, size, timeout, init_timeout, options);
}

}  // namespace
}  // namespace cumulus::python

PYBIND11_MODULE(_C, m) {
  using cumulus::python::Backend;
  m.doc() = "Cumulus's torch.distributed backend (docs/python.md)";
  py::module_::import("torch.distributed");

  // Before the classes: a CommError anywhere below (a Work's wait(), the rendezvous) reaches
  // Python as cumulus.CommError, a RuntimeError whose text names the operation and the peer.
  cumulus::python::registerCommError(m);
  py::register_exception<cumulus::GroupError>(m, "GroupError", PyExc_ValueError);

  py::class_<Backend, c10d::Backend, c10::intrusive_ptr<Backend>>(m, "ProcessGroupCumulus")
      .def(py::init(&cumulus::python::makeBackend), py::arg("store"), py::arg("rank"),
           py::arg("size"), py::arg("timeout_seconds"), py::arg("algorithm") = "auto",
           py::arg("compression") = "none", py::arg("cost_model") = "",
           py::arg("init_timeout_seconds") = -1.0, py::call_guard<py::gil_scoped_release>(),
           "Joins the group of `size` ranks through the c10d `store`; blocks until connected, "
           "at most init_timeout_seconds (< 0: timeout_seconds).")
      .def_property_readonly(
          "algorithm",
          [](const Backend& b) { return cumulus::algorithmName(b.backendOptions().algorithm); })
      .def_property_readonly("compression", [](const Backend& b) {
        return cumulus::compressionName(b.backendOptions().compression);
      });

  cumulus::python::bindLibrary(m);
  cumulus::python::bindRecorder(m);
  cumulus::python::bindBatchShares(m);
  cumulus::python::bindDiloco(m);
  m.def("_stop_backends", &cumulus::python::stopAllBackends,
        py::call_guard<py::gil_scoped_release>(),
        "At interpreter exit: every cumulus backend runs what it queued and stops its thread.");

  m.attr("__version__") = CUMULUS_VERSION_STRING;
  m.attr("TORCH_VERSION") = CUMULUS_TORCH_VERSION;
}
