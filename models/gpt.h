// GPT-2: token + position embedding -> n_layers pre-LN blocks -> final LayerNorm -> LM head (tied
// to the token embedding, or a matrix of its own: model.tie_embeddings), with a cross-entropy loss
// over the padded vocabulary (padding masked).
// A GPT object holds the whole model or, under pipeline parallelism, one rank's part of it: one or
// more chunks of consecutive blocks, the first possibly starting with the embedding and the last
// possibly ending with the head. Parameter names keep global layer indices ("h.7.attn.qkv.w"), so
// initialization, dropout masks and checkpoints do not depend on the split.
//
// Under tensor parallelism (a TensorParallelContext) the blocks are split as transformer_block.h
// says, and the token embedding wte (Vp, C), and an untied head's lm_head.w, by rows: rank r holds
// the vocabulary shard [r*Vp/t, (r+1)*Vp/t). The embedding sums the shards' lookups over the tensor
// group (all-reduce, or reduce-scatter into token shards with sequence parallelism); the head computes the
// logits of its own vocabulary shard only and the vocabulary-parallel cross-entropy, so the full
// logits never exist on any rank. With sequence parallelism the activations between the
// embedding and the head, the final LayerNorm included, are this rank's token rows.
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "core/parameters.h"
#include "models/gpt_config.h"
#include "models/transformer_block.h"
#include "parallel/data/embedding_rows.h"
#include "parallel/pipeline/partition.h"
#include "parallel/tensor/vocab_parallel.h"
#include "parallel/zero/block_hooks.h"

namespace trellis {

// Activation memory one micro-batch of (B, T) needs, by part.
struct ActivationBytes {
  size_t kept = 0;   // kept from forward to backward
  size_t work = 0;   // temporaries of one block or of one head chunk at a time
  size_t total() const { return kept + work; }
};

// Which part of the model a rank holds.
struct GPTPart {
  std::vector<LayerRange> chunks;  // blocks [begin, end) of each model chunk, in chunk order
  bool embedding = true;           // the first chunk starts with the embeddings (first stage)
  bool head = true;                // the last chunk ends with final LayerNorm, head, loss (last stage)

  static GPTPart whole(const GPTConfig& cfg) { return GPTPart{{{0, int(cfg.n_layers)}}, true, true}; }
  // Pipeline rank `rank` of p with v chunks each: chunk c is virtual stage c * p + rank of the
  // p * v chunks of GPT::pipeline_partition.
  static GPTPart of_rank(const GPTConfig& cfg, int p, int v, int rank);
  bool has_embedding(int chunk) const { return embedding && chunk == 0; }
  bool has_head(int chunk) const { return head && chunk == int(chunks.size()) - 1; }
};

class GPT {
 public:
  // Builds the parameter store of `part` and activation memory for `slots` micro-batch chunks in
  // flight (the pipeline schedule's peak; 1 without pipelining), each of (micro_batch, seq_len).
  // `tp`: this rank's place in the tensor group (default: none). The flat parameter and gradient
  // buffers are bucketed and sharded as `sharding` says (ParameterStore). `experts`: the expert group
  // when moe.expert_parallel > 1 (this rank holds the experts of its rank in it).
  GPT(Runtime& rt, const GPTConfig& cfg, int64_t micro_batch, const GPTPart& part, int slots = 1,
      const TensorParallelContext& tp = {}, const StoreSharding& sharding = {}, Communicator* experts = nullptr);
  GPT(Runtime& rt, const GPTConfig& cfg, int64_t micro_batch) : GPT(rt, cfg, micro_batch, GPTPart::whole(cfg)) {}

  // This rank's parameters: the shards of tensor rank tp.rank of tp.size (only those two are used),
  // and the experts of expert rank `expert_rank` (moe.expert_parallel > 1; else all of them).
  static std::vector<ParameterSpec> parameter_specs(const GPTConfig& cfg, const GPTPart& part,
                                                    const TensorParallelContext& tp = {}, int expert_rank = 0);
  // UserError unless a tensor group of `tensor` ranks can split the model (heads, d_ffn, the padded
  // vocabulary).
  static void check_tensor_parallel(const GPTConfig& cfg, int tensor);
  static std::vector<ParameterSpec> parameter_specs(const GPTConfig& cfg) {
    return parameter_specs(cfg, GPTPart::whole(cfg));
  }
  // Whole model: kept activations of one micro-batch and the workspace.
  static ActivationBytes activation_bytes(const GPTConfig& cfg, int64_t B, int64_t T);
  // `part`: kept activations of one slot (its largest chunk) and the workspace, on one rank of `tp`.
  static ActivationBytes activation_bytes(const GPTConfig& cfg, const GPTPart& part, int64_t B, int64_t T,
                                          const TensorParallelContext& tp = {});
  // Blocks over `chunks` virtual stages: as cfg.stage_layers lists them, or (empty) balanced by
  // compute cost (stage_costs, partition_layers).
  static std::vector<LayerRange> pipeline_partition(const GPTConfig& cfg, int chunks);
  // Cost model of the partition, in FLOPs per token of forward + backward (backward = 2 forward):
  // a block 72 C^2 + 12 T C (its GEMMs and attention, as in 6N + 12 L C T); the head 6 C V
  // (V = padded vocabulary; the logits GEMM and its two gradients) plus 8 C for the final
  // LayerNorm; the embedding 8 C (no GEMM: a gather, dropout and a scatter-add, a few passes
  // over C numbers per token, i.e. negligible, as on the GPU).
  // A block with experts: its attention and router, and the experts' GEMMs over their slots
  // (capacity_factor x top_k, dropless top_k, x the dense MLP's 48 C^2).
  struct StageCosts {
    int64_t block = 0, embedding = 0, head = 0, moe_block = 0;
  };
  static StageCosts stage_costs(const GPTConfig& cfg);

  // ParameterStore::initialize: with `data`, each data rank draws 1/N of the parameters.
  void initialize(uint64_t seed, Communicator* data = nullptr) { params_.initialize(seed, data); }
  // Called around every block's forward and backward from now on (null: none).
  void set_block_hooks(BlockHooks* hooks) { hooks_ = hooks; }
  // With a chunk holding both the embedding and the head: the backward that reports ready
  // gradients reports wte's first (its classifier part is final since the forward) and hands the
  // embedding's rows to `x` instead of scattering them (null: the plain embedding backward).
  void set_embedding_exchange(EmbeddingRowExchange* x) {
    TRELLIS_CHECK(!x || (!tp_.active() && cfg_.tied_head), "GPT: the embedding row exchange needs tensor = 1 and a tied head");
    embedding_exchange_ = x;
  }
  ParameterStore& params() { return params_; }
  const GPTConfig& config() const { return cfg_; }
  const GPTPart& part() const { return part_; }
  int slots() const { return int(slots_.size()); }

  // Called during backward with [begin, end) element ranges of the flat gradient buffer whose
  // gradients are final for this micro-batch (data-parallel reduction can start on them).
  using GradsReady = std::function<void(int64_t begin, int64_t end)>;

  // Whole model, one micro-batch at a time (no pipeline). tokens, targets: i32 (B, T) on the
  // device. Gradients of dloss * sum(losses) are added to the gradient buffer; sum(losses) is
  // added to loss_sum (f32 scalar on the device). No host synchronization.
  void forward_backward(const StepContext& ctx, const Tensor& tokens, const Tensor& targets, float dloss,
                        const Tensor& loss_sum, const GradsReady& grads_ready = nullptr);
  // Forward and loss only (validation): adds sum(losses) to loss_sum.
  void forward_loss(const StepContext& ctx, const Tensor& tokens, const Tensor& targets, const Tensor& loss_sum);

  // One chunk of one micro-batch at a time (the pipeline). A slot holds what backward needs.
  // Takes a free slot for `chunk` and micro-batches of (B, T) (default: the full size); fatal when
  // every slot is in use.
  int acquire_slot(int chunk, int64_t B = -1, int64_t T = -1);
  // Where the slot's input activation (B, T, C) goes, for a chunk without the embedding (with
  // sequence parallelism: this rank's (B*T/t, C) token rows).
  Tensor slot_input(int slot) const;
  // Forward of the slot's chunk with the micro-batch of `ctx`. A chunk with the embedding reads
  // `tokens` (kept in the slot for backward), and with document masking every chunk reads them (their
  // document starts, kept in the slot); a chunk with the head reads `targets`, adds
  // sum(losses) to loss_sum and, if `backward`, also computes the head's gradient with scale dloss
  // (fused with the loss, so the logits are never kept). Returns the chunk's output (B, T, C),
  // valid until the slot is released, or an undefined tensor for a chunk with the head.
  Tensor forward_chunk(int slot, const StepContext& ctx, const Tensor& tokens, const Tensor& targets, float dloss,
                       const Tensor& loss_sum, bool backward);
  // dres: dL/d(output) on entry (ignored for a chunk with the head), dL/d(input) on return (for a
  // chunk with the embedding: the embeddings' gradients are added instead). Releases the slot.
  void backward_chunk(int slot, const Tensor& dres, const GradsReady& grads_ready = nullptr);
  void release_slot(int slot);

  // Element ranges [begin, end) of the flat layout.
  using Ranges = std::vector<std::pair<int64_t, int64_t>>;
  // The gradients that the global gradient norm counts on this rank, as maximal runs: all of
  // them, except the token embedding on a rank that holds it only for the head (the first stage
  // counts it) and, on tensor ranks other than 0, the replicated parameters (rank 0 counts them),
  // so summing the squares over the tensor and pipeline groups counts each element once.
  Ranges grads_counted_once(bool experts = true) const;
  // The experts' gradients under expert parallelism (ParameterSpec::expert) that the norm counts on
  // this rank (on tensor ranks other than 0 not the replicated ones), as maximal runs; with
  // experts = false grads_counted_once leaves them out (they are counted over the expert group).
  Ranges expert_grads() const;
  // Gradients that are partial sums over the tensor group after backward (sequence parallelism:
  // the LayerNorms, applied to token shards); the trainer all-reduces them once per step.
  Ranges tensor_partial_grads() const;
  // The token embedding's range when this rank holds it and the head is tied to it, else none.
  Ranges tied_embedding() const;

  // Peak bytes used in the activation arenas so far.
  size_t activation_peak() const;

 private:
  struct Slot {
    Arena acts;
    std::vector<BlockSaved> blocks;  // of the slot's chunk
    int chunk = -1;                  // -1: free
    StepContext ctx;
    Tensor input;                    // chunk input: the received activation or the embeddings
    Tensor tokens;                   // chunk with the embedding: the micro-batch's tokens
    Tensor positions;                // and with GPTConfig::document_positions their places in their documents
    Tensor out;                      // the last block's output
    Tensor lnf, lnf_mean, lnf_rstd;  // chunk with the head; lnf becomes dL/dlnf in place
    int64_t B = 0, T = 0;            // the micro-batch's shape
  };
  // Head over row chunks of x, the full (B*T, C) final LayerNorm output: logits of this rank's
  // vocabulary shard, loss (and, if backward, dlogits -> the head weight's gradient, and this rank's part of dL/dx
  // written over x, to be summed over the tensor group by the caller).
  void head(const Tensor& x, const Tensor& targets, float dloss, const Tensor& loss_sum, bool backward);
  // The cross-entropy of one row chunk of logits (this rank's vocabulary columns); dlogits
  // written over the logits if backward. stats: f32 (3 * rows) scratch for the row statistics.
  void cross_entropy(const Tensor& losses, const Tensor& logits, const Tensor& targets, const Tensor& stats,
                     float dloss, bool backward);
  // x (the slot's input) = the embeddings of `tokens`, summed over the vocabulary shards.
  void embed(const Tensor& tokens, const Tensor& positions, const Tensor& x);  // positions: undefined = t
  int64_t rows_of(int64_t B, int64_t T) const;      // this rank's token rows of a (B, T) micro-batch
  Shape activation_shape(int64_t B, int64_t T) const;  // (B, T, C), or (rows, C) for token shards
  int64_t vocab_begin() const;                     // the first row of this rank's wte (and lm_head.w) shard
  const Parameter& head_weight() const;            // wte if the head is tied to it, else lm_head.w
  DropoutKey embedding_dropout_key(const StepContext& ctx, int64_t rows) const;
  // [begin, end) of the parameters whose names start with `prefix` (consecutive by construction;
  // a block's experts may be a bucket of their own, after the padding of the block's other bucket).
  std::pair<int64_t, int64_t> range_of(const std::string& prefix) const;
  // The block hooks around block i of the chunk whose blocks are [first, end), run in `forward` or
  // backward order: its bucket and its experts' (if a bucket of their own), each told which bucket
  // of its kind comes next in that order (the nearest block with experts, for the experts').
  void before_block(size_t i, size_t first, size_t end, bool forward);
  void after_block(size_t i, bool forward);

  Runtime& rt_;
  GPTConfig cfg_;
  int64_t micro_batch_;
  GPTPart part_;
  TensorParallelContext tp_;
  ParameterStore params_;
  std::vector<TransformerBlock> blocks_;  // every block of every chunk, in chunk order
  std::vector<size_t> chunk_begin_;       // index into blocks_ of each chunk's first block
  std::vector<Slot> slots_;
  Arena work_;       // temporaries, reset after each block
  Buffer dres_buf_;  // gradient of the residual stream for forward_backward
  // The learned position table of the embedding stage; null with rotary positions (model.rope).
  const Parameter* wpe() const { return cfg_.rope ? nullptr : &params_.get("wpe"); }
  // Gradient ranges reported to GradsReady: blocks (as in blocks_), then lnf, wte, wpe; head_range_
  // is lm_head.w's (reported with lnf) or, tied, wte's.
  std::vector<std::pair<int64_t, int64_t>> block_ranges_;
  std::pair<int64_t, int64_t> lnf_range_{-1, -1}, wte_range_{-1, -1}, wpe_range_{-1, -1}, head_range_{-1, -1};
  std::vector<int> block_buckets_;  // the store's bucket of each block (as in blocks_)
  std::vector<int> experts_buckets_;  // its experts' bucket, or -1 (as in blocks_)
  BlockHooks* hooks_ = nullptr;
  EmbeddingRowExchange* embedding_exchange_ = nullptr;
  std::optional<VocabParallelEmbedding> vocab_embedding_;  // under tensor parallelism, with the embedding
};

}  // namespace trellis
