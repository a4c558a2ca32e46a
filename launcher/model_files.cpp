// Writing model.json + params.f32 (and other raw tensors) for PyTorch and tests.
#include "launcher/model_files.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "core/ops.h"
#include "launcher/checkpointing.h"

namespace trellis {

void write_file_atomically(const std::string& path, const std::function<void(const ByteSink&)>& produce) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw UserError(path + ": cannot write: " + std::strerror(errno));
  auto error = [&](int err) { return UserError(path + ": cannot write: " + std::strerror(err)); };
  try {  // whatever fails (a write, or `produce` itself), the temporary goes
    produce([&](const void* data, size_t bytes) {
      const char* p = static_cast<const char*>(data);
      for (size_t done = 0; done < bytes;) {
        const ssize_t n = ::write(fd, p + done, bytes - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) throw error(n < 0 ? errno : ENOSPC);
        done += size_t(n);
      }
    });
    if (::fsync(fd) != 0) throw error(errno);
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw error(err);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) throw UserError(path + ": cannot write: " + ec.message());
  const std::string dir = std::filesystem::path(path).parent_path().string();
  const int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {  // best effort: the file itself is complete either way
    ::fsync(dfd);
    ::close(dfd);
  }
}

namespace {

void write_raw(const std::string& path, const void* data, size_t bytes) {
  write_file_atomically(path, [&](const ByteSink& write) { write(data, bytes); });
}

}  // namespace

void write_tensor_f32(Runtime& rt, const Tensor& t, const std::string& path) {
  std::vector<float> host(size_t(t.numel()));
  Tensor h(host.data(), DType::f32, Device::CPU(), t.shape);
  if (t.dtype == DType::f32) {
    copy(rt, h, t);
  } else {
    Buffer tmp(rt.allocator(), size_t(t.numel()) * 4, "tensor export");
    Tensor f = tmp.tensor(DType::f32, t.shape);
    cast(rt, f, t);
    copy(rt, h, f);
    rt.synchronize();
  }
  rt.synchronize();
  write_raw(path, host.data(), host.size() * 4);
}

void write_tensor_i32(Runtime& rt, const Tensor& t, const std::string& path) {
  std::vector<int32_t> host(size_t(t.numel()));
  copy(rt, Tensor(host.data(), DType::i32, Device::CPU(), t.shape), t);
  rt.synchronize();
  write_raw(path, host.data(), host.size() * 4);
}

namespace {

// model.json: the config, `extra` merged in at the top level, and each parameter's name, shape
// and offset in params.f32.
void write_model_json(const GPTConfig& mc, const std::vector<ParameterSpec>& specs, const std::string& dir,
                      const JsonObject& extra) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw UserError(dir + ": cannot create directory: " + ec.message());
  JsonObject config;
  config.add("vocab_size", mc.vocab_size).add("padded_vocab", mc.padded_vocab()).add("seq_len", mc.seq_len);
  config.add("n_layers", mc.n_layers).add("n_heads", mc.n_heads).add("d_model", mc.d_model);
  config.add("dropout", double(mc.dropout)).add("attention_dropout", double(mc.attention_dropout));
  if (mc.rope) config.add("position_embedding", std::string("rope")).add("rope_theta", mc.rope_theta);  // else learned
  if (mc.rope && mc.rope_dims > 0) config.add("rope_dims", mc.rope_dims);  // partial rotary; else the whole head
  if (mc.sliding_window > 0) config.add("sliding_window", mc.sliding_window);  // else every earlier position
  if (mc.rope && mc.rope_yarn)  // YaRN, written where it is used
    config.add("rope_scaling", std::string("yarn")).add("rope_scaling_factor", mc.rope_factor)
        .add("rope_original_positions", mc.rope_original_positions).add("rope_beta_fast", mc.rope_beta_fast)
        .add("rope_beta_slow", mc.rope_beta_slow).add("rope_attention_factor", mc.rope_attention_factor);
  else if (mc.rope && mc.rope_longrope)  // LongRoPE, likewise, with both factor lists
    config.add("rope_scaling", std::string("longrope")).add("rope_scaling_factor", mc.rope_factor)
        .add("rope_original_positions", mc.rope_original_positions).add("rope_attention_factor", mc.rope_attention_factor)
        .add("rope_long_factors", mc.rope_long_factors).add("rope_short_factors", mc.rope_short_factors);
  else if (mc.rope && mc.rope_factor != 1.0 && mc.rope_linear)  // position interpolation, likewise
    config.add("rope_scaling", std::string("linear")).add("rope_scaling_factor", mc.rope_factor);
  else if (mc.rope && mc.rope_factor != 1.0)  // Llama 3's scaling, likewise
    config.add("rope_scaling", std::string("llama3")).add("rope_scaling_factor", mc.rope_factor)
        .add("rope_low_freq_factor", mc.rope_low_freq_factor).add("rope_high_freq_factor", mc.rope_high_freq_factor)
        .add("rope_original_positions", mc.rope_original_positions);
  if (mc.swiglu) config.add("mlp", std::string("swiglu"));  // else gelu
  if (mc.mlp_width() != 4 * mc.d_model) config.add("ffn_hidden_size", mc.mlp_width());  // else 4 x d_model
  if (mc.rmsnorm) config.add("norm", std::string("rmsnorm"));  // else layernorm
  if (!mc.tied_head) config.add("tie_embeddings", false);       // else true
  if (float(mc.norm_eps) != 1e-5f) config.add("norm_eps", mc.norm_eps);  // else 1e-5
  if (!mc.bias) config.add("bias", false);                                // else true
  if (!mc.bias && mc.qkv_bias) config.add("qkv_bias", true);             // else false
  if (mc.kv_heads() != mc.n_heads) config.add("n_kv_heads", mc.kv_heads());  // else n_heads
  if (mc.head_size > 0) config.add("head_dim", mc.head_size);                // else d_model / n_heads
  if (mc.qk_norm) config.add("qk_norm", true);                              // else false
  if (mc.moe.experts > 0) {
    JsonObject moe;
    moe.add("experts", mc.moe.experts).add("top_k", mc.moe.top_k).add("capacity_factor", mc.moe.capacity_factor);
    moe.add("aux_loss_coef", double(mc.moe.aux_loss_coef)).add("layer_freq", mc.moe.layer_freq);
    if (mc.moe.z_loss_coef > 0) moe.add("z_loss_coef", double(mc.moe.z_loss_coef));  // written when used
    if (mc.moe.shared_experts > 0) moe.add("shared_experts", mc.moe.shared_experts);
    if (mc.moe.shared_gate) moe.add("shared_gate", true);  // else false
    if (mc.moe.dropless) moe.add("dropless", true);        // else false
    if (mc.moe.ffn_hidden > 0) moe.add("ffn_hidden_size", mc.moe.ffn_hidden);  // else 4 x d_model
    if (!mc.moe.renormalize) moe.add("renormalize", false);                      // else true
    if (mc.moe.first_dense > 0) moe.add("first_dense_layers", mc.moe.first_dense);  // else 0
    config.add("moe", moe);
  }
  std::string params = "[";
  int64_t offset = 0;
  for (const ParameterSpec& s : specs) {
    JsonObject o;
    std::vector<int64_t> shape(s.shape.dims.begin(), s.shape.dims.begin() + s.shape.rank);
    o.add("name", s.name).add("shape", shape).add("offset", offset);
    offset += s.shape.numel();
    if (params.size() > 1) params += ',';
    params += o.str();
  }
  params += "]";
  JsonObject root;
  root.add("config", config);
  std::string text = root.str();
  text.pop_back();  // merge: {"config": ..., <extra>, "params": [...]}
  if (!extra.empty()) {
    const std::string e = extra.str();
    text += ',';
    text.append(e, 1, e.size() - 2);
  }
  text += ",\"params\":";
  text += params;
  text += "}\n";
  write_raw(dir + "/model.json", text.data(), text.size());
}

}  // namespace

void check_export_dir_free(const std::string& option, const std::string& dir) {
  namespace fs = std::filesystem;
  for (const char* name : {"model.json", "params.f32", "grads.f32"})
    if (fs::exists(fs::path(dir) / name))
      throw UserError(option + " " + dir + ": already holds an export (" + name +
                      "); give another directory, or remove that one to replace it");
  // Anything else there is the user's: the export's files (and their temporaries) must not land
  // beside it, let alone over it.
  std::error_code ec;
  if (fs::is_directory(dir, ec)) {
    fs::directory_iterator it(dir, ec);
    if (!ec && it != fs::directory_iterator())
      throw UserError(option + " " + dir + ": is not empty (it holds " + it->path().filename().string() +
                      "); an export goes into a new or empty directory");
  }
  check_writable_dir(option + " " + dir, dir);
}

void check_export_outside_checkpoints(const std::string& option, const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  for (fs::path p = fs::weakly_canonical(dir, ec); !p.empty() && p != p.root_path(); p = p.parent_path())
    if (fs::exists(p / "manifest.json", ec))
      throw UserError(option + " " + dir + ": lies inside the checkpoint " + p.string() +
                      ", which pruning or a later save would delete with it; give a directory outside it");
}

void write_model_files(Runtime& rt, GPT& model, const std::string& dir, const JsonObject& extra) {
  std::vector<ParameterSpec> specs;
  for (const Parameter& p : model.params().all()) {
    TRELLIS_CHECK(p.offset == (specs.empty() ? 0 : model.params().all()[specs.size() - 1].offset +
                                                        specs.back().shape.numel()),
                  "parameters are not laid out back to back");
    specs.push_back(p.spec);
  }
  write_model_json(model.config(), specs, dir, extra);
  write_tensor_f32(rt, model.params().flat_values(), dir + "/params.f32");
}

void write_model_files(const GPTConfig& mc, const std::vector<ParameterSpec>& specs, const std::vector<float>& values,
                       const std::string& dir, const JsonObject& extra) {
  write_model_json(mc, specs, dir, extra);
  write_raw(dir + "/params.f32", values.data(), values.size() * 4);
}

}  // namespace trellis
