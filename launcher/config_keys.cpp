// The config key table (section, key, type, field, default from Config{}, doc, allowed values)
// and the helpers that describe keys and their values.
#include "launcher/config_keys.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>

#include "core/error.h"

namespace trellis::config_keys {
namespace {

using T = KeyType;
constexpr double kInf = std::numeric_limits<double>::infinity();

#define TRELLIS_FIELD(sec, key) [](Config& c) -> void* { return &c.sec.key; }

const Section kSections[] = {
    {"model", "The GPT architecture."},
    {"parallel", "How ranks are laid out; data-parallel size = world / (tensor x pipeline)."},
    {"train", "The training loop: device, precision, batch sizes, steps."},
    {"optimizer", "AdamW with linear warm-up, then the learning rate follows optimizer.schedule from lr to min_lr."},
    {"zero", "ZeRO sharding of optimizer state, gradients and parameters."},
    {"moe", "Mixture-of-experts MLPs (Switch Transformer / GShard): a router sends each token to moe.top_k of moe.experts expert MLPs."},
    {"fp16", "Dynamic loss scaling, used when train.precision = \"fp16\"."},
    {"data", "Where training tokens come from."},
    {"log", "Console log, metrics file and validation."},
    {"checkpoint", "Saving and resuming the full training state."},
};

// clang-format off
const std::vector<KeySpec> kKeys = {
  {"model", "vocab_size", T::Int, TRELLIS_FIELD(model, vocab_size), "Vocabulary size (padded to a multiple of 128 internally).", {}, 1},
  {"model", "seq_len", T::Int, TRELLIS_FIELD(model, seq_len), "Context length in tokens.", {}, 1},
  {"model", "n_layers", T::Int, TRELLIS_FIELD(model, n_layers), "Number of transformer blocks.", {}, 1, false, 4096},
  {"model", "n_heads", T::Int, TRELLIS_FIELD(model, n_heads), "Attention heads per block; must divide d_model, unless model.head_dim gives the heads a size of their own.", {}, 1},
  {"model", "n_kv_heads", T::Int, TRELLIS_FIELD(model, n_kv_heads), "Key-value heads per block: 0 = model.n_heads (multi-head attention); fewer = grouped-query attention (Ainslie et al. 2023; Llama 2 70B, Llama 3; Megatron's --num-query-groups), each key-value head shared by model.n_heads / model.n_kv_heads query heads, so qkv is d_model x (d_model + 2 x n_kv_heads x head size) and the generation cache that much smaller; 1 = multi-query attention. Must divide model.n_heads, and be divisible by parallel.tensor.", {}, 0},
  {"model", "d_model", T::Int, TRELLIS_FIELD(model, d_model), "Hidden size.", {}, 1},
  {"model", "head_dim", T::Int, TRELLIS_FIELD(model, head_dim), "The size of each attention head: 0 = model.d_model / model.n_heads (GPT-2's, Llama's); else decoupled from d_model (Qwen3's 128 at d_model 1024 and 16 heads; Hugging Face's head_dim), so q and the attention output are n_heads x head_dim wide and attn.proj maps them back to d_model. At most 256.", {}, 0, false, 256},
  {"model", "qk_norm", T::Bool, TRELLIS_FIELD(model, qk_norm), "QK-norm (Dehghani et al. 2023; Qwen3's, OLMoE's): every query and key head RMS-normalized (epsilon model.norm_eps) and scaled by a weight of the head's size, one for q and one for k in each block (attn.q_norm.w, attn.k_norm.w), before the rotary turn; it keeps the attention logits bounded.", {}},
  {"model", "position_embedding", T::String, TRELLIS_FIELD(model, position_embedding), "How a token's position enters the model: learned = a trained (seq_len, d_model) table added to the token embedding (GPT-2); rope = rotary position embedding (RoPE; GPT-NeoX, Llama, Megatron's --position-embedding-type rope): every head's queries and keys turned by angles proportional to their positions before attention (the rotate-half form, base model.rope_theta), no position table.", {"learned", "rope"}},
  {"model", "rope_theta", T::Float, TRELLIS_FIELD(model, rope_theta), "model.position_embedding = rope: the base of the rotation frequencies, pair i of a head of size hd turning by position x rope_theta^(-2i/hd) (10000 in GPT-NeoX and Llama 2, 500000 in Llama 3).", {}, 1, true, 1e12},
  {"model", "partial_rotary_factor", T::Float, TRELLIS_FIELD(model, partial_rotary_factor), "model.position_embedding = rope: the fraction of each head's dims that turn (Hugging Face's partial_rotary_factor: Phi-4-mini's 0.75, GPT-NeoX's rotary_pct; Megatron's --rotary-percent). The first int(head size x factor) dims, which must be even, turn as a head of that size would (its frequencies over those dims); the rest pass unturned. 1 = the whole head.", {}, 0, true, 1},
  {"model", "sliding_window", T::Int, TRELLIS_FIELD(model, sliding_window), "Sliding-window attention (Mistral 7B v0.1's 4096, Phi-3-mini's 2047; Hugging Face's sliding_window): each query attends to the last sliding_window positions, its own included (keys t - sliding_window < s <= t), in every block, in training and generation. The fused kernels (cuDNN's and Trellis's own) skip the key blocks wholly outside the window, so attention's cost grows with the window rather than the sequence. 0 = every earlier position (a window of model.seq_len or more is the same).", {}, 0, false, 1e9},
  {"model", "rope_scaling", T::String, TRELLIS_FIELD(model, rope_scaling), "model.position_embedding = rope: none, or llama3 = Llama 3.1's and 3.2's rescaled frequencies (transformers' rope_type \"llama3\"): a frequency whose wavelength exceeds rope_original_positions / rope_low_freq_factor is divided by rope_scaling_factor, one shorter than rope_original_positions / rope_high_freq_factor is kept, those between are blended. The defaults below are Llama 3.1's. linear = position interpolation (Chen et al. 2023; transformers' rope_type \"linear\"): every frequency divided by rope_scaling_factor, so positions up to that many times the trained context turn as the trained ones did. yarn = YaRN (Peng et al. 2023; transformers' rope_type \"yarn\", Qwen2.5's and Qwen3's long contexts): the frequencies that turn more than rope_beta_fast times over rope_original_positions are kept, those turning less than rope_beta_slow times are divided by rope_scaling_factor, those between blended linearly, and q and k are scaled by rope_attention_factor. longrope = LongRoPE (Ding et al. 2024; transformers' rope_type \"longrope\", Phi-3's and Phi-4-mini's long contexts): each turned pair's frequency divided by a factor of its own, rope_long_factor's where model.seq_len exceeds rope_original_positions, else rope_short_factor's, and q and k scaled by rope_attention_factor (0: sqrt(1 + ln(rope_scaling_factor) / ln(rope_original_positions)), transformers' default).", {"none", "llama3", "linear", "yarn", "longrope"}},
  {"model", "rope_long_factor", T::String, TRELLIS_FIELD(model, rope_long_factor), "model.rope_scaling = longrope: each turned pair's divisor of its frequency (comma-separated, one a pair: a head's turned dims / 2; Hugging Face's long_factor), used where model.seq_len exceeds model.rope_original_positions (in generation: once the sequence so far does, as in transformers; the short factors before).", {}},
  {"model", "rope_short_factor", T::String, TRELLIS_FIELD(model, rope_short_factor), "model.rope_scaling = longrope: the same within the original context (model.seq_len at most model.rope_original_positions; short_factor).", {}},
  {"model", "rope_scaling_factor", T::Float, TRELLIS_FIELD(model, rope_scaling_factor), "model.rope_scaling = llama3: what the low frequencies are divided by (8 in Llama 3.1, 32 in Llama 3.2); linear: what every frequency is divided by; yarn: what the slowest frequencies are divided by (4 in Qwen3's 131072-token setting); longrope: how many times the original context the model reaches (32 in Phi-3.5-mini), for the default attention factor.", {}, 1, false, 1e6},
  {"model", "rope_low_freq_factor", T::Float, TRELLIS_FIELD(model, rope_low_freq_factor), "model.rope_scaling = llama3: wavelengths above rope_original_positions / this are scaled.", {}, 0, true, 1e6},
  {"model", "rope_high_freq_factor", T::Float, TRELLIS_FIELD(model, rope_high_freq_factor), "model.rope_scaling = llama3: wavelengths below rope_original_positions / this are kept; must exceed rope_low_freq_factor.", {}, 0, true, 1e6},
  {"model", "rope_original_positions", T::Int, TRELLIS_FIELD(model, rope_original_positions), "model.rope_scaling = llama3, yarn or longrope: the context length the model was first trained at (transformers' original_max_position_embeddings; 8192 in Llama 3.1 and 3.2, 32768 in Qwen3, 4096 in Phi-3.5-mini).", {}, 1, false, 1e9},
  {"model", "rope_beta_fast", T::Float, TRELLIS_FIELD(model, rope_beta_fast), "model.rope_scaling = yarn: frequencies turning more than this many times over rope_original_positions keep their value (transformers' beta_fast).", {}, 0, true, 1e6},
  {"model", "rope_beta_slow", T::Float, TRELLIS_FIELD(model, rope_beta_slow), "model.rope_scaling = yarn: frequencies turning fewer than this many times over rope_original_positions are divided by rope_scaling_factor (transformers' beta_slow); below rope_beta_fast.", {}, 0, true, 1e6},
  {"model", "rope_attention_factor", T::Float, TRELLIS_FIELD(model, rope_attention_factor), "model.rope_scaling = yarn or longrope: what the rotated q and k are scaled by (the cosines and sines times it; transformers' attention_factor); 0 = YaRN's 0.1 ln(rope_scaling_factor) + 1, LongRoPE's sqrt(1 + ln(rope_scaling_factor) / ln(rope_original_positions)).", {}, 0, false, 100},
  {"model", "mlp", T::String, TRELLIS_FIELD(model, mlp), "The MLP of each block (hidden width model.ffn_hidden_size): gelu = GPT-2's, fc -> GELU (tanh form) -> proj; swiglu = Llama's gated one (Shazeer 2020; Megatron's --swiglu): fc twice as wide, [gate | up], then silu(gate) x up -> proj, 1.5x the MLP's parameters and FLOPs. The experts of moe.experts and the shared MLP are of the same kind (swiglu: Mixtral's, Qwen-MoE's, DeepSeek's experts).", {"gelu", "swiglu"}},
  {"model", "ffn_hidden_size", T::Int, TRELLIS_FIELD(model, ffn_hidden_size), "The dense MLP's hidden width F (Megatron's --ffn-hidden-size, Hugging Face's n_inner / intermediate_size): fc is C -> F (SwiGLU: C -> 2F, [gate | up]) and proj F -> C. 0 = 4 x model.d_model; a SwiGLU model of a GELU one's size takes about 8/3 x model.d_model (Llama 7B: 11008 at d_model 4096). Must be divisible by parallel.tensor. The experts' width is moe.ffn_hidden_size.", {}, 0},
  {"model", "norm", T::String, TRELLIS_FIELD(model, norm), "The normalization before attention, before the MLP and before the head: layernorm = GPT-2's LayerNorm (mean and variance, a weight and a bias); rmsnorm = RMSNorm (Zhang & Sennrich 2019; Llama's, Megatron's --normalization RMSNorm): x / sqrt(mean(x^2) + model.norm_eps) times a weight, no mean subtracted and no bias.", {"layernorm", "rmsnorm"}},
  {"model", "norm_eps", T::Float, TRELLIS_FIELD(model, norm_eps), "The norms' epsilon, added to the variance (LayerNorm) or the mean square (RMSNorm) before the square root: GPT-2's and Llama 2's 1e-5, Llama 1's 1e-6 (Hugging Face's layer_norm_epsilon / rms_norm_eps). Above 0, at most 0.1.", {}, 0, true, 0.1},
  {"model", "bias", T::Bool, TRELLIS_FIELD(model, bias), "Biases in the blocks' linear layers (attn.qkv, attn.proj, mlp.fc, mlp.proj): true = GPT-2's; false = none, as Llama, PaLM and Megatron's --disable-bias-linear (the norms' biases follow model.norm). The experts of moe.experts and the shared MLP follow it too.", {}},
  {"model", "qkv_bias", T::Bool, TRELLIS_FIELD(model, qkv_bias), "With model.bias = false: biases on attn.qkv alone, none on attn.proj and the MLP (Qwen2's; Megatron's --add-qkv-bias). With model.bias = true every linear layer has its bias anyway.", {}},
  {"model", "tie_embeddings", T::Bool, TRELLIS_FIELD(model, tie_embeddings), "The head's weight: true = the token embedding itself (GPT-2's tied head; Hugging Face's tie_word_embeddings); false = a (vocab, d_model) matrix lm_head.w of its own (Llama's; Megatron's --untie-embeddings-and-output-weights), initialized N(0, 0.02) and trained apart, the vocabulary's parameters counted twice. Untied, the pipeline's first and last stage sum no embedding gradient between them, and zero.embedding_grad = gather_rows is not offered.", {}},
  {"model", "dropout", T::Float, TRELLIS_FIELD(model, dropout), "Dropout probability of the embeddings, of each residual branch and (unless model.attention_dropout says otherwise) of the attention probabilities, as in nanoGPT and GPT-2.", {}, 0, false, 1, true},
  {"model", "attention_dropout", T::Float, TRELLIS_FIELD(model, attention_dropout), "Dropout probability of the attention probabilities; -1 = model.dropout.", {}, -1, false, 1, true},
  {"model", "init_from", T::String, TRELLIS_FIELD(model, init_from), "A fresh run starts from these trained parameters instead of random ones: a Hugging Face GPT-2, Llama, Mistral, Phi-3, Qwen2, Qwen3, Mixtral, Qwen2-MoE or Qwen3-MoE directory (config.json + model.safetensors, or the shards model.safetensors.index.json names, as transformers saves them or export_hf writes), a weight export (--export-weights) or a checkpoint (its parameters as stored: a 16-bit run's 16-bit values, not its f32 master). The optimizer, step and data start afresh. The model's shape must be this config's, its experts included (model.seq_len may be shorter: the first positions are taken). Empty = random initialization; a resumed run continues its checkpoint and ignores it.", {}},

  {"parallel", "tensor", T::Int, TRELLIS_FIELD(parallel, tensor), "Tensor-parallel size: ranks that split each layer (attention heads, MLP columns, vocabulary rows). Must divide model.n_heads, 4 x model.d_model and the padded vocabulary (model.vocab_size rounded up to a multiple of 128).", {}, 1},
  {"parallel", "pipeline", T::Int, TRELLIS_FIELD(parallel, pipeline), "Pipeline-parallel size (stages). The blocks are split over the stages balanced by compute cost (the embedding counts on the first, final LayerNorm, head and loss on the last) unless parallel.stage_layers lists them; micro-batches per step = train.global_batch / (train.micro_batch x data-parallel size).", {}, 1},
  {"parallel", "sequence_parallel", T::Bool, TRELLIS_FIELD(parallel, sequence_parallel), "Sequence parallelism: LayerNorm, dropout and residual activations are split by token over the tensor group (Megatron). Needs parallel.tensor to divide train.micro_batch x model.seq_len; no effect with parallel.tensor = 1.", {}},
  {"parallel", "tensor_comm_chunks", T::Int, TRELLIS_FIELD(parallel, tensor_comm_chunks), "Tensor parallelism without sequence parallelism: each row-parallel layer's forward (attention and MLP output projections) runs its GEMM and the all-reduce of its output in this many blocks of token rows, each block's all-reduce overlapping the next block's GEMM. 0 = auto: 2 with parallel.tensor = 2 on GPUs and parallel.peer_all_reduce on, without sequence parallelism and without the batch split (parallel.tensor_split_batch, which hides those all-reduces better), else 1 (NCCL's kernels slow the GEMM beside them as much as they hide; on the CPU, MPI's non-blocking all-reduce makes little progress meanwhile). At most train.micro_batch x model.seq_len; no effect with parallel.tensor = 1.", {}, 0},
  {"parallel", "tensor_split_batch", T::Bool, TRELLIS_FIELD(parallel, tensor_split_batch), "Tensor parallelism without sequence parallelism, with an even train.micro_batch: each block's forward runs in two halves of the micro-batch's samples, interleaved, so the all-reduce that ends one half's attention or MLP runs while the other half computes (and a block's output reduction while the next block starts on the other half). Without dropout the residual adds are rank 0's GEMM epilogues, so an all-reduce's result is the residual stream itself. Same results as false up to the rounding of GEMMs of half the rows. GPT-2 1.3B on two H200s with the peer all-reduce: 85-86% of linear scaling at micro-batch 8 against 82% without (docs/benchmarks.md, ninth session). false = each block's forward on the whole micro-batch.", {}},
  {"parallel", "peer_all_reduce", T::Bool, TRELLIS_FIELD(parallel, peer_all_reduce), "GPUs: a group of two ranks on one node whose GPUs have peer access (NVLink, or PCIe where the GPUs allow it; both ranks must see both GPUs) moves its all-reduces and reduce-scatters (sums: data-parallel gradients, tensor-parallel activations) and its all-gathers (ZeRO's parameters) with the copy engines into the peer's memory, instead of through NCCL's kernels. Alone it is slower than NCCL (a 32 MiB all-reduce: 165 against 136 us on two H200s), but it holds no SMs, so the GEMMs beside it keep their speed: GPT-2 350M at data = 2 scaled 95.6% against NCCL's 95.0% at ZeRO stage 0 (docs/benchmarks.md, eighth session) and 97.6% against 95.9% at stage 1 (tenth); GPT-2 1.3B at tensor = 2, micro-batch 8, 86.3% against 79.8% (ninth session, with the batch split). Results are bitwise the same as NCCL's. Set up on the group's first all-reduce, reduce-scatter or all-gather (64 MiB of receive slots per group, outside the allocator's statistics); the first step's log says which path each group takes. false = NCCL for every collective.", {}},
  {"parallel", "collective_timeout_s", T::Float, TRELLIS_FIELD(parallel, collective_timeout_s), "Seconds a rank waits for the others (a collective or pipeline transfer; on GPUs also for its queued work, where NCCL runs) before it aborts every rank with one line naming the operation, the communicator and (for a wait on the GPU) the last collective queued there, instead of hanging until the job's time limit when a rank stops, hangs or is lost. As PyTorch's default NCCL timeout, 10 minutes. Checkpoint saves, the resume and the weight export are not watched (a writing rank may take longer). 0 = wait forever. Only with more than one rank.", {}, 0},
  {"parallel", "expert", T::Int, TRELLIS_FIELD(parallel, expert), "Expert-parallel size: consecutive data-parallel ranks that split each block's experts (rank g of the group holds experts [g x E/expert, (g+1) x E/expert)), exchanging each micro-batch's routed tokens all-to-all; the experts' gradients are summed over the ranks holding the same experts (the expert-data group), over which ZeRO stages >= 1 also shard the experts' optimizer state, stage 2 their gradients and stage 3 their parameters (with one rank in that group, data = expert, the experts are kept whole). Must divide moe.experts and the data-parallel size; 1 = every data rank holds every expert.", {}, 1},
  {"parallel", "schedule", T::String, TRELLIS_FIELD(parallel, schedule), "Pipeline schedule: gpipe (all forwards, then all backwards), 1f1b (PipeDream-flush: holds at most pipeline - stage micro-batches) or interleaved (Megatron's interleaved 1F1B over parallel.virtual_stages >= 2 chunks per rank; needs parallel.pipeline >= 2 and micro-batches per step a multiple of parallel.pipeline).", {"gpipe", "1f1b", "interleaved"}},
  {"parallel", "virtual_stages", T::Int, TRELLIS_FIELD(parallel, virtual_stages), "Model chunks per pipeline rank (interleaved schedule only; chunk c of rank r is virtual stage c x pipeline + r). model.n_layers must be at least pipeline x virtual_stages.", {}, 1},
  {"parallel", "stage_layers", T::String, TRELLIS_FIELD(parallel, stage_layers), "Transformer blocks per virtual pipeline stage, e.g. \"3,4,4,1\": pipeline x virtual_stages comma-separated integers >= 1 in virtual-stage order (chunk c of rank r is entry c x pipeline + r), summing to model.n_layers. Empty = balanced by compute cost.", {}},

  {"train", "device", T::String, TRELLIS_FIELD(train, device), "auto = the GPU when there is one, else the CPU.", {"auto", "cpu", "cuda"}},
  {"train", "precision", T::String, TRELLIS_FIELD(train, precision), "Compute precision; auto = bf16 on a GPU, fp32 on the CPU.", {"auto", "fp32", "bf16", "fp16"}},
  {"train", "grad_dtype", T::String, TRELLIS_FIELD(train, grad_dtype), "Storage of the parameter gradients. auto = the 16-bit precision where each gradient is written once a step by one rank (one rank in all, one micro-batch a step: every op sums in f32 and rounds once as it writes, as PyTorch autocast gives a weight its gradient; the tied token embedding's, added to by the head's row chunks and the lookups, is rounded at each add; 2 bytes a parameter and their traffic saved), else f32; f32 = always f32.", {"auto", "f32"}},
  {"train", "micro_batch", T::Int, TRELLIS_FIELD(train, micro_batch), "Sequences per micro-batch per data-parallel rank.", {}, 1},
  {"train", "global_batch", T::Int, TRELLIS_FIELD(train, global_batch), "Sequences per optimizer step; 0 = micro_batch x data-parallel size. A multiple of micro_batch x data-parallel size, at most 65536 times it (micro-batches a step on each data rank).", {}, 0},
  {"train", "steps", T::Int, TRELLIS_FIELD(train, steps), "Optimizer steps to run.", {}, 1},
  {"train", "seed", T::Int, TRELLIS_FIELD(train, seed), "Seed for initialization, data and dropout.", {}, 0},
  {"train", "checkpointing", T::String, TRELLIS_FIELD(train, checkpointing), "Activation checkpointing (recompute in backward).", {"none", "full", "selective", "elementwise"}},
  {"train", "deterministic", T::Bool, TRELLIS_FIELD(train, deterministic), "GPU: use only bitwise-reproducible algorithms.", {}},
  {"train", "grad_clip", T::Float, TRELLIS_FIELD(train, grad_clip), "Clip the global gradient norm to this (as an f32); 0 = off.", {}, 0},
  {"train", "cuda_graphs", T::Bool, TRELLIS_FIELD(train, cuda_graphs), "Replay each training step as one CUDA graph where it can be: one rank on a GPU, zero.offload = none, no dropout, no moe.dropless, no log.profile_ops, no log.trace_step among the run's steps. The first step runs as usual, the second is captured, later ones only launch the graph, so the GPU starts the step's ~650 kernels (GPT-2 1.3B) back to back instead of one host launch at a time. Same results as false, bitwise. In fp16 the step after a loss-scale change runs as usual and the next is captured again; so does the step after a validation or checkpoint that grew the op scratch. false = every step launched kernel by kernel.", {}},
  {"train", "stop_after", T::Int, TRELLIS_FIELD(train, stop_after), "Stop after this step with a checkpoint, as if interrupted (schedules still follow train.steps); 0 = run to the end.", {}, 0},
  {"train", "cpu_threads", T::Int, TRELLIS_FIELD(train, cpu_threads), "OpenMP threads per rank for the CPU backend and for the host's AdamW under zero.offload = cpu; 0 = the node's cores divided among its ranks.", {}, 0},

  {"optimizer", "lr", T::Float, TRELLIS_FIELD(optimizer, lr), "Peak learning rate (after warm-up); must be >= min_lr.", {}, 0},
  {"optimizer", "min_lr", T::Float, TRELLIS_FIELD(optimizer, min_lr), "Learning rate at the last step (train.steps), where the decay ends.", {}, 0},
  {"optimizer", "warmup_steps", T::Int, TRELLIS_FIELD(optimizer, warmup_steps), "Linear warm-up steps.", {}, 0},
  {"optimizer", "schedule", T::String, TRELLIS_FIELD(optimizer, schedule), "The learning rate after warm-up: cosine = cosine decay from lr to min_lr at the last step; linear = linear decay from lr to min_lr; constant = lr throughout; wsd = warmup-stable-decay: lr until the last optimizer.decay_steps steps, then linear decay to min_lr (a run stopped in the stable phase continues with a larger train.steps, its decay moved to the new end).", {"cosine", "linear", "constant", "wsd"}},
  {"optimizer", "decay_steps", T::Int, TRELLIS_FIELD(optimizer, decay_steps), "optimizer.schedule = wsd: the steps of the final decay; 0 = a fifth of train.steps.", {}, 0},
  {"optimizer", "beta1", T::Float, TRELLIS_FIELD(optimizer, beta1), "AdamW first-moment decay.", {}, 0, false, 1, true},
  {"optimizer", "beta2", T::Float, TRELLIS_FIELD(optimizer, beta2), "AdamW second-moment decay.", {}, 0, false, 1, true},
  {"optimizer", "eps", T::Float, TRELLIS_FIELD(optimizer, eps), "AdamW epsilon.", {}, 0, true},
  {"optimizer", "weight_decay", T::Float, TRELLIS_FIELD(optimizer, weight_decay), "AdamW decoupled weight decay, on the weight matrices and embeddings (not on biases or layer-norm parameters, as in nanoGPT and Megatron).", {}, 0},

  {"zero", "stage", T::Int, TRELLIS_FIELD(zero, stage), "0 = replicate; 1 = shard the fp32 master weights and Adam moments over the data group (gradients reduce-scattered, parameters all-gathered); 2 = + gradients (no full gradient buffer: each block's reduce-scattered after its backward, every micro-batch); 3 = + parameters (each block's all-gathered just before use). Embeddings and the final LayerNorm stay whole at every stage. On two GPUs of one node, stage 1 is the fastest: GPT-2 350M at data = 2 scaled 98.3% against 95.8% at stage 0 (docs/benchmarks.md, tenth session: AdamW and the norm on half the parameters each). Checkpoints at stages >= 1 hold each rank's optimizer pieces; a run on another layout (or unsharded) reassembles them and takes its own.", {}, 0, false, 3},
  {"zero", "bucket_mb", T::Int, TRELLIS_FIELD(zero, bucket_mb), "ZeRO stage 0: data-parallel gradient buckets of about this many MiB, all-reduced as soon as backward completes them (fewer, larger all-reduces overlap backward better: 25 scaled GPT-2 350M on two H200s 92.7%, 200 94.2%). Stages 1-3 reduce-scatter the parameter store's buckets instead (one per transformer block, one each for wte, wpe and the final LayerNorm) and ignore it.", {}, 1},
  {"zero", "overlap", T::Bool, TRELLIS_FIELD(zero, overlap), "Reduce gradient buckets during backward; false = all after backward (for comparison; stages 2-3 ignore it and always reduce during backward).", {}},
  {"zero", "reduce_dtype", T::String, TRELLIS_FIELD(zero, reduce_dtype), "Dtype of the data-parallel gradient all-reduce: f32 (exact, as accumulated) or bf16/f16 (half the bytes; each rank's gradient rounded once, like Megatron without grad_reduce_in_fp32; zero.stage 0 only).", {"f32", "bf16", "f16"}},

  {"zero", "embedding_grad", T::String, TRELLIS_FIELD(zero, embedding_grad), "Stage 0 with data ranks > 1, one pipeline stage and no tensor parallelism: gather_rows = all-reduce the token embedding's gradient as backward begins (the classifier's part is final since the forward) and gather every data rank's rows of the last micro-batch's embedding backward, scattering them all into it, instead of all-reducing the whole (vocabulary x d_model) gradient after the embedding backward, the last op of backward, with nothing left to overlap it. gather_rows also needs zero.overlap = true. auto = gather_rows where the gathered rows are fewer bytes (GPT-2 at a few data ranks), else all_reduce.", {"auto", "gather_rows", "all_reduce"}},

  {"zero", "offload", T::String, TRELLIS_FIELD(zero, offload), "cpu = keep the fp32 master weights and Adam moments (at stages >= 1 this rank's pieces of them) in host memory and run AdamW on the host's cores: 10 bytes a parameter less on the GPU with bf16 (fp16: 12, fp32: 8), for a slower step (each step moves the gradients down and the parameters up). nvme = the same with the moments and the master (bf16: its low halves) in files in zero.offload_dir, mapped into memory: the kernel keeps what fits in memory and pages the rest to that disk, so they need not fit in RAM (the pinned copy of the parameters that goes up each step stays in memory; for fp32 parameters that is the master). none = on the device.", {"none", "cpu", "nvme"}},
  {"zero", "offload_dir", T::String, TRELLIS_FIELD(zero, offload_dir), "zero.offload = nvme: a directory on a fast local ext4 or xfs disk (created if missing; each rank's files there are anonymous or unlinked at once, so none is left behind and no existing file is touched; copy-on-write filesystems, NFS and tmpfs are not suited).", {}},

  {"moe", "experts", T::Int, TRELLIS_FIELD(moe, experts), "Expert MLPs in each block with experts (each an MLP of model.mlp's kind with its own weights, hidden width moe.ffn_hidden_size, biases as model.bias; chosen per token by a learned router); 0 = every MLP dense. Under tensor parallelism each expert's MLP is split as a dense one (with parallel.sequence_parallel the token rows are gathered before the router and the output reduce-scattered); parallel.expert splits the experts over data ranks instead.", {}, 0, false, 1024},
  {"moe", "top_k", T::Int, TRELLIS_FIELD(moe, top_k), "Experts each token goes to; the output is their outputs weighted by the router's probabilities, renormalized over the chosen when top_k > 1 and moe.renormalize (1 = Switch Transformer, 2 = GShard, Mixtral). At most moe.experts.", {}, 1, false, 8},
  {"moe", "renormalize", T::Bool, TRELLIS_FIELD(moe, renormalize), "With moe.top_k > 1: true = each token's gates are its chosen experts' router probabilities divided by their sum (GShard, Mixtral, Qwen3-MoE; Hugging Face's norm_topk_prob = true); false = the probabilities themselves, summing to less than 1 (DeepSeekMoE, OLMoE, Qwen1.5/2-MoE).", {}},
  {"moe", "capacity_factor", T::Float, TRELLIS_FIELD(moe, capacity_factor), "An expert takes at most ceil(capacity_factor x top_k x tokens / experts) of a micro-batch's tokens (its slots; every shape stays fixed, so there is no host synchronization and CUDA graphs still apply); a choice past that is dropped and the token passes on through the residual stream. Slots go to first choices first, in token order. Larger wastes compute on empty slots, smaller drops more tokens; moe.experts / moe.top_k drops none (the experts then compute that many times the rows routed to them; moe.dropless drops none at no such cost). Not used with moe.dropless.", {}, 0, true, 64},
  {"moe", "dropless", T::Bool, TRELLIS_FIELD(moe, dropless), "true = no capacity: every choice is computed, as Mixtral, Qwen-MoE and DeepSeekMoE route (MegaBlocks; Megatron's default), and moe.capacity_factor is not used. The experts' rows are packed, one a choice (top_k x tokens in all, less memory than a capacity factor of 1 or more); after routing the host reads each expert's count to size its GEMMs, one wait for the GPU per block with experts and micro-batch, so steps are not CUDA graphs (train.cuda_graphs). With parallel.expert > 1 the expert group also all-gathers those counts (on the host) and exchanges uneven blocks of rows; the memory plan then keeps room for the most a rank's experts can receive (every token of the group choosing min(top_k, its experts) of them: parallel.expert x min(top_k, experts / parallel.expert) / top_k times the single-rank rows). Generation always routes dropless.", {}},
  {"moe", "aux_loss_coef", T::Float, TRELLIS_FIELD(moe, aux_loss_coef), "Weight of each block's load-balancing loss experts x sum_e f_e P_e (f_e: the fraction of choices routed to expert e, P_e: its mean router probability; 1 when balanced), added to the objective (not to the reported loss).", {}, 0},
  {"moe", "z_loss_coef", T::Float, TRELLIS_FIELD(moe, z_loss_coef), "Weight of each block's router z-loss, the mean over the micro-batch's tokens of log(sum_e exp(router logit_e))^2 (ST-MoE; Megatron's --moe-z-loss-coeff): it keeps the router's logits small, which steadies training in bf16 and fp16 (ST-MoE uses 0.001). Added to the objective (not to the reported loss); 0 = off. The log shows the z-loss whatever its weight.", {}, 0},
  {"moe", "layer_freq", T::Int, TRELLIS_FIELD(moe, layer_freq), "Block l has experts when l % layer_freq == 0 and l >= moe.first_dense_layers (1 = every block, 2 = every other block from the first, as Switch Transformer).", {}, 1},
  {"moe", "first_dense_layers", T::Int, TRELLIS_FIELD(moe, first_dense_layers), "The first this many blocks keep the dense MLP (of model.ffn_hidden_size) whatever moe.layer_freq says (DeepSeekMoE's and DeepSeek-V3's first_k_dense_replace: 1, and 3). Less than model.n_layers.", {}, 0},
  {"moe", "shared_experts", T::Int, TRELLIS_FIELD(moe, shared_experts), "Shared experts in each block with experts (DeepSeekMoE's; Megatron's --moe-shared-expert-intermediate-size = this x an expert's width): one more MLP, this many experts wide (hidden width shared_experts x moe.ffn_hidden_size, of model.mlp's kind), that every token goes through, its output added to the routed experts' gated sum. Every rank of an expert group holds it, as the router; tensor parallelism splits it as a dense MLP. 0 = none.", {}, 0, false, 64},
  {"moe", "shared_gate", T::Bool, TRELLIS_FIELD(moe, shared_gate), "With moe.shared_experts > 0 and model.bias = false: the shared MLP's output is multiplied by each token's sigmoid(x . w), w a (1, d_model) parameter of the block (Qwen1.5-MoE's and Qwen2-MoE's shared_expert_gate).", {}},
  {"moe", "ffn_hidden_size", T::Int, TRELLIS_FIELD(moe, ffn_hidden_size), "An expert's hidden width F (Megatron's --moe-ffn-hidden-size; Hugging Face's moe_intermediate_size, Mixtral's intermediate_size): fc is C -> F (model.mlp = swiglu: C -> 2F, [gate | up]) and proj F -> C. 0 = 4 x model.d_model. Fine-grained experts (DeepSeekMoE) are many narrow ones: e.g. 64 experts of width d_model / 2, top 6. Must be divisible by parallel.tensor.", {}, 0, false, 2147483647},

  {"fp16", "initial_scale_power", T::Int, TRELLIS_FIELD(fp16, initial_scale_power), "Initial loss scale = 2^this (at least fp16.min_scale); a resumed run continues the checkpoint's scale.", {}, 0, false, 64},
  {"fp16", "loss_scale_window", T::Int, TRELLIS_FIELD(fp16, loss_scale_window), "Overflow-free steps before the scale doubles.", {}, 1},
  {"fp16", "hysteresis", T::Int, TRELLIS_FIELD(fp16, hysteresis), "The scale halves at the N-th overflow since it last changed (1 = at every overflow).", {}, 1},
  {"fp16", "min_scale", T::Float, TRELLIS_FIELD(fp16, min_scale), "The loss scale never drops below this.", {}, 0, true},

  {"data", "source", T::String, TRELLIS_FIELD(data, source), "synthetic = a learnable token task; random = uniform tokens; file = data.path.", {"synthetic", "random", "file"}},
  {"data", "path", T::String, TRELLIS_FIELD(data, path), "For source = file: a tokenized dataset (Megatron .bin/.idx prefix or llm.c token file, made by prepare_data), or a blend \"0.3 PATH_A 0.7 PATH_B\".", {}},
  {"data", "val_fraction", T::Float, TRELLIS_FIELD(data, val_fraction), "For source = file: the last fraction of the tokens is the validation split (held out of training also with log.val_every = 0).", {}, 0, true, 1, true},
  {"data", "document_mask", T::Bool, TRELLIS_FIELD(data, document_mask), "Document masking of packed samples (Megatron's --reset-attention-mask; Llama 3's training): a sample's tokens attend only to earlier tokens of their own document, the token after each data.eod_token opening the next, so documents packed into one sample do not see each other (in training and validation; positions count from the sample's start unless data.reset_positions). Needs data.eod_token. On GPUs attention then runs on Trellis's own flash kernels (bf16/f16, head size 64 or 128), not cuDNN's, and skips the key blocks before each query block's document; the reported MFU still counts whole causal attention. false = every earlier token of the sample.", {}},
  {"data", "reset_positions", T::Bool, TRELLIS_FIELD(data, reset_positions), "With data.document_mask and learned positions (model.position_embedding = learned): each document's tokens take positions 0, 1, ... from its start, as if it began the sample (Megatron's --reset-position-ids), so a document is seen at the positions generation will see it at. Rotary positions are relative, so within documents they need no reset (refused there). false = positions count from the sample's start.", {}},
  {"data", "eod_mask_loss", T::Bool, TRELLIS_FIELD(data, eod_mask_loss), "Leaves out of the loss the target after each data.eod_token (Megatron's --eod-mask-loss): the next document's first token, which nothing before it predicts. The loss is then the mean over the targets kept, counted over the step's whole global batch, so every layout trains the same model; MoE's balancing and z-losses keep their coefficients against it (such a run replays no CUDA graphs: the weight changes from step to step). Needs data.eod_token; independent of data.document_mask. false = every target counts.", {}},
  {"data", "packing", T::String, TRELLIS_FIELD(data, packing), "For source = file: how samples are cut from the data. stream = windows of model.seq_len + 1 tokens of the token stream, documents packed back to back and cut wherever a window ends (nanoGPT's and Megatron's pretraining samples). documents = whole documents packed into samples, longest first, each into the fullest sample it fits (best fit decreasing: little padding), each sample padded after them (no target there: the loss is the mean over the targets kept, as for a loss mask), so no example is cut from its prompt (supervised fine-tuning); a document longer than a sample is cut into sample-sized pieces and its rest packed as a document, and the start log says how many samples there are, how much of them is padding and how many documents were cut. Needs a Megatron dataset (prepare_data's default format), whose index holds the documents' lengths; a document is validation data when it starts in the last data.val_fraction of the tokens. With experts the padding is routed as any token (it takes expert capacity, and its share of targets weights the routers' losses).", {"stream", "documents"}},
  {"data", "eod_token", T::Int, TRELLIS_FIELD(data, eod_token), "The end-of-document token's id, for data.document_mask and data.eod_mask_loss: 50256 for GPT-2's <|endoftext|>, or the eos_token of a Hugging Face tokenizer (the token prepare_data --append-eod ends each document with; llm.c's files start each with GPT-2's). Below model.vocab_size; -1 = none.", {}, -1, false, 2147483647},

  {"log", "every", T::Int, TRELLIS_FIELD(log, every), "A log line every N steps.", {}, 1},
  {"log", "metrics_file", T::String, TRELLIS_FIELD(log, metrics_file), "Write metrics as JSON lines to this file (rank 0); empty = none. One start record (source version, layout, memory plan, the GPU libraries as loaded), then per step: loss, lr, grad_norm, tokens_per_s, step_ms, peak_mem_bytes, mfu, phase_ms (device time of the schedule, the loss/norm reductions and the optimizer) and stage_timing (per virtual pipeline stage, the compute time of the step's forwards and of its backwards, over micro_batches), with experts moe_aux_loss, moe_z_loss and moe_dropped (the balancing loss and the z-loss averaged over the step's blocks with experts and micro-batches, the fraction of choices dropped), and validation records.", {}},
  {"log", "tensorboard_dir", T::String, TRELLIS_FIELD(log, tensorboard_dir), "Write TensorBoard event files (scalars) to this directory (rank 0); empty = none.", {}},
  {"log", "val_every", T::Int, TRELLIS_FIELD(log, val_every), "Validate every N steps and at the last one; 0 = off.", {}, 0},
  {"log", "val_batches", T::Int, TRELLIS_FIELD(log, val_batches), "Batches per validation (Megatron's --eval-iters), each of the global batch's size (train.global_batch samples) from the validation split, shared by the data ranks: the same samples, so the same validation loss, on any layout with that global batch. The start log notes when that is more samples than the split holds (some then count twice).", {}, 1},
  {"checkpoint", "dir", T::String, TRELLIS_FIELD(checkpoint, dir), "Directory of the run's checkpoints (step_NNNNNNNN/ each); empty = no checkpoints. At ZeRO stages >= 1 every rank writes its own optimizer state into it, so it must be on a filesystem all ranks see.", {}},
  {"checkpoint", "every", T::Int, TRELLIS_FIELD(checkpoint, every), "Save every N steps (and at the end, and when stopped by a signal); 0 = only then. Needs checkpoint.dir.", {}, 0},
  {"checkpoint", "keep", T::Int, TRELLIS_FIELD(checkpoint, keep), "Keep the newest K valid checkpoints; older ones are removed.", {}, 1},
  {"checkpoint", "resume", T::String, TRELLIS_FIELD(checkpoint, resume), "auto = the newest valid checkpoint in checkpoint.dir, if any; none = start fresh; or a checkpoint's step_NNNNNNNN directory, or a checkpoint.dir (its newest valid one). A run that would overwrite or prune checkpoints in checkpoint.dir that it does not continue is refused.", {}},
  {"checkpoint", "keep_best", T::Bool, TRELLIS_FIELD(checkpoint, keep_best), "After each validation that beats the best so far, save the state to checkpoint.dir/best (replaced atomically; never pruned, never picked by resume = auto), as nanoGPT keeps its best model.", {}},
  {"log", "profile_ops", T::Bool, TRELLIS_FIELD(log, profile_ops), "Print a per-op time breakdown at the end (GPU: CUDA events around every op; matmuls per shape with TFLOP/s).", {}},
  {"log", "trace_step", T::Int, TRELLIS_FIELD(log, trace_step), "Write a trace of this step to log.trace_file: every op with its start and end and, on the GPU, every collective on the communication stream, as a Chrome trace (open in ui.perfetto.dev or chrome://tracing) to see what overlaps what; 0 = none. Each rank writes its own file. A step that is not run (beyond train.steps, or before a resumed run's first) writes nothing.", {}, 0},
  {"log", "trace_file", T::String, TRELLIS_FIELD(log, trace_file), "Where log.trace_step's trace goes; with more than one rank each writes its own, .rankN inserted before .json (trace.rank0.json, ...). An earlier trace there is replaced; any other existing file is refused.", {}},
};
// clang-format on

#undef TRELLIS_FIELD

std::string number_text(double v) {
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (std::isnan(v)) return "nan";
  // The shortest text that reads back exactly, in fixed notation unless scientific is much shorter
  // (0.0006 rather than 6e-04, but 1e-08 rather than 0.00000001).
  char fixed[400], sci[64];
  auto f = std::to_chars(fixed, fixed + sizeof(fixed), v, std::chars_format::fixed);
  auto e = std::to_chars(sci, sci + sizeof(sci), v, std::chars_format::scientific);
  if (f.ec == std::errc() && f.ptr - fixed <= (e.ptr - sci) + 2) return std::string(fixed, f.ptr);
  return std::string(sci, e.ptr);
}

std::string join(const std::vector<std::string>& items) {
  std::string s;
  for (const auto& i : items) s += (s.empty() ? "" : ", ") + i;
  return s;
}

}  // namespace

std::span<const Section> sections() { return kSections; }
std::span<const KeySpec> keys() { return kKeys; }

const KeySpec* find_key(std::string_view section, std::string_view name) {
  for (const auto& k : kKeys)
    if (section == k.section && name == k.name) return &k;
  return nullptr;
}

bool is_section(std::string_view section) {
  for (const auto& s : kSections)
    if (section == s.name) return true;
  return false;
}

const char* type_name(KeyType t) {
  switch (t) {
    case KeyType::Int: return "integer";
    case KeyType::Float: return "float";
    case KeyType::Bool: return "boolean";
    case KeyType::String: return "string";
  }
  return "?";
}

// An integer key's largest value: its own, else 2^31 - 1 (counts and sizes are used as int in
// places; larger values would wrap). The seed takes any 64-bit value.
static double max_of(const KeySpec& k) {
  if (k.type != KeyType::Int || k.max != kInf || std::string_view(k.name) == "seed") return k.max;
  return double(std::numeric_limits<int32_t>::max());
}

std::string allowed_text(const KeySpec& k) {
  if (!k.choices.empty()) return join(k.choices);
  if (k.type == KeyType::Bool) return "true, false";
  const double max = max_of(k);
  const bool has_min = k.min != -kInf, has_max = max != kInf;
  if (has_min && has_max) {
    if (k.type == KeyType::Int) return number_text(k.min) + " to " + number_text(max);
    return std::string("in ") + (k.min_exclusive ? "(" : "[") + number_text(k.min) + ", " +
           number_text(max) + (k.max_exclusive ? ")" : "]");
  }
  if (has_min) return std::string(k.min_exclusive ? "> " : ">= ") + number_text(k.min);
  if (has_max) return std::string(k.max_exclusive ? "< " : "<= ") + number_text(max);
  return "";
}

std::string toml_value(const KeySpec& k, const Config& c) {
  Config& m = const_cast<Config&>(c);  // field() is shared by readers and writers
  switch (k.type) {
    case KeyType::Int: return std::to_string(k.int_ref(m));
    case KeyType::Bool: return k.bool_ref(m) ? "true" : "false";
    case KeyType::Float: {
      std::string s = number_text(k.float_ref(m));
      if (s.find_first_of(".eni") == std::string::npos) s += ".0";  // stays a TOML float
      return s;
    }
    case KeyType::String: {
      std::string s = "\"";
      for (unsigned char ch : k.string_ref(m)) {
        if (ch == '"' || ch == '\\') {
          s += '\\';
          s += static_cast<char>(ch);
        } else if (ch < 0x20 || ch == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", ch);
          s += buf;
        } else {
          s += static_cast<char>(ch);
        }
      }
      return s + "\"";
    }
  }
  return "";
}

std::string key_list(std::string_view section) {
  std::vector<std::string> names;
  for (const auto& k : kKeys)
    if (section == k.section) names.push_back(k.name);
  return join(names);
}

std::string section_list() {
  std::vector<std::string> names;
  for (const auto& s : kSections) names.push_back(s.name);
  return join(names);
}

void check_allowed(const KeySpec& k, const Config& c, const std::string& where) {
  Config& m = const_cast<Config&>(c);
  bool ok = true;
  if (k.type == KeyType::String) {
    if (!k.choices.empty()) {
      ok = false;
      for (const auto& choice : k.choices) ok = ok || choice == k.string_ref(m);
    }
  } else if (k.type == KeyType::Int || k.type == KeyType::Float) {
    const double v = k.type == KeyType::Int ? static_cast<double>(k.int_ref(m)) : k.float_ref(m);
    const double max = max_of(k);
    ok = std::isfinite(v) || (k.type == KeyType::Int);
    ok = ok && (k.min_exclusive ? v > k.min : v >= k.min);
    ok = ok && (k.max_exclusive ? v < max : v <= max);
    // Floats are used as f32: one that overflows to inf or flushes to 0 there would silently be
    // another value (optimizer.eps = 1e-300 is 0).
    if (ok && k.type == KeyType::Float && v != 0.0 &&
        (std::fabs(v) > std::numeric_limits<float>::max() || std::fabs(v) < std::numeric_limits<float>::min()))
      throw UserError(where + ": " + k.full_name() + " = " + toml_value(k, c) + " is not allowed: it is used as an "
                      "f32, where it would be " + (std::fabs(v) > 1.0 ? "infinite" : "0") + " (allowed: " + allowed_text(k) +
                      ", a magnitude from 1.2e-38 to 3.4e+38)");
  }
  if (!ok)
    throw UserError(where + ": " + k.full_name() + " = " + toml_value(k, c) +
                    " is not allowed (allowed: " + allowed_text(k) + ")");
}

}  // namespace trellis::config_keys
