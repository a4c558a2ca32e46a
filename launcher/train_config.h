// The resolved configuration of a training run: one struct per TOML section. Every key has a
// default and a one-line doc in the key table (config_keys.cpp), which also generates
// docs/config.md.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace trellis {

struct ModelConfig {
  int64_t vocab_size = 50257;   // real vocabulary; padded to a multiple of 128 internally
  int64_t seq_len = 1024;       // context length
  int64_t n_layers = 12;
  int64_t n_heads = 12;
  int64_t n_kv_heads = 0;       // key-value heads (grouped-query attention); 0 = n_heads
  int64_t d_model = 768;
  int64_t head_dim = 0;         // the attention heads' size; 0 = d_model / n_heads
  bool qk_norm = false;         // RMSNorm of every query and key head (Qwen3's)
  std::string position_embedding = "learned";  // learned | rope
  double rope_theta = 10000.0;  // RoPE's frequency base
  std::string rope_scaling = "none";  // none | llama3 (Llama 3.1's frequency scaling) | linear | yarn | longrope
  double rope_scaling_factor = 8.0, rope_low_freq_factor = 1.0, rope_high_freq_factor = 4.0;
  int64_t rope_original_positions = 8192;
  double rope_beta_fast = 32.0, rope_beta_slow = 1.0;  // YaRN's correction range
  double rope_attention_factor = 0.0;  // YaRN's / LongRoPE's q, k scale; 0 = their default
  std::string rope_long_factor, rope_short_factor;  // LongRoPE's per-pair factors, comma-separated
  double partial_rotary_factor = 1.0;  // the fraction of each head's dims RoPE turns (Phi-3's, GPT-NeoX's)
  int64_t sliding_window = 0;   // a query sees this many positions, its own included (Mistral's); 0 = all
  std::string mlp = "gelu";     // gelu | swiglu
  int64_t ffn_hidden_size = 0;  // the dense MLP's hidden width; 0 = 4 x d_model
  std::string norm = "layernorm";  // layernorm | rmsnorm
  double norm_eps = 1e-5;       // the norms' epsilon
  bool bias = true;             // biases in the blocks' linear layers
  bool qkv_bias = false;        // with bias = false, biases on attn.qkv alone (Qwen2's)
  bool tie_embeddings = true;   // the head's weight is the token embedding (else a matrix of its own)
  double dropout = 0.0;         // residual, embedding and (by default) attention dropout probability
  double attention_dropout = -1.0;  // attention-probability dropout; -1 = the same as dropout
  std::string init_from;        // trained parameters a fresh run starts from; empty = random
};

struct ParallelConfig {
  int64_t tensor = 1;
  int64_t pipeline = 1;
  bool sequence_parallel = false;
  int64_t tensor_comm_chunks = 0;  // row blocks of a row-parallel forward's GEMM + all-reduce; 0 = auto
  bool peer_all_reduce = true;     // two ranks of one node: sum all-reduces through peer memory
  bool tensor_split_batch = true;  // tensor-parallel forward in two halves of the micro-batch
  std::string schedule = "1f1b";   // gpipe | 1f1b | interleaved
  int64_t virtual_stages = 1;
  std::string stage_layers;        // "6,6,6,6": blocks per virtual stage; empty = balanced by cost
  double collective_timeout_s = 600;  // a wait on other ranks longer than this aborts the job; 0 = off
  int64_t expert = 1;              // expert-parallel size: data-parallel ranks that split the experts
};

struct TrainConfig {
  std::string device = "auto";     // auto | cpu | cuda
  std::string precision = "auto";  // auto | fp32 | bf16 | fp16 (auto: bf16 on GPU, fp32 on CPU)
  std::string grad_dtype = "auto";  // auto | f32: parameter gradients' storage (config_keys.cpp)
  int64_t micro_batch = 8;
  int64_t global_batch = 0;        // 0 = micro_batch * data ranks
  int64_t steps = 1000;
  int64_t seed = 1337;
  std::string checkpointing = "none";  // none | full | selective | elementwise
  bool deterministic = false;
  double grad_clip = 1.0;          // 0 = off
  bool cuda_graphs = true;         // replay steps as CUDA graphs where they can be (config_keys.cpp)
  int64_t cpu_threads = 0;         // 0 = OpenMP default
  int64_t stop_after = 0;          // stop after this step (with a checkpoint); 0 = off
};

struct OptimizerConfig {
  double lr = 6e-4;
  double min_lr = 6e-5;
  int64_t warmup_steps = 100;
  std::string schedule = "cosine";  // cosine | linear | constant | wsd (launcher/lr_schedule.h)
  int64_t decay_steps = 0;          // wsd: the final decay's steps; 0 = train.steps / 5
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
};

struct ZeroConfig {
  int64_t stage = 0;
  int64_t bucket_mb = 200;         // gradient all-reduce bucket size (MiB)
  bool overlap = true;             // reduce buckets during backward (false: after it)
  std::string reduce_dtype = "f32";  // f32 | bf16 | f16: the dtype gradients are all-reduced in
  std::string embedding_grad = "auto";  // auto | gather_rows | all_reduce (EmbeddingRowExchange)
  std::string offload = "none";    // none | cpu | nvme: master weights and moments off the device, AdamW on the host
  std::string offload_dir;         // nvme: a directory on a fast local disk for their files
};

struct MoESection {
  int64_t experts = 0;             // experts per MoE block; 0 = dense MLPs only
  int64_t top_k = 2;               // experts per token
  double capacity_factor = 1.25;   // slots per expert = factor x top_k x tokens / experts
  bool dropless = false;           // no capacity: every choice computed (host-sized GEMMs, no CUDA graphs)
  double aux_loss_coef = 0.01;     // load-balancing loss weight
  double z_loss_coef = 0.0;        // router z-loss weight
  int64_t layer_freq = 1;          // block l has experts when l % layer_freq == 0 ...
  int64_t first_dense_layers = 0;  // ... and l >= this
  int64_t shared_experts = 0;      // expert-sized MLPs every token also goes through (one MLP this many experts wide)
  bool shared_gate = false;        // their output times a per-token sigmoid(x . w) (Qwen1.5/2-MoE)
  int64_t ffn_hidden_size = 0;     // an expert's hidden width; 0 = 4 x d_model
  bool renormalize = true;         // top_k > 1: the gates divided by the chosen probabilities' sum
};

struct Fp16Config {
  int64_t initial_scale_power = 16;
  int64_t loss_scale_window = 1000;
  int64_t hysteresis = 2;
  double min_scale = 1.0;
};

struct DataConfig {
  std::string source = "synthetic";  // synthetic (learnable task) | random (uniform tokens) | file
  std::string path;                  // file: a dataset path, or a blend "0.3 PATH_A 0.7 PATH_B"
  double val_fraction = 0.1;         // file: the last fraction of the tokens is the validation split
  bool document_mask = false;        // attention within documents, each closed by eod_token
  int64_t eod_token = -1;            // the end-of-document token's id; -1 = none
  bool reset_positions = false;      // with document_mask: learned positions count from each document's start
  bool eod_mask_loss = false;        // the target after each eod_token left out of the loss
  std::string packing = "stream";    // file: stream (windows of the token stream) | documents (whole ones, padded)
};

struct LogConfig {
  int64_t every = 10;              // a log line every N steps
  std::string metrics_file;        // JSON lines; empty = none
  std::string tensorboard_dir;     // TensorBoard event files; empty = none
  int64_t val_every = 0;           // validation every N steps; 0 = off
  int64_t val_batches = 4;         // global batches per validation
  bool profile_ops = false;        // per-op time breakdown (events around every op, no synchronization)
  int64_t trace_step = 0;          // write a Chrome trace of this step; 0 = none
  std::string trace_file = "trace.json";  // where (with .rankN before .json when world > 1)
};

struct CheckpointConfig {
  std::string dir;                 // empty = no checkpoints
  int64_t every = 0;               // save every N steps; 0 = only at the end / on stop
  int64_t keep = 3;
  std::string resume = "auto";     // auto | none | a checkpoint directory
  bool keep_best = false;          // also keep the state of the lowest validation loss in dir/best
};

struct Config {
  std::string path;                // the file it came from, for messages
  ModelConfig model;
  ParallelConfig parallel;
  TrainConfig train;
  OptimizerConfig optimizer;
  ZeroConfig zero;
  MoESection moe;
  Fp16Config fp16;
  DataConfig data;
  LogConfig log;
  CheckpointConfig checkpoint;
};

// Reads `path` (TOML), applies `overrides` ("section.key=value", converted by the key's type),
// validates everything that does not need the world size. Throws UserError with one line naming
// the file, the key and what is allowed.
Config load_config(const std::string& path, const std::vector<std::string>& overrides);
// The same from TOML text (e.g. the "config" a checkpoint's meta holds); `name` stands for the
// file in messages.
Config load_config_text(const std::string& toml_text, const std::string& name,
                        const std::vector<std::string>& overrides);
// parallel.stage_layers as blocks per virtual stage (global virtual-stage order); empty when the
// key is empty (the balanced partition). Throws UserError (one line naming the file and the key)
// unless it lists parallel.pipeline x parallel.virtual_stages integers >= 1 summing to
// model.n_layers. load_config checks it already.
std::vector<int> parse_stage_layers(const Config& c);
// model.rope_long_factor or model.rope_short_factor (`key`) as numbers. Throws UserError (one line
// naming the file and the key) unless model.rope_scaling = longrope's turned pairs (a head's turned
// dims / 2) of finite numbers > 0 are listed. load_config checks both already.
std::vector<double> parse_rope_factors(const Config& c, const char* key);
// model.ffn_hidden_size where some block has a dense MLP, else 0: with moe.layer_freq = 1 every
// block has experts, so the key sets nothing and enters neither the model's description (checkpoint
// signature, model.json) nor its checks.
int64_t dense_ffn_hidden_size(const Config& c);
// Checks that need the world size (batch arithmetic, layout), features not built yet, and those of
// a training run rather than of the config itself (what checkpoints keep must still load).
void validate_for_world(const Config& c, int world_size);
// Whether tensor-parallel blocks run their forward in two halves of the micro-batch
// (parallel.tensor_split_batch, applicable: tensor > 1, no sequence parallelism, an even micro-batch).
bool tensor_splits_batch(const Config& c);
// parallel.tensor_comm_chunks with 0 (auto) resolved: 2 where two GPU ranks of the tensor group sum
// through the peer all-reduce and the batch is not split, else 1.
int resolved_tensor_comm_chunks(const Config& c, bool on_gpu);

// The batch arithmetic for a world size: global = micro_batch x accumulation x data.
// Micro-batches a step on each data rank, at most: the schedule, the stage timer and the step
// slots grow with them (2^31 of them made the schedule alone an allocation failure).
inline constexpr int64_t kMaxAccumulation = 65536;
struct BatchLayout {
  int64_t data = 1;          // data-parallel size = world / (tensor x pipeline)
  int64_t global_batch = 0;  // sequences per optimizer step (train.global_batch resolved)
  int64_t accumulation = 1;  // micro-batches per optimizer step on each data-parallel rank
};
// Throws UserError when the world size or train.global_batch does not fit the layout.
BatchLayout resolve_batch(const Config& c, int world_size);
// The resolved config as TOML text (printed at start, saved with checkpoints).
std::string config_to_toml(const Config& c);
// docs/config.md, generated from the key table.
std::string config_reference_markdown();

}  // namespace trellis
