// Writing model.json + params.f32 (and other raw tensors) for PyTorch and tests.
#include "launcher/model_files.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "core/ops.h"

namespace trellis {

namespace {

void write_raw(const std::string& path, const void* data, size_t bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(static_cast<const char*>(data), std::streamsize(bytes));
  f.close();
  if (!f) throw UserError(path + ": cannot write: " + std::strerror(errno));
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

void write_model_files(Runtime& rt, GPT& model, const std::string& dir, const JsonObject& extra) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw UserError(dir + ": cannot create directory: " + ec.message());
  const GPTConfig& mc = model.config();
  JsonObject config;
  config.add("vocab_size", mc.vocab_size).add("padded_vocab", mc.padded_vocab()).add("seq_len", mc.seq_len);
  config.add("n_layers", mc.n_layers).add("n_heads", mc.n_heads).add("d_model", mc.d_model);
  config.add("dropout", double(mc.dropout)).add("attention_dropout", double(mc.attention_dropout));
  std::string params = "[";
  for (const Parameter& p : model.params().all()) {
    JsonObject o;
    std::vector<int64_t> shape(p.spec.shape.dims.begin(), p.spec.shape.dims.begin() + p.spec.shape.rank);
    o.add("name", p.spec.name).add("shape", shape).add("offset", p.offset);
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
  write_tensor_f32(rt, model.params().flat_values(), dir + "/params.f32");
}

}  // namespace trellis
