#pragma once
// cumulus._C's bindings of the public C++ API (python/elastic.cc): Elastic, Checkpoint,
// Checkpoints, DistributedSampler and their errors, for python/cumulus/elastic.py.

#include <pybind11/pybind11.h>

namespace cumulus::python {

// cumulus.CommError (a RuntimeError with the attributes op, seq, peer and kind) and the
// translator that raises it for a C++ CommError, remembering the C++ exception on this thread
// for passThrough().
void registerCommError(pybind11::module_& m);

void bindLibrary(pybind11::module_& m);
// cumulus::Recorder as _C.RecorderCore, and ElasticCore's times() and left() (python/recorder.cc;
// after bindLibrary, which registers ElasticCore).
void bindRecorder(pybind11::module_& m);
// cumulus::BatchShares as _C.BatchSharesCore (python/recorder.cc; after bindRecorder).
void bindBatchShares(pybind11::module_& m);
// cumulus::DiLoCo as _C.DiLoCoCore (python/diloco.cc).
void bindDiloco(pybind11::module_& m);

// Rethrows what a Python callback raised, as C++ code around it must see it: the C++ CommError
// that became the cumulus.CommError it raised (so that Elastic re-forms the group on a collective's
// failure inside the program's step), or `error` itself. Call with the GIL held.
[[noreturn]] void passThrough(pybind11::error_already_set& error);

}  // namespace cumulus::python
