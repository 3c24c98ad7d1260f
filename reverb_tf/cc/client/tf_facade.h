// SPDX-License-Identifier: Apache-2.0
// The narrow, standard-library-only interface of libreverb_tf.so that the
// TensorFlow kernels (kernels/) use.
//
// The kernels compile against TensorFlow's headers, which bring TF's own
// absl and protobuf; ours must never meet them in one translation unit
// (../../../docs/native_linking.md). So this header includes nothing but the
// standard library and the core's plain SampleInfo (which includes nothing
// else either), and everything crosses as plain structs.
//
// Thread safety: functions are thread-safe; a FacadeSampler is used by one
// thread at a time except Cancel(), which may be called from any thread.
#ifndef REVERB_TF_CC_CLIENT_TF_FACADE_H_
#define REVERB_TF_CC_CLIENT_TF_FACADE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "reverb_tf/cc/platform/export.h"
#include "reverb_tf/cc/sample_info.h"

namespace reverb_tf::tf_facade {

// A canonical status code (same numbering as absl, gRPC and TF) and message.
struct Status {
  int code = 0;
  std::string message;
  bool ok() const { return code == 0; }
};

// An uncompressed tensor: dtype in TF's numbering, row-major bytes; strings
// are <varint length><bytes> per element.
struct Tensor {
  int32_t dtype = 0;
  std::vector<int64_t> shape;
  std::string data;
};

struct Sample {
  SampleInfo info;
  std::vector<Tensor> columns;
  // squeezed[i]: column i is one step stored without its time dimension.
  std::vector<bool> squeezed;
};

struct SamplerOptions {
  int64_t max_in_flight = 256;           // per stream
  int64_t max_samples = -1;              // in all; < 0: unlimited
  int64_t rate_limiter_timeout_ms = -1;  // < 0: wait forever
  int32_t num_streams = -1;              // < 1: one per shard
  int64_t max_samples_per_stream = -1;   // then a new stream; < 0: no limit
};

class REVERB_TF_EXPORT FacadeSampler {
 public:
  virtual ~FacadeSampler() = default;
  // OUT_OF_RANGE after max_samples; DEADLINE_EXCEEDED on rate limiter
  // timeout; CANCELLED after Cancel().
  virtual Status Next(Sample* sample) = 0;
  virtual void Cancel() = 0;
};

// Opens a sampler of `table` at `server_address` (one server or several
// shards, client/target.h).
REVERB_TF_EXPORT Status NewSampler(const std::string& server_address,
                                   const std::string& table,
                                   const SamplerOptions& options,
                                   std::unique_ptr<FacadeSampler>* sampler);

// One column of a table's signature, flattened: dtype in TF's numbering,
// shape with -1 for a dimension of any size.
struct ColumnSignature {
  std::string name;
  int32_t dtype = 0;
  std::vector<int64_t> shape;
};

// The flat signature of `table` at `server_address`, asked of the server.
// `has_signature` is false (and the status OK) when the server has no such
// table or the table no signature. timeout_ms < 0: an unreachable server
// fails at once (UNAVAILABLE) instead of being waited for.
REVERB_TF_EXPORT Status
GetTableSignature(const std::string& server_address, const std::string& table,
                  int64_t timeout_ms, bool* has_signature,
                  std::vector<ColumnSignature>* columns);

// Decodes the elements of a string tensor.
REVERB_TF_EXPORT Status DecodeStrings(const Tensor& tensor,
                                      std::vector<std::string>* out);

// Updates priorities on every shard that holds the keys. `warning` (may be
// null) receives what the caller should log about skipped keys, at most once
// a minute (client.h, MutationReport::warning); empty otherwise.
REVERB_TF_EXPORT Status UpdatePriorities(const std::string& server_address,
                                         const std::string& table,
                                         const std::vector<uint64_t>& keys,
                                         const std::vector<double>& priorities,
                                         int64_t timeout_ms,
                                         std::string* warning);

// Inserts one single-step item holding `columns` into each of `tables` with
// the matching priority, and waits until the server has stored them. As
// dm-reverb's TFClient.insert, each column keeps a time dimension of 1 and
// is checked against the signature as a legacy item (Item::legacy_steps).
REVERB_TF_EXPORT Status InsertItem(const std::string& server_address,
                                   const std::vector<std::string>& tables,
                                   const std::vector<double>& priorities,
                                   std::vector<Tensor> columns,
                                   int64_t timeout_ms);

// -- The graph-mode trajectory writer (kernels/trajectory_writer_kernels.cc)

struct WriterOptions {
  int32_t num_keep_alive_refs = 1;
  // 0: num_keep_alive_refs.
  int32_t max_chunk_length = 0;
  int32_t max_in_flight_items = 128;
  // False: items are not checked against the table's signature, neither
  // here nor by the server (as the Python writer's validate_items=False).
  bool validate_items = true;
};

// One column of an item: entries of `column`'s history, which holds the
// steps since the writer began or since EndEpisode(clear_buffers=true). Not
// squeezed: the entries [start, stop) with Python's slice semantics (negative
// values count back from the newest step; has_start/has_stop false: open
// end). Squeezed: the single entry `start`, without a time dimension.
struct ItemColumnRef {
  int32_t column = 0;
  int64_t start = 0;
  int64_t stop = 0;
  bool has_start = false;
  bool has_stop = false;
  bool squeeze = false;
};

// A cancellation signal for one blocking call: Cancel() (from any thread,
// e.g. TensorFlow's step cancellation) makes the call return CANCELLED.
class REVERB_TF_EXPORT CallCancellation {
 public:
  class Impl;
  CallCancellation();
  ~CallCancellation();
  CallCancellation(const CallCancellation&) = delete;
  CallCancellation& operator=(const CallCancellation&) = delete;
  void Cancel();
  Impl* impl() const { return impl_; }

 private:
  Impl* impl_;
};

// The C++ TrajectoryWriter (trajectory_writer.h) behind plain structs: the
// same items, chunks and checks as the Python writer's. `cancel` may be null.
//
// Thread safety: thread-safe (calls are serialized; TensorFlow may run two
// ops on one writer at once when a program does not order them).
class REVERB_TF_EXPORT FacadeTrajectoryWriter {
 public:
  virtual ~FacadeTrajectoryWriter() = default;
  // Appends one step (or, with partial_step, part of one): values[i] for
  // column columns[i], the other columns missing. `names[i]` names a column
  // (its path) in error messages. `step` receives the step's index.
  virtual Status Append(const std::vector<int32_t>& columns,
                        const std::vector<std::string>& names,
                        std::vector<Tensor> values, bool partial_step,
                        int64_t* step) = 0;
  // Queues an item; checks it against the table's signature first (fetched
  // from the server on the table's first item) unless validate_items is
  // false. Blocks while max_in_flight_items are unconfirmed.
  virtual Status CreateItem(const std::string& table, double priority,
                            const std::vector<ItemColumnRef>& columns,
                            CallCancellation* cancel) = 0;
  // timeout_ms < 0: wait forever.
  virtual Status Flush(int32_t block_until_num_items, int64_t timeout_ms,
                       CallCancellation* cancel) = 0;
  virtual Status EndEpisode(bool clear_buffers, int64_t timeout_ms,
                            CallCancellation* cancel) = 0;
  // Steps since the last EndEpisode (an open partial step excluded).
  virtual int32_t episode_steps() = 0;
};

REVERB_TF_EXPORT Status NewTrajectoryWriter(
    const std::string& server_address, const WriterOptions& options,
    std::unique_ptr<FacadeTrajectoryWriter>* writer);

}  // namespace reverb_tf::tf_facade

#endif  // REVERB_TF_CC_CLIENT_TF_FACADE_H_
