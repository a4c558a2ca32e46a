// A mixture-of-experts MLP (Switch Transformer / GShard): a router picks top_k of E expert MLPs
// (each with its own weights, of the model's kind: GPT-2's fc -> GELU -> proj with biases, or
// Mixtral's SwiGLU without; hidden width F = moe.ffn_hidden_size, 4C by default) for every token, and the token's output
// is the gate-weighted sum of theirs. Each expert takes at most `capacity` tokens of a micro-batch
// (moe_config.h), so every shape is fixed: no host synchronization, CUDA graphs still apply, and
// a choice past an expert's capacity is dropped (the residual stream carries that token on).
// Dropless (moe.dropless, MegaBlocks', Megatron's default): no choice is dropped; the experts' rows
// are packed (N * K of them, expert by expert), and the host reads the E counts after routing (one
// wait for the GPU per block and micro-batch) to size each expert's GEMMs, as Megatron's grouped
// GEMM does. Steps then cannot be CUDA graphs. With expert parallelism the expert group also
// all-gathers its ranks' counts (on the host) and the exchanges send uneven blocks (all_to_allv):
// a rank's packed rows are already in the order of the ranks holding their experts.
// A load-balancing loss (aux_loss_coef x E x sum_e f_e P_e) and the router z-loss (z_loss_coef x
// the tokens' mean of log(sum_e exp(logit_e))^2, ST-MoE: it keeps the router's logits small) are
// added to the objective.
//
// Expert parallelism (an expert group of G data-parallel ranks, MoEConfig::expert_parallel): rank g
// holds experts [g E/G, (g+1) E/G). Each rank routes its own tokens, sends each expert's slots to
// the rank holding it (all-to-all), runs its experts on the slots of every rank of the group (in
// [source rank][local expert] order), and the results come back the same way. The experts' gradients are summed over the expert-data group
// (the ranks holding the same experts), not over the whole data group.
//
// Tensor parallelism (a tensor group of t ranks, Megatron's split of each expert's MLP): every rank
// routes the same tokens (the router is replicated), each expert's fc is column-split and its proj
// row-split, so a rank's experts give partial sums; the combine sums them over the group (one
// all-reduce of the output, rank 0 adding the residual and the proj biases), and backward sums the
// gates' gradients and the input's over the group.
//
// Shared experts (moe.shared_experts = s > 0, DeepSeekMoE's, Megatron's shared expert): one more MLP
// of the same kind, hidden width s x F, that every token goes through, its output added to the gated sum. It is
// not an expert: every rank of an expert group holds it (as the router), its gradient is summed
// over the data group, and tensor parallelism splits it as a dense MLP. With moe.shared_gate its
// output is multiplied by a per-token sigmoid(x . w) (Qwen1.5/2-MoE's shared_expert_gate): the
// factor scales the MLP's hidden rows before proj (the same product, and a rank's column shard is
// scaled alone); w is replicated, as the router.
//
// Parameters: h.L.moe.router.w (E, C), and per expert j (global index) h.L.moe.experts.j.fc.w
// (F, C; SwiGLU [gate | up] 2F, C), .fc.b, .proj.w (C, F), .proj.b (the biases where the model has
// them): initialized by name and index like every parameter, so which rank holds an expert (or which
// shard of it) does not change it; the shared MLP's h.L.moe.shared.* likewise at width s F, and its
// gate's h.L.moe.shared_gate.w (1, C).
#pragma once
#include <string>
#include <vector>

#include "core/alloc.h"
#include "core/comm.h"
#include "core/ops.h"
#include "core/parameters.h"
#include "moe/moe_config.h"

namespace trellis {

struct ExpertParams {
  const Parameter *fc_w, *fc_b, *proj_w, *proj_b;
};

struct MoEParams {
  const Parameter* router_w = nullptr;
  std::vector<ExpertParams> experts;  // this rank's, in expert order
  ExpertParams shared = {};           // moe.shared_experts > 0: the MLP every token goes through
  const Parameter* shared_gate_w = nullptr;  // moe.shared_gate: its gate (1, C)
};

// What backward needs, for one micro-batch. N tokens, K choices, S = E * capacity slots (dropless:
// N * K, packed); with expert parallelism the expert tensors (xe, he, ge) hold this rank's experts'
// slots from every rank of the group (G * E/G * capacity = S rows as well; dropless, what came).
struct MoESaved {
  Tensor probs, lse, expert, gate, slot, slot_token, counts;  // routing (moe_route)
  // Expert inputs (rows, C), fc outputs (rows, F; SwiGLU 2F) and their activation (rows, F); the
  // outputs back in routing order (S, C).
  Tensor xe, he, ge, ye;
  Tensor hs, gs;  // the shared MLP's fc outputs and their activation (N, its width; SwiGLU hs twice it)
  Tensor gz;      // moe.shared_gate: its logits, f32 (N, 1)
  // moe.dropless: each local expert's rows from each rank of the expert group, [source][local expert]
  // (counts read to the host after routing: the GEMMs' sizes); with expert parallelism the rows sent
  // to and received from each rank (the exchanges' sizes).
  std::vector<int64_t> expert_rows, send_rows, recv_rows;
};

class MoEMLP {
 public:
  // The parameters of block `layer`'s experts on expert rank `expert_rank` of moe.expert_parallel,
  // as tensor rank `tensor_rank` of `tensor` holds them.
  static void append_specs(const MoEConfig& moe, int64_t d_model, int64_t n_layers, int layer, int expert_rank,
                           std::vector<ParameterSpec>& out, int tensor = 1, int tensor_rank = 0);
  static MoEParams params_of(const ParameterStore& store, const MoEConfig& moe, int layer, int expert_rank);
  // Whether a parameter is an expert's (held by one rank of an expert group; its gradient is summed
  // over the expert-data group), by its name.
  static bool is_expert_parameter(const std::string& name) { return name.find(".moe.experts.") != std::string::npos; }

  // `group`: the expert group (its size is moe.expert_parallel), or null for 1. `tensor`: the tensor
  // group the experts are split over (the parameters are its rank's shards), or null. With
  // sequence_parallel the layer's input and output (and their gradients) are this rank's token rows
  // of the micro-batch: it gathers the rows, routes all of them, and reduce-scatters its output.
  MoEMLP(const MoEConfig& moe, DType dtype, const MoEParams& p, Communicator* group, Communicator* tensor = nullptr,
         bool sequence_parallel = false);

  // out (N, C) = [*residual +] the experts' gated sum for x (N, C). What backward needs goes to s,
  // from `keep`; temporaries from `temp`. With out undefined: stops before the combine (the
  // recomputation of activation checkpointing). stats (defined): moe_statistics adds this micro-batch's.
  void forward(Runtime& rt, const Tensor& out, const Tensor& x, const Tensor* residual, MoESaved& s, Arena& keep,
               Arena& temp, const Tensor& stats = Tensor()) const;
  // dx (N, C) = dL/dx (written) from dout = dL/dout; the parameters' gradients are added.
  // aux_scale, z_scale: d(objective)/d(balancing loss), d(objective)/d(z-loss) for this micro-batch
  // (see GPT's StepContext).
  void backward(Runtime& rt, const Tensor& dx, const Tensor& dout, const Tensor& x, const MoESaved& s, float aux_scale,
                float z_scale, Arena& work) const;

  std::vector<const Parameter*> parameters() const;

  // Bytes kept for backward and of the temporaries, for N tokens, on a rank of a tensor group of t.
  static size_t kept_bytes(const MoEConfig& moe, int64_t d_model, DType dtype, int64_t N, int t = 1);
  static size_t work_bytes(const MoEConfig& moe, int64_t d_model, DType dtype, int64_t N, int t = 1,
                           bool sequence_parallel = false);

 private:
  // One batch of the experts' GEMMs: local experts [expert, expert + experts), `rows` rows each, the
  // first expert's from row `row` of the expert tensors, the next expert's `rows` after it.
  struct ExpertRun {
    int64_t expert, experts, row, rows;
  };
  // f(run) for each run: with a capacity, one over the local experts per source rank (its slots,
  // capacity each); dropless, one per source rank and local expert that has rows (its packed rows).
  template <class F>
  void for_each_run(const MoESaved& s, F f) const;
  // A run's GEMM batch on rows of `cols_a` and `cols_out` columns.
  MatmulOptions over_experts(const ExpertRun& run, int64_t cols_a, int64_t cols_out) const;
  // The expert MLPs on xe's slots: he, ge, ye (forward) or, given dye, dxe and the gradients.
  void experts_forward(Runtime& rt, const MoESaved& s) const;
  void experts_backward(Runtime& rt, const Tensor& dxe, const Tensor& dye, const MoESaved& s) const;
  // The shared MLP: its fc and activation for x into s.hs, s.gs (and its gate's logits s.gz), from
  // `keep`; then out += its output (this rank's part under tensor parallelism, the bias on the first
  // rank). Backward adds its part of dx (N, C) for dout (N, C), and its gradients; s.gs (and with
  // SwiGLU s.hs) is overwritten. It returns the gate's dlogits (N, 1) in the model's dtype, summed
  // over the tensor group, whose dx part the caller adds as the router's; undefined without a gate.
  void shared_hidden(Runtime& rt, const Tensor& x, MoESaved& s, Arena& keep) const;
  void shared_output(Runtime& rt, const Tensor& out, const MoESaved& s, Arena& temp) const;
  Tensor shared_backward(Runtime& rt, const Tensor& dx, const Tensor& dout, const Tensor& x, const MoESaved& s,
                         Arena& work) const;
  bool has_shared() const { return p_.shared.fc_w != nullptr; }
  // Slots in routing order (E experts' capacity each, or dropless their packed rows) -> slots in
  // expert order on the ranks holding them, or back (`back`); with one rank a copy is not needed
  // (returns `in`).
  Tensor exchange(const Tensor& in, Arena& arena, const MoESaved& s, bool back) const;

  MoEConfig moe_;
  DType dtype_;
  MoEParams p_;
  Communicator* group_;
  Communicator* tensor_;  // null without tensor parallelism
  bool sequence_parallel_;
  // With sequence parallelism: every rank's rows of a token-sharded (rows, C) tensor, from `arena`; else `rows`.
  Tensor gathered(const Tensor& rows, Arena& arena) const;
  bool first_tensor_rank() const { return !tensor_ || tensor_->rank() == 0; }
  // Dropless: s.expert_rows (and the exchanges' rows) from s.counts, through host_counts_ (a wait for
  // the routing; with expert parallelism every rank's counts, all-gathered).
  void read_expert_rows(Runtime& rt, MoESaved& s) const;
  mutable std::vector<float> host_counts_;
  // Sums a partial result over the tensor group (nothing without one).
  void tensor_sum(const Tensor& t) const;
};

}  // namespace trellis
