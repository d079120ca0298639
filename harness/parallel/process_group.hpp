// One process-group interface for every engine: a thin layer over c10d Backends (gloo on CPU,
// NCCL on GPU) that fixes the options shardbench cares about (timeouts, loopback devices,
// separate all-gather and reduce-scatter communicators) in one place.
#pragma once

#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

namespace shardbench {

enum class CommBackend { kGloo, kNccl };

const char* to_string(CommBackend backend);

// Reduction requested by an engine. kAvg maps to ReduceOp::AVG (average_in_collective);
// kSum to SUM (the caller pre-scaled by 1/DP, Megatron's default); kMax to MAX (the FP8
// parameter all-gather's amax agreement).
enum class Reduction { kSum, kAvg, kMax };

struct ProcessGroupOptions {
  CommBackend backend = CommBackend::kGloo;
  std::chrono::milliseconds timeout{std::chrono::seconds(120)};
  // gloo only: the timeout of the full-mesh connect that creates the group, when it should be
  // shorter than the collectives' `timeout` (zero: the same). gloo waits up to five times this
  // for a peer's connection (tcp::Pair::waitUntil) and this for each rendezvous key; the
  // collectives run under `timeout` afterwards (ProcessGroupGloo::setTimeout).
  std::chrono::milliseconds connect_timeout{0};
  // Address the gloo transport binds to: loopback for single-host runs; empty: this host's
  // default interface (multi-node).
  std::string gloo_hostname = "127.0.0.1";
  // CUDA device index for NCCL (LOCAL_RANK).
  int device_index = 0;
  bool high_priority_stream = false;
};

// A communicator: one c10d Backend plus its rank and size. Collectives are asynchronous
// (asyncOp=true): NCCL runs them on the backend's own stream after it waits on the caller's
// current stream, gloo on its worker threads. Callers keep inputs alive until wait().
class ProcessGroup {
 public:
  // Creates the backend under `prefix` in `store` (each group needs its own key space).
  static std::shared_ptr<ProcessGroup> create(const c10::intrusive_ptr<c10d::Store>& store,
                                              const std::string& prefix, int rank, int world,
                                              const ProcessGroupOptions& options);

  int rank() const { return rank_; }
  int world() const { return world_; }
  CommBackend backend_kind() const { return options_.backend; }
  c10d::Backend& backend() { return *backend_; }

  c10::intrusive_ptr<c10d::Work> all_reduce(at::Tensor& tensor, Reduction op);
  // out.numel() * world == in.numel(); this rank receives chunk `rank` of the reduced input.
  c10::intrusive_ptr<c10d::Work> reduce_scatter(at::Tensor& out, at::Tensor& in, Reduction op);
  // out.numel() == world * in.numel(), filled in rank order.
  c10::intrusive_ptr<c10d::Work> all_gather(at::Tensor& out, at::Tensor& in);
  c10::intrusive_ptr<c10d::Work> broadcast(at::Tensor& tensor, int root);
  // All-to-all with per-rank row counts (Megatron's all-to-all-v token dispatch): this rank sends
  // rows [sum(in_splits[0..r)), +in_splits[r]) of `in` (cut along dim 0) to rank r, and receives
  // out_splits[r] rows from rank r, in rank order. `out` is preallocated with sum(out_splits) rows.
  c10::intrusive_ptr<c10d::Work> all_to_all(at::Tensor& out, at::Tensor& in,
                                            std::vector<int64_t> out_splits,
                                            std::vector<int64_t> in_splits);
  // Blocks the host until every rank arrived (used around timed regions and at shutdown).
  void barrier();
  // destroy_process_group(): waits for queued collectives and releases the communicator (NCCL
  // warns at exit about a group never shut down). After a failure, abort() instead: it does not
  // wait for peers that may be gone. Either is final; the group accepts no more collectives.
  void shutdown();
  void abort();

 private:
  ProcessGroup(c10::intrusive_ptr<c10d::Backend> backend, int rank, int world,
               ProcessGroupOptions options)
      : backend_(std::move(backend)), rank_(rank), world_(world), options_(std::move(options)) {}

  c10d::ReduceOp to_reduce_op(Reduction op) const;

  c10::intrusive_ptr<c10d::Backend> backend_;
  int rank_;
  int world_;
  ProcessGroupOptions options_;
};

// Thrown by a rank that failed only because another rank did (every rank learns of a refusal
// through one collective). Its message names that rank; run_worker() lets the failing rank's
// own reason reach the user first.
class PeerFailedError : public std::runtime_error {
 public:
  PeerFailedError(const std::string& message, int peer_rank)
      : std::runtime_error(message), peer_rank_(peer_rank) {}
  int peer_rank() const { return peer_rank_; }

 private:
  int peer_rank_;
};

// Waits for `work` (null-safe) and rethrows its error with the collective's name.
void wait_work(const c10::intrusive_ptr<c10d::Work>& work, const char* what);

// Call before the first collective when ranks are threads of one process (the engine tests, the
// collectives benchmark). It turns off c10d's FlightRecorder, a process-wide singleton that
// threads sharing it can corrupt (docs/testing.md). A TORCH_FR_BUFFER_SIZE the caller exported
// wins. perf-launch runs one process per rank and does not call it.
void prepare_thread_ranks();

}  // namespace shardbench
