#pragma once
// cumulus._C's bindings of the public C++ API (python/elastic.cc): Elastic, Checkpoint,
// Checkpoints, DistributedSampler and their errors, for python/cumulus/elastic.py.

#include <pybind11/pybind11.h>

namespace cumulus::python {

void bindLibrary(pybind11::module_& m);

}  // namespace cumulus::python
