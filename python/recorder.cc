// cumulus._C.RecorderCore and BatchSharesCore: <cumulus/recorder.h> and <cumulus/batch_shares.h>
// over an ElasticCore, for cumulus.Recorder and cumulus.BatchShares (python/cumulus/recorder.py,
// batch_shares.py), and ElasticCore's times (ElasticTimes as a dict). What may communicate (a
// record's loss, a rebalance) releases the GIL.

#include <pybind11/stl.h>

#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include "cumulus/batch_shares.h"
#include "cumulus/diloco.h"
#include "cumulus/elastic.h"
#include "cumulus/recorder.h"
#include "cumulus/sampler.h"
#include "python/elastic.h"

namespace py = pybind11;

namespace cumulus::python {
namespace {

py::dict timesDict(const ElasticTimes& t) {
  py::dict d;
  d["start"] = t.start;
  d["train"] = t.train;
  d["comm_wait"] = t.comm_wait;
  d["redone"] = t.redone;
  d["reform"] = t.reform;
  d["boundary"] = t.boundary;
  d["member_wait"] = t.member_wait;
  d["checkpoint"] = t.checkpoint;
  d["at_boundary"] = t.at_boundary;
  d["reforms"] = t.reforms;
  return d;
}

py::dict goodputDict(const Goodput& g) {
  py::dict d;
  d["wall_s"] = g.wall;
  d["startup_s"] = g.startup;
  d["training_s"] = g.training;
  d["comm_wait_s"] = g.comm_wait;
  d["evaluation_s"] = g.evaluation;
  d["checkpoint_s"] = g.checkpoint;
  d["reform_s"] = g.reform;
  d["restart_s"] = g.restart;
  d["redone_s"] = g.redone;
  d["other_s"] = g.other;
  d["productive_ratio"] = g.productive_ratio;
  return d;
}

// RecorderCore(...): the options cumulus.Recorder passes, by name there.
std::unique_ptr<Recorder> newRecorder(Elastic& elastic, const std::string& run_dir,
                                      int64_t total_steps, int64_t steps_per_epoch,
                                      int64_t log_every_steps, int64_t start_step, bool tensorboard,
                                      bool live, bool console, const std::string& model,
                                      bool log_all_ranks, const DiLoCo* diloco) {
  RecorderOptions o;
  o.run_dir = run_dir;
  o.total_steps = total_steps;
  o.steps_per_epoch = steps_per_epoch;
  o.log_every_steps = log_every_steps;
  o.start_step = start_step;
  o.tensorboard = tensorboard;
  o.live = live;
  o.console = console ? &std::cout : nullptr;
  o.model = model;
  o.log_all_ranks = log_all_ranks;
  o.diloco = diloco;
  return std::make_unique<Recorder>(elastic, std::move(o));
}

void checkpointSaved(Recorder& r, int64_t step, const std::string& path, double stall_seconds,
                     double encode_seconds, double write_seconds, uint64_t bytes) {
  CheckpointSaved saved;
  saved.step = step;
  saved.path = path;
  saved.stall_seconds = stall_seconds;
  saved.encode_seconds = encode_seconds;
  saved.write_seconds = write_seconds;
  saved.bytes = bytes;
  r.checkpointSaved(saved);
}

}  // namespace

void bindRecorder(py::module_& m) {
  py::object core = m.attr("ElasticCore");
  core.attr("times") =
      py::cpp_function([](const Elastic& e) { return timesDict(e.times()); }, py::is_method(core));
  core.attr("left") =
      py::cpp_function([](const Elastic& e) { return e.left(); }, py::is_method(core));

  py::class_<Recorder>(m, "RecorderCore", "cumulus::Recorder; use cumulus.Recorder")
      .def(py::init(&newRecorder), py::arg("elastic"), py::arg("run_dir"), py::arg("total_steps"),
           py::arg("steps_per_epoch"), py::arg("log_every_steps"), py::arg("start_step"),
           py::arg("tensorboard"), py::arg("live"), py::arg("console"), py::arg("model"),
           py::arg("log_all_ranks"), py::arg("diloco").none(true), py::keep_alive<1, 2>(),
           py::keep_alive<1, 13>())
      .def(
          "step",
          [](Recorder& r, double loss, int64_t samples, double lr, int64_t global_samples,
             double seconds, double comm_wait_seconds) {
            StepMetrics s;
            s.loss = loss;
            s.samples = samples;
            s.lr = lr;
            s.global_samples = global_samples;
            s.seconds = seconds;
            s.comm_wait_seconds = comm_wait_seconds;
            py::gil_scoped_release released;
            r.step(s);
            std::cout.flush();
          },
          py::arg("loss"), py::arg("samples"), py::arg("lr"), py::arg("global_samples"),
          py::arg("seconds"), py::arg("comm_wait_seconds"))
      .def("scalar", &Recorder::scalar, py::arg("name"), py::arg("value"))
      .def("evaluation", &Recorder::evaluation, py::arg("loss"), py::arg("accuracy"),
           py::arg("seconds"))
      .def(
          "checkpoint",
          [](Recorder& r, const py::function& save) {
            return r.checkpoint([&] { return py::str(save()).cast<std::string>(); });
          },
          py::arg("save"))
      .def("checkpoint_saved", &checkpointSaved, py::arg("step"), py::arg("path"),
           py::arg("stall_seconds"), py::arg("encode_seconds"), py::arg("write_seconds"),
           py::arg("bytes"))
      .def("checkpoint_failed", &Recorder::checkpointFailed, py::arg("step"), py::arg("error"),
           py::arg("max_failures"), py::arg("newest_valid"))
      .def("membership_changed", &Recorder::membershipChanged)
      .def(
          "preempted",
          [](Recorder& r, const std::string& checkpoint) {
            r.preempted(checkpoint);
            std::cout.flush();
          },
          py::arg("checkpoint"))
      .def("note", &Recorder::note, py::arg("text"))
      .def("warning", &Recorder::warning, py::arg("text"))
      .def(
          "finish",
          [](Recorder& r, int64_t parameters, const std::string& parameter_digest) {
            RunTotals totals;
            totals.parameters = parameters;
            totals.parameter_digest = parameter_digest;
            r.finish(totals);
            std::cout.flush();
          },
          py::arg("parameters"), py::arg("parameter_digest"))
      .def_property_readonly("goodput", [](const Recorder& r) { return goodputDict(r.goodput()); })
      .def_property_readonly("dropped", &Recorder::dropped);
}

void bindBatchShares(py::module_& m) {
  py::class_<BatchShares>(m, "BatchSharesCore", "cumulus::BatchShares; use cumulus.BatchShares")
      .def(py::init([](Elastic& elastic, int64_t global_batch, int64_t every_steps, double min_gain,
                       int64_t micro_batches, Recorder* recorder) {
             BatchSharesOptions o;
             o.every_steps = every_steps;
             o.min_gain = min_gain;
             o.micro_batches = micro_batches;
             return std::make_unique<BatchShares>(elastic, global_batch, o, recorder);
           }),
           py::arg("elastic"), py::arg("global_batch"), py::arg("every_steps"), py::arg("min_gain"),
           py::arg("micro_batches"), py::arg("recorder"), py::keep_alive<1, 2>(),
           py::keep_alive<1, 7>())
      .def("shares", &BatchShares::shares)
      .def("share", &BatchShares::share)
      .def("local_indices", &BatchShares::localIndices, py::arg("sampler"))
      .def("measure", &BatchShares::measure, py::arg("samples"), py::arg("seconds"))
      .def("rebalance", &BatchShares::rebalance, py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("rate", &BatchShares::rate)
      .def("restore", &BatchShares::restore, py::arg("saved"))
      .def_property_readonly("restored", &BatchShares::restored);
}

}  // namespace cumulus::python
