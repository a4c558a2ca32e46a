// The model's parameters as named views into one flat buffer (compute dtype), with gradients in
// a second flat buffer (f32, or the 16-bit compute dtype under train.grad_dtype; at ZeRO stages >= 2
// only for the buckets kept whole). Initialization is keyed by (seed, name, GLOBAL element index), so a
// tensor-parallel shard of a parameter is exactly the slice of what one rank would have drawn.
//
// The flat layout is cut into buckets (a transformer block's parameters, or a few others),
// each padded (with zeros) to a multiple of 64 x the ZeRO shard count so that every data rank
// owns one equal, aligned piece of every bucket. ZeRO stages 2 and 3 stream the blocks' buckets (a
// block's experts' too, when their expert-data group has > 1 rank): their gradients (stage 2), and
// their values too (stage 3), exist only while bound to a slot (bind_grads / bind_values); at
// stage 3 this rank keeps only its piece of each streamed bucket's values.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/alloc.h"
#include "core/runtime.h"

namespace trellis {

class Communicator;

enum class Init { normal, zeros, ones };

// How a parameter is split over the tensor-parallel group. Dimension `dim` of the full tensor is
// viewed as `groups` equal groups, each cut into `parts` equal pieces; rank `index` holds its piece
// of every group, in group order. groups = 3 splits the fused qkv weight so that each rank holds
// [q | k | v] of its own heads. parts = 1 is a replicated parameter.
struct TensorSplit {
  int dim = 0;  // 0 = rows (out features of a weight), 1 = columns (in features)
  int parts = 1;
  int index = 0;
  // The dimension is `groups` consecutive groups, each split over the parts (rank r holds part r of
  // every group): equal ones, or with first_units > 1 a first group that many times as wide as each
  // other (grouped-query attention's qkv: [q | k | v], q H / Hkv times k's width).
  int groups = 1;
  int first_units = 1;

  bool replicated() const { return parts == 1; }
  int units() const { return groups - 1 + first_units; }
  // [begin, end) of group g along a split dimension of n elements (the whole or one shard's).
  std::pair<int64_t, int64_t> group_range(int64_t n, int g) const {
    const int64_t unit = n / units(), begin = g == 0 ? 0 : int64_t(first_units + g - 1) * unit;
    return {begin, begin + (g == 0 ? first_units : 1) * unit};
  }
  // The full tensor's shape, from a shard of shape `local`.
  Shape global_shape(const Shape& local) const;
  // The shard's shape, from the full tensor's (fatal unless groups * parts divides the dimension).
  Shape local_shape(const Shape& global) const;
  // Flat index in the full tensor of the shard's element `local_index`.
  int64_t global_index(const Shape& local, int64_t local_index) const;
};

struct ParameterSpec {
  std::string name;  // "h.3.attn.qkv.w"
  Shape shape;       // this rank's (local) shape
  Init init = Init::normal;
  float std = 0.02f;
  bool decay = false;  // weight decay applies to 2-D weights only
  TensorSplit split = {};  // default: replicated, shape is the full shape
  // Its bucket: consecutive parameters with the same id (and `expert` flag) form one; an id >= 0 is
  // a transformer block's (which ZeRO stages 2 and 3 stream), negative ids are other parameters'
  // (kept whole).
  int bucket = -1;
  // An expert's parameter under expert parallelism: held by the ranks of one expert-data group only,
  // so a block's experts are a bucket of their own (same id), sharded over that group
  // (StoreSharding::expert_shards) and streamed like the block's when that group has > 1 rank.
  bool expert = false;

  Shape global_shape() const { return split.global_shape(shape); }
};

// `full` (shape = the full shape) as rank `index` of `parts` holds it, split along `dim`.
ParameterSpec shard_spec(const ParameterSpec& full, int dim, int parts, int index, int groups = 1,
                         int first_units = 1);

struct Parameter {
  ParameterSpec spec;
  int64_t offset = 0;  // in elements, within the flat buffers
  Tensor value;        // view into the parameter buffer (compute dtype)
  Tensor grad;         // view into the gradient buffer (the store's grad_dtype)
  // ParameterStore::write_first: zero_grads leaves this gradient as it is and marks it fresh; the
  // first op that writes it in the step overwrites it (grad_accumulates), saving the zero fill.
  bool first_write = false;
  mutable bool grad_fresh = false;
};

// p's value / gradient, or an empty tensor where p is null (an optional parameter: RMSNorm has no bias).
const Tensor& value_or_empty(const Parameter* p);
const Tensor& grad_or_empty(const Parameter* p);

// Whether an op writing p's gradient must add to it: false for the first write of a step into a
// fresh (unzeroed) gradient, which must overwrite it. Marks the gradient written.
inline bool grad_accumulates(const Parameter& p) {
  const bool accumulate = !p.grad_fresh;
  p.grad_fresh = false;
  return accumulate;
}

// How the buffers are split over the data group (ZeRO) and what is streamed.
struct StoreSharding {
  int shards = 1, shard = 0;   // each bucket cut into `shards` equal pieces; this rank owns piece `shard`
  // The experts' buckets (ParameterSpec::expert) over the expert-data group instead.
  int expert_shards = 1, expert_shard = 0;
  bool stream_grads = false;   // stage >= 2: blocks' gradients only in bound slots
  bool stream_values = false;  // stage 3: blocks' values only in bound slots and this rank's piece
};

// Parameters [first, end) at [offset, offset + numel) of the flat layout, padded to `padded`.
struct ParameterBucket {
  size_t first = 0, end = 0;
  int64_t offset = 0, numel = 0, padded = 0;
  int block = -1;                  // the transformer block (the specs' bucket id), or -1
  bool grads_streamed = false, values_streamed = false;
  bool expert = false;             // a block's experts' parameters: cut over the expert-data group
  int64_t piece = 0;               // padded / its shard count: what each rank of its group owns
};

// A bucket of n elements padded for `shards` ranks: what each bucket's `padded` is.
int64_t padded_bucket_size(int64_t n, int shards);

// The buckets of a store of `specs` whose buckets are cut into `shards` pieces, the experts' into
// `expert_shards` (nothing streamed): what decides which elements each rank owns at ZeRO stages >= 1.
std::vector<ParameterBucket> plan_buckets(const std::vector<ParameterSpec>& specs, int shards, int expert_shards = 1);

class ParameterStore {
 public:
  // grad_dtype: f32, or `dtype` (16-bit gradients: only unsharded, unstreamed stores).
  ParameterStore(Runtime& rt, const std::vector<ParameterSpec>& specs, DType dtype, const StoreSharding& sharding = {},
                 DType grad_dtype = DType::f32);

  // Draws every parameter from (seed, name, index) on the host and copies it to the device (at
  // stage 3 only this rank's piece of the streamed buckets). With `data`, a group of N > 1 ranks
  // whose stores hold the same parameters, each draws 1/N and the group completes the rest
  // (collective): a sharded store draws its pieces and all-gathers the buckets it keeps whole, an
  // unsharded one draws its 1/N of the storage and broadcasts it.
  void initialize(uint64_t seed, Communicator* data = nullptr);
  // Zeroes the gradients held in the store (the streamed ones are zeroed when bound), except those of
  // write_first parameters, which are only marked fresh.
  void zero_grads();
  // p's gradient is written by ops that ask grad_accumulates first, every step (the model's promise).
  void write_first(const Parameter& p);
  // Fatal if a write_first gradient was not written since zero_grads (it would hold stale values).
  void check_grads_written() const;

  const StoreSharding& sharding() const { return sharding_; }
  // The piece of bucket b this rank owns (its index in the bucket's group).
  int shard_of(int b) const;
  const std::vector<ParameterBucket>& buckets() const { return buckets_; }
  // The bucket of block `layer` (its parameters but the experts'); fatal if this store has none.
  int bucket_of_block(int layer) const;
  // The bucket of block `layer`'s experts under expert parallelism, or -1.
  int experts_bucket_of_block(int layer) const;
  // Bucket b's padded gradients / values (`padded` elements): in the store, or the bound slot
  // (undefined while a streamed bucket is unbound).
  Tensor bucket_grads(int b) const;
  Tensor bucket_values(int b) const;
  // This rank's piece of bucket b's values (`piece` elements).
  Tensor owned_values(int b) const;
  // Points bucket b's parameters' gradient / value views into `slot` (>= padded elements), or
  // unbinds them (undefined slot). Only for streamed buckets.
  void bind_grads(int b, const Tensor& slot);
  void bind_values(int b, const Tensor& slot);

  const Parameter& operator[](size_t i) const { return params_[i]; }
  const Parameter& get(const std::string& name) const;
  const Parameter* find(const std::string& name) const;  // null where there is none
  size_t size() const { return params_.size(); }
  const std::vector<Parameter>& all() const { return params_; }
  int64_t numel() const { return numel_; }         // real elements
  int64_t padded_numel() const { return padded_numel_; }  // of the flat layout, with the buckets' padding
  DType dtype() const { return dtype_; }
  DType grad_dtype() const { return grad_dtype_; }
  // The whole flat layout (padded_numel elements; its padding is zeros). Fatal when streaming.
  Tensor flat_values() const;
  Tensor flat_grads() const;
  // Bytes the store holds on the device: values and gradients.
  size_t value_bytes() const { return values_.bytes(); }
  size_t grad_bytes() const { return grads_.bytes(); }

 private:
  Runtime& rt_;
  DType dtype_, grad_dtype_;
  StoreSharding sharding_;
  int64_t numel_ = 0, padded_numel_ = 0;
  std::vector<Parameter> params_;
  std::vector<ParameterBucket> buckets_;
  std::vector<int64_t> value_at_, grad_at_;  // per bucket: where its storage starts (-1: none)
  std::vector<Tensor> bound_values_, bound_grads_;  // per bucket: its padded values / gradients, or undefined
  void bind_values_unchecked(int b, const Tensor& slot);
  void bind_grads_unchecked(int b, const Tensor& slot);
  Buffer values_;
  Buffer grads_;
};

// Elements of the largest bucket a store of `specs` makes (before padding).
int64_t largest_bucket_numel(const std::vector<ParameterSpec>& specs);

// The initial value of LOCAL element `index` of a parameter: the full tensor's element at the
// matching global index, whatever the split.
float initial_value(uint64_t seed, const ParameterSpec& spec, int64_t index);

}  // namespace trellis
