// cumulus._C's bindings of the public C++ API that the Python package builds its elastic loop and
// checkpoints on (python/cumulus/elastic.py, docs/python.md): Elastic, Checkpoint, Checkpoints,
// DistributedSampler. Python holds the program's state (a torch.nn.Module, an optimizer); these
// carry it as a cumulus::Checkpoint through the same packing, checks and commit protocol as the
// C++ side.
//
// The GIL: every call that communicates or blocks (start, train, boundary, at_boundary, a save, a
// collective, the gradient sync) releases it; the program's callbacks (the step, capture,
// restore, the membership and failure callbacks) take it back while they run.

#include "python/elastic.h"

#include <pybind11/functional.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cumulus/allocator.h"
#include "cumulus/checkpoint.h"
#include "cumulus/elastic.h"
#include "cumulus/errors.h"
#include "cumulus/options.h"
#include "cumulus/precision.h"
#include "cumulus/preemption.h"
#include "cumulus/sampler.h"

namespace py = pybind11;

namespace cumulus::python {
namespace {

using Release = py::call_guard<py::gil_scoped_release>;

// The CommError that the translator last turned into a Python exception on this thread.
std::exception_ptr& lastCommError() {
  static thread_local std::exception_ptr last;
  return last;
}

py::object& commErrorType() {
  static py::object type;  // set once by registerCommError, alive for the interpreter's life
  return type;
}

// A Python callable kept by C++ code that may drop it without the GIL: the last reference is
// released with the GIL held.
std::shared_ptr<py::function> keep(py::function fn) {
  return std::shared_ptr<py::function>(new py::function(std::move(fn)), [](py::function* f) {
    py::gil_scoped_acquire gil;
    delete f;
  });
}

// `fn` as a C++ callback that takes the GIL while it runs; what it raises is passed through
// (passThrough: a collective's CommError comes out as the C++ CommError).
template <typename... Args>
std::function<void(Args...)> withGil(py::function fn) {
  auto kept = keep(std::move(fn));
  return [kept](Args... args) {
    py::gil_scoped_acquire gil;
    try {
      (*kept)(args...);
    } catch (py::error_already_set& error) {
      passThrough(error);
    }
  };
}

py::dict tensorsOf(const NamedTensors& tensors) {
  py::dict out;
  for (const auto& [name, tensor] : tensors) out[py::str(name)] = tensor;
  return out;
}

NamedTensors namedTensors(const py::dict& tensors) {
  NamedTensors out;
  for (const auto& [name, tensor] : tensors) {
    out.emplace_back(name.cast<std::string>(), tensor.cast<torch::Tensor>());
  }
  return out;
}

ReduceOp reduceOpNamed(const std::string& op) {
  if (op == "sum") return ReduceOp::kSum;
  if (op == "avg") return ReduceOp::kAvg;
  if (op == "max") return ReduceOp::kMax;
  if (op == "min") return ReduceOp::kMin;
  throw std::invalid_argument("all_reduce: op '" + op + "' is not one of sum, avg, max, min");
}

ElasticOptions elasticOptions(const std::string& algorithm, const std::string& compression,
                              double timeout_seconds, double bucket_cap_mb, int wait_for_members,
                              double wait_for_members_seconds) {
  ElasticOptions options;
  try {
    options.group.algorithm = parseAlgorithm(algorithm);
  } catch (const UserError& e) {
    throw GroupError(std::string("algorithm: ") + e.what());
  }
  try {
    options.data_parallel.compression = parseCompression(compression);
  } catch (const UserError& e) {
    throw GroupError(std::string("compression: ") + e.what());
  }
  options.group.timeout_seconds = timeout_seconds;
  options.data_parallel.bucket_cap_mb = bucket_cap_mb;
  if (wait_for_members < 0) {
    throw GroupError("wait_for_members: must be >= 0, got " + std::to_string(wait_for_members));
  }
  options.wait_for_members = wait_for_members;
  options.wait_for_members_seconds = wait_for_members_seconds;
  return options;
}

void bindCheckpoint(py::module_& m) {
  py::class_<Checkpoint>(m, "Checkpoint",
                         "A training state as Cumulus saves, sends and verifies it "
                         "(<cumulus/checkpoint.h>).")
      .def(py::init<>())
      .def_property(
          "step", [](const Checkpoint& c) { return c.state.step; },
          [](Checkpoint& c, uint64_t step) { c.state.step = step; })
      .def_property(
          "config", [](const Checkpoint& c) { return c.state.config_yaml; },
          [](Checkpoint& c, const std::string& text) { c.state.config_yaml = text; })
      .def_property(
          "world_size", [](const Checkpoint& c) { return c.state.world_size; },
          [](Checkpoint& c, uint32_t size) { c.state.world_size = size; })
      .def_property(
          "batch_shares", [](const Checkpoint& c) { return c.state.batch_shares; },
          [](Checkpoint& c, std::vector<int64_t> shares) {
            c.state.batch_shares = std::move(shares);
          },
          "the batch shares in force, one per member (cumulus.BatchShares); empty: equal")
      .def_property(
          "preempted", [](const Checkpoint& c) { return c.state.preempted; },
          [](Checkpoint& c, bool preempted) { c.state.preempted = preempted; })
      .def_property(
          "model", [](const Checkpoint& c) { return c.state.model; },
          [](Checkpoint& c, const std::string& name) { c.state.model = name; })
      .def_property(
          "optimizer", [](const Checkpoint& c) { return c.state.optimizer; },
          [](Checkpoint& c, const std::string& name) { c.state.optimizer = name; })
      .def_property(
          "sampler",
          [](const Checkpoint& c) {
            const SamplerState s = c.sampler();
            return py::make_tuple(s.epoch, s.cursor);
          },
          [](Checkpoint& c, std::pair<int64_t, int64_t> s) {
            c.setSampler({s.first, s.second});
          },
          "(epoch, cursor) of the DistributedSampler")
      .def_property(
          "tensors", [](const Checkpoint& c) { return tensorsOf(c.tensors); },
          [](Checkpoint& c, const py::dict& tensors) { c.tensors = namedTensors(tensors); },
          "model.pt: name -> tensor (a state_dict)")
      .def_property(
          "files",
          [](const Checkpoint& c) {
            py::dict out;
            for (const auto& [name, bytes] : c.files) out[py::str(name)] = py::bytes(bytes);
            return out;
          },
          [](Checkpoint& c, const std::map<std::string, std::string>& files) { c.files = files; },
          "extra files: name -> bytes")
      .def("capture_rng", &Checkpoint::captureRng,
           "Records torch's default CPU generator (torch.manual_seed's).")
      .def("restore_rng", &Checkpoint::restoreRng);

  py::class_<Checkpoints>(m, "Checkpoints",
                          "Verified, crash-consistent checkpoints in a directory.")
      .def(py::init<std::string, size_t>(), py::arg("dir"), py::arg("keep") = 3)
      .def_property_readonly("dir", &Checkpoints::dir)
      .def(
          "save",
          [](Checkpoints& c, const Checkpoint& checkpoint) { return c.save(checkpoint).path; },
          py::arg("checkpoint"), Release(),
          "Commits the checkpoint as <dir>/step-<step>; returns its path once durable.")
      .def(
          "load_latest",
          [](Checkpoints& c) {
            std::vector<CheckpointWarning> warnings;
            std::optional<Checkpoint> latest = c.loadLatest(&warnings);
            std::vector<std::string> skipped;
            for (const CheckpointWarning& w : warnings) skipped.push_back(w.str());
            return std::make_pair(std::move(latest), std::move(skipped));
          },
          Release(),
          "(the newest valid checkpoint or None, the newer ones skipped as invalid with why)")
      .def("load", &Checkpoints::load, py::arg("path"), Release());
}

void bindSampler(py::module_& m) {
  py::class_<DistributedSampler>(m, "DistributedSampler",
                                 "Each epoch's order from (seed, epoch); the state is (epoch, "
                                 "cursor), so a run resumes exactly at any world size.")
      .def(py::init<int64_t, int64_t, uint64_t, bool, bool>(), py::arg("dataset_size"),
           py::arg("global_batch_size"), py::arg("seed") = 0, py::arg("shuffle") = true,
           py::arg("drop_last") = true)
      .def_property_readonly("steps_per_epoch", &DistributedSampler::stepsPerEpoch)
      .def("global_batch", &DistributedSampler::globalBatch)
      .def("local_indices", &DistributedSampler::localIndices, py::arg("rank"), py::arg("world"))
      .def("advance", &DistributedSampler::advance)
      .def_property_readonly("epoch", [](const DistributedSampler& s) { return s.state().epoch; })
      .def_property_readonly("cursor", [](const DistributedSampler& s) { return s.state().cursor; })
      .def("state",
           [](const DistributedSampler& s) {
             return std::make_pair(s.state().epoch, s.state().cursor);
           })
      .def(
          "restore",
          [](DistributedSampler& s, std::pair<int64_t, int64_t> state) {
            s.restore({state.first, state.second});
          },
          py::arg("state"));
}

void bindElasticLoop(py::class_<Elastic>& core);
void bindElasticQueries(py::class_<Elastic>& core);

// ElasticAction and Membership, what the loop returns and reports.
void bindElasticTypes(py::module_& m) {
  py::enum_<ElasticAction>(m, "ElasticAction")
      .value("CONTINUE", ElasticAction::kContinue)
      .value("CHECKPOINT", ElasticAction::kCheckpoint)
      .value("STOP", ElasticAction::kStop)
      .value("LEAVE", ElasticAction::kLeave);

  py::class_<Membership>(m, "Membership")
      .def_readonly("rank", &Membership::rank)
      .def_readonly("size", &Membership::size)
      .def_readonly("epoch", &Membership::epoch)
      .def_readonly("step", &Membership::step)
      .def_readonly("cause", &Membership::cause)
      .def_readonly("reason", &Membership::reason)
      .def_readonly("source", &Membership::source)
      .def_readonly("healed", &Membership::healed)
      .def_readonly("seconds", &Membership::seconds);
}

// ElasticCore's construction and state (bindElasticLoop and bindElasticQueries: the rest).
void bindElastic(py::module_& m) {
  bindElasticTypes(m);

  py::class_<Elastic> core(m, "ElasticCore", "cumulus::Elastic; use cumulus.Elastic");
  core.def(py::init([](const std::string& algorithm, const std::string& compression,
                       double timeout_seconds, double bucket_cap_mb, int wait_for_members,
                       double wait_for_members_seconds) {
             installSigtermHandler();
             installCheckpointSignalHandler();
             return std::make_unique<Elastic>(
                 elasticOptions(algorithm, compression, timeout_seconds, bucket_cap_mb,
                                wait_for_members, wait_for_members_seconds));
           }),
           py::arg("algorithm"), py::arg("compression"), py::arg("timeout_seconds"),
           py::arg("bucket_cap_mb"), py::arg("wait_for_members"),
           py::arg("wait_for_members_seconds"), Release())
      .def(
          "set_state",
          [](Elastic& e, py::function capture, py::function restore, const std::string& config) {
            auto capture_fn = keep(std::move(capture));
            auto restore_fn = keep(std::move(restore));
            ElasticState state;
            state.capture = [capture_fn] {
              py::gil_scoped_acquire gil;
              return (*capture_fn)().cast<Checkpoint>();
            };
            // A state that does not fit (the program's check raised) is a CheckpointError, which
            // Elastic names with the rank that sent it.
            state.restore = [restore_fn](const Checkpoint& c) {
              py::gil_scoped_acquire gil;
              try {
                (*restore_fn)(c);
              } catch (py::error_already_set& e) {
                throw CheckpointError(e.what());
              }
            };
            state.config = config;
            e.setState(std::move(state));
          },
          py::arg("capture"), py::arg("restore"), py::arg("config"))
      .def("attach", &Elastic::attach, py::arg("params"),
           py::arg("buffers") = std::vector<torch::Tensor>(), Release())
      .def(
          "on_failure",
          [](Elastic& e, py::function callback) {
            e.onFailure(withGil<const std::string&>(std::move(callback)));
          },
          py::arg("callback"))
      .def(
          "on_membership_change",
          [](Elastic& e, py::function callback) {
            e.onMembershipChange(withGil<const Membership&>(std::move(callback)));
          },
          py::arg("callback"));
  bindElasticLoop(core);
  bindElasticQueries(core);
}

// ElasticCore's loop: start, the step, the boundaries, the end.
void bindElasticLoop(py::class_<Elastic>& core) {
  core.def(
          "start",
          [](Elastic& e, int64_t steps_done, py::object prepare) {
            std::function<void()> first;
            if (!prepare.is_none()) first = withGil<>(prepare.cast<py::function>());
            py::gil_scoped_release released;
            return e.start(steps_done, first);
          },
          py::arg("steps_done") = 0, py::arg("prepare") = py::none())
      .def(
          "train",
          [](Elastic& e, py::function fn) {
            std::function<void()> step = withGil<>(std::move(fn));
            py::gil_scoped_release released;
            e.train(step);
          },
          py::arg("fn"))
      .def("boundary", &Elastic::boundary, Release())
      .def(
          "at_boundary",
          [](Elastic& e, py::function fn) {
            std::function<void()> work = withGil<>(std::move(fn));
            py::gil_scoped_release released;
            return e.atBoundary(work);
          },
          py::arg("fn"))
      .def(
          "at_end",
          [](Elastic& e, py::function fn) {
            std::function<void()> work = withGil<>(std::move(fn));
            py::gil_scoped_release released;
            e.atEnd(work);
          },
          py::arg("fn"))
      .def("leaving", &Elastic::leaving)
      .def("wait_for_all", &Elastic::waitForAll, Release())
      .def("finish", &Elastic::finish, Release());
}

// ElasticCore's membership, collectives over it, and notices.
void bindElasticQueries(py::class_<Elastic>& core) {
  core.def_property_readonly("in_place", &Elastic::inPlace)
      .def_property_readonly("member_id", &Elastic::memberId)
      .def_property_readonly("joining", &Elastic::joining)
      .def_property_readonly("rank", &Elastic::rank)
      .def_property_readonly("size", &Elastic::size)
      .def_property_readonly("epoch", &Elastic::epoch)
      .def_property_readonly("step", &Elastic::step)
      .def(
          "backward", [](Elastic& e, const torch::Tensor& loss) { e.sync().backward(loss); },
          py::arg("loss"), Release())
      .def(
          "all_reduce",
          [](Elastic& e, torch::Tensor tensor, const std::string& op) {
            CollectiveOptions options;
            options.op = reduceOpNamed(op);
            e.group().allreduce(tensor, options);
          },
          py::arg("tensor"), py::arg("op") = "sum", Release())
      .def(
          "broadcast",
          [](Elastic& e, torch::Tensor tensor, int root) { e.group().broadcast(tensor, root); },
          py::arg("tensor"), py::arg("root") = 0, Release())
      .def(
          "all_gather",
          [](Elastic& e, const torch::Tensor& tensor) { return e.group().allgather(tensor); },
          py::arg("tensor"), Release())
      .def("notify", [](Elastic& e) { e.preemption().notify(); })
      .def("request_checkpoint", [](Elastic& e) { e.preemption().requestCheckpoint(); })
      .def_property_readonly("noticed", [](Elastic& e) { return e.preemption().noticed(); });
}

}  // namespace

void registerCommError(py::module_& m) {
  static py::exception<CommError> type(m, "CommError", PyExc_RuntimeError);
  commErrorType() = type;
  py::register_exception_translator([](std::exception_ptr thrown) {
    try {
      if (thrown) std::rethrow_exception(thrown);
    } catch (const CommError& e) {
      lastCommError() = thrown;
      // The fields, as attributes: a program can tell a dead peer from a timeout without
      // parsing the text.
      py::object error = py::handle(type.ptr())(e.what());
      error.attr("op") = e.op();
      error.attr("seq") = e.seq();
      error.attr("peer") = e.peer();
      error.attr("kind") = errorKindName(e.kind());
      PyErr_SetObject(type.ptr(), error.ptr());
    }
  });
}

void passThrough(py::error_already_set& error) {
  std::exception_ptr comm = std::exchange(lastCommError(), nullptr);
  if (comm && error.matches(commErrorType())) std::rethrow_exception(comm);
  throw;
}

void bindLibrary(py::module_& m) {
  py::register_exception<CheckpointError>(m, "CheckpointError", PyExc_RuntimeError);
  py::register_exception<PermanentError>(m, "PermanentError", PyExc_RuntimeError);
  bindCheckpoint(m);
  bindSampler(m);
  bindElastic(m);
  m.attr("EXIT_PREEMPTED") = kExitPreempted;
  m.def(
      "use_training_allocator",
      [] {
        const AllocatorChoice choice = useTrainingAllocator();
        return std::make_pair(choice.tuned, choice.text);
      },
      "glibc's malloc set for a training step's large blocks (<cumulus/allocator.h>); call it "
      "first, before the model is built. Returns (applied, what it did).");
  m.def(
      "choose_precision",
      [](const std::string& name) {
        Precision requested = Precision::kFp32;
        try {
          requested = parsePrecision(name);
        } catch (const UserError& e) {
          throw py::value_error(e.what());
        }
        const PrecisionChoice choice = choosePrecision(requested);
        return py::make_tuple(precisionName(choice.precision), choice.reason, choice.warning);
      },
      py::arg("precision") = "auto",
      "What trainer.precision decides on this CPU (<cumulus/precision.h>): 'fp32', 'bf16' or "
      "'auto' becomes (precision, reason, warning), precision 'fp32' or 'bf16'; warning is empty "
      "unless bf16 was asked for on a CPU without native bfloat16. Train in bf16 with "
      "torch.autocast('cpu', dtype=torch.bfloat16) around the forward.");
}

}  // namespace cumulus::python
