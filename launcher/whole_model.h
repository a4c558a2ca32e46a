// The whole model's flat layout (one rank's parameter order: wte, wpe, h.0 ... h.L-1, lnf) and
// moving the flat tensors (parameters, master weights, Adam moments) of pipeline stages and of
// their tensor-parallel shards to and from it. Checkpoints and weight exports are written in this
// layout, so they do not depend on the pipeline size: a run can resume with another one.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/checkpoint.h"
#include "core/comm.h"
#include "core/parameters.h"
#include "core/runtime.h"
#include "models/gpt.h"

namespace trellis {

// A stage's parts are its tensor ranks' shards or, under expert parallelism (moe.expert_parallel =
// G > 1), its expert ranks' parameters: each holds the stage's other parameters (its tensor shard of
// them) and its own experts. With both, part j * G + g is tensor rank j's shard on expert rank g.
// Below, "tensor rank" is the part's index.
struct WholeModelLayout {
  // p pipeline ranks with v chunks each, each stage split over t tensor ranks (p = t = 1: the
  // whole model on one rank), or over cfg.moe.expert_parallel expert ranks.
  WholeModelLayout(const GPTConfig& cfg, int p, int v, int t = 1);

  std::vector<ParameterSpec> whole;               // the whole model's parameters, in buffer order
  std::vector<std::vector<ParameterSpec>> stage;  // each pipeline rank's parameters (whole tensors), in buffer order
  std::vector<std::vector<ParameterSpec>> shard;  // [pipeline rank * t + tensor rank]: its shards, in buffer order
  int64_t whole_numel() const;
  int64_t stage_numel(int rank) const;
  int64_t shard_numel(int pipeline_rank, int tensor_rank) const;
  const std::vector<ParameterSpec>& shard_of(int pipeline_rank, int tensor_rank) const;
  bool expert_parts = false;  // the parts are expert ranks (each holds its own experts whole)
  int pipeline() const { return int(stage.size()); }
  int tensor() const { return int(shard.size() / stage.size()); }
};

// Pipeline rank 0 of tensor rank 0 gets the whole-model host copy (bytes, in t's dtype) of the
// flat tensors `t` of every rank of `tensor` x `pipeline`; every other rank sends its `t` and gets
// an empty vector. Each stage is first assembled on its tensor rank 0 from the shards (replicated
// parameters from that rank), then the stages on pipeline rank 0; the token embedding is taken
// from the first stage (the last one holds an identical copy). Collective over `tensor`, then over
// the `pipeline` group of tensor rank 0 (either may be null when of size 1).
std::vector<char> gather_whole(Runtime& rt, Communicator* tensor, Communicator* pipeline, const WholeModelLayout& layout,
                               const Tensor& t);

// Fills the flat tensor `t` of (pipeline rank, tensor rank) from a whole-model host copy (bytes in
// t's dtype): each shard is the matching slice of the whole tensor.
void scatter_whole(Runtime& rt, const WholeModelLayout& layout, int pipeline_rank, int tensor_rank,
                   const std::vector<char>& whole, const Tensor& t);
// The same from the whole tensors alone: tensor(name) gives one's host values (elements of t's
// dtype), for the tensors that (pipeline rank, tensor rank) holds (WholeModelLayout::shard_of).
void scatter_tensors(Runtime& rt, const WholeModelLayout& layout, int pipeline_rank, int tensor_rank,
                     const std::function<const char*(const std::string& name)>& tensor, const Tensor& t);

// Reads blob `name` of `reader`, a whole-model layout (`whole`'s tensors in order, elements of e
// bytes), and gives f(tensor, byte offset in it, bytes, count) for each piece of the tensors that
// wanted(tensor) accepts, in order; whole elements, as the reader's chunks are multiples of 8 bytes.
// Where the blob has chunk checksums only the chunks holding those tensors are read, each verified
// before f sees it; else the whole blob is streamed and its checksum checked after the last piece
// (CheckpointError: what f kept must not be used).
void stream_whole_tensors(const CheckpointReader& reader, const std::string& name, const std::vector<ParameterSpec>& whole,
                          size_t e, const std::function<bool(const std::string& tensor)>& wanted,
                          const std::function<void(const std::string& tensor, uint64_t at, const char* bytes, size_t n)>& f);

// Writes the flat tensor `shard` of (pipeline rank, tensor rank) (bytes, elem_size each) into its
// place in the whole-model host copy `whole`, as gather_whole would: a tensor held by an earlier
// pipeline rank too (the head's copy of the token embedding) and the replicated tensors of
// tensor ranks other than 0 are left to those.
void place_shard(const WholeModelLayout& layout, int pipeline_rank, int tensor_rank, const char* shard,
                 std::vector<char>& whole, size_t elem_size);

}  // namespace trellis
