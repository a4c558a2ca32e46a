// Config loading: defaults, --set conversions, every user error as one line naming the file and
// key, round-trip through config_to_toml, and docs/config.md kept equal to the generated reference.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "launcher/cli.h"
#include "launcher/train_config.h"
#include "launcher/trainer.h"

namespace trellis {
namespace {

namespace fs = std::filesystem;

class ConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("trellis_config_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes `text` to <dir>/tiny.toml and returns its path.
  std::string write(const std::string& text, const std::string& name = "tiny.toml") {
    const std::string path = (dir_ / name).string();
    std::ofstream(path) << text;
    return path;
  }
  // The UserError message of loading `text` with `overrides`; fails the test if it loads.
  std::string error_of(const std::string& text, const std::vector<std::string>& overrides = {}) {
    const std::string path = write(text);
    try {
      load_config(path, overrides);
    } catch (const UserError& e) {
      const std::string msg = e.what();
      EXPECT_EQ(msg.find('\n'), std::string::npos) << "not one line: " << msg;
      return msg;
    }
    ADD_FAILURE() << "no error for:\n" << text;
    return "";
  }
  std::string world_error_of(const std::string& text, int world) {
    const Config c = load_config(write(text), {});
    try {
      validate_for_world(c, world);
    } catch (const UserError& e) {
      return e.what();
    }
    ADD_FAILURE() << "no error for world " << world << ":\n" << text;
    return "";
  }

  fs::path dir_;
};

#define EXPECT_HAS(haystack, needle) EXPECT_NE((haystack).find(needle), std::string::npos) << (haystack)

TEST_F(ConfigTest, EmptyFileGivesDefaults) {
  const Config c = load_config(write(""), {});
  const Config d;
  EXPECT_EQ(config_to_toml(c), config_to_toml(d));
  EXPECT_EQ(c.model.vocab_size, 50257);
  EXPECT_EQ(c.parallel.schedule, "1f1b");
  EXPECT_EQ(c.train.precision, "auto");
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 6e-4);
  EXPECT_EQ(c.path, (dir_ / "tiny.toml").string());
  EXPECT_NO_THROW(validate_for_world(c, 1));
}

TEST_F(ConfigTest, ReadsEverySectionAndIntegersForFloats) {
  const Config c = load_config(write(R"(
[model]
n_layers = 2
d_model = 64
n_heads = 4
[train]
precision = "fp32"
deterministic = true
grad_clip = 2
[optimizer]
lr = 3e-3
min_lr = 3e-4
[log]
metrics_file = "runs/m.jsonl"
)"), {});
  EXPECT_EQ(c.model.n_layers, 2);
  EXPECT_EQ(c.train.precision, "fp32");
  EXPECT_TRUE(c.train.deterministic);
  EXPECT_DOUBLE_EQ(c.train.grad_clip, 2.0);
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 3e-3);
  EXPECT_EQ(c.log.metrics_file, "runs/m.jsonl");
}

TEST_F(ConfigTest, MissingFile) {
  try {
    load_config((dir_ / "nope.toml").string(), {});
    FAIL();
  } catch (const UserError& e) {
    EXPECT_HAS(std::string(e.what()), "nope.toml: cannot read config file: No such file");
  }
}

TEST_F(ConfigTest, SyntaxErrorHasLineAndColumn) {
  const std::string msg = error_of("[model]\nn_layers = 2\nd_model = = 3\n");
  EXPECT_HAS(msg, "tiny.toml:3:");
  EXPECT_HAS(msg, "TOML syntax error");
}

TEST_F(ConfigTest, UnknownSectionAndKey) {
  EXPECT_HAS(error_of("[modle]\nn_layers = 2\n"), "tiny.toml: unknown section [modle] (known sections: model, parallel");
  const std::string msg = error_of("[model]\nn_layer = 2\n");
  EXPECT_HAS(msg, "tiny.toml: unknown key model.n_layer (known keys in [model]: vocab_size, seq_len, n_layers");
  EXPECT_HAS(error_of("steps = 2\n"), "tiny.toml: unknown top-level key steps");
  EXPECT_HAS(error_of("model = 2\n"), "tiny.toml: model must be a table ([model]), got integer 2");
}

TEST_F(ConfigTest, WrongTypes) {
  EXPECT_HAS(error_of("[model]\nn_layers = \"4\"\n"), "tiny.toml: model.n_layers must be an integer, got string \"4\"");
  EXPECT_HAS(error_of("[model]\nn_layers = 4.5\n"), "tiny.toml: model.n_layers must be an integer, got float 4.5");
  EXPECT_HAS(error_of("[train]\nprecision = 16\n"), "tiny.toml: train.precision must be a string, got integer 16");
  EXPECT_HAS(error_of("[train]\ndeterministic = \"yes\"\n"), "train.deterministic must be a boolean, got string");
  EXPECT_HAS(error_of("[optimizer]\nlr = [1]\n"), "optimizer.lr must be a float, got array");
}

TEST_F(ConfigTest, ValuesOutsideTheAllowedSet) {
  EXPECT_HAS(error_of("[train]\nprecision = \"fp8\"\n"),
             "tiny.toml: train.precision = \"fp8\" is not allowed (allowed: auto, fp32, bf16, fp16)");
  EXPECT_HAS(error_of("[train]\ndevice = \"tpu\"\n"), "(allowed: auto, cpu, cuda)");
  EXPECT_HAS(error_of("[train]\ncheckpointing = \"some\"\n"), "(allowed: none, full, selective, elementwise)");
  EXPECT_HAS(error_of("[parallel]\nschedule = \"zb\"\n"), "(allowed: gpipe, 1f1b, interleaved)");
  EXPECT_HAS(error_of("[data]\nsource = \"web\"\n"), "(allowed: synthetic, random, file)");
  EXPECT_HAS(error_of("[model]\nd_model = 0\n"), "tiny.toml: model.d_model = 0 is not allowed (allowed: 1 to 2147483647)");
  EXPECT_HAS(error_of("[model]\ndropout = 1.0\n"), "model.dropout = 1.0 is not allowed (allowed: in [0, 1))");
  EXPECT_HAS(error_of("[optimizer]\nbeta2 = 1\n"), "optimizer.beta2 = 1.0 is not allowed (allowed: in [0, 1))");
  EXPECT_HAS(error_of("[optimizer]\nmin_lr = -1e-5\n"), "optimizer.min_lr = -0.00001 is not allowed (allowed: >= 0)");
  EXPECT_HAS(error_of("[train]\ngrad_clip = -1.0\n"), "train.grad_clip = -1.0 is not allowed (allowed: >= 0)");
  EXPECT_HAS(error_of("[log]\nevery = 0\n"), "log.every = 0 is not allowed (allowed: 1 to 2147483647)");
  EXPECT_HAS(error_of("[zero]\nstage = 4\n"), "zero.stage = 4 is not allowed (allowed: 0 to 3)");
  EXPECT_HAS(error_of("[optimizer]\neps = nan\n"), "optimizer.eps = nan is not allowed");
  // Integers wrap past 2^31 - 1 where they are used as int; floats are used as f32.
  EXPECT_HAS(error_of("[train]\nmicro_batch = 4294967298\n"),
             "train.micro_batch = 4294967298 is not allowed (allowed: 1 to 2147483647)");
  EXPECT_HAS(error_of("[model]\nn_layers = 5000\n"), "model.n_layers = 5000 is not allowed (allowed: 1 to 4096)");
  EXPECT_HAS(error_of("[optimizer]\neps = 1e-300\n"), "optimizer.eps = 1e-300 is not allowed: it is used as an f32, "
                                                       "where it would be 0");
  EXPECT_HAS(error_of("[fp16]\nmin_scale = 1e300\n"), "fp16.min_scale = 1e+300 is not allowed: it is used as an f32, "
                                                        "where it would be infinite");
}

TEST_F(ConfigTest, RelationsBetweenKeys) {
  EXPECT_HAS(error_of("[model]\nn_heads = 5\nd_model = 64\n"),
             "tiny.toml: model.n_heads = 5 does not divide model.d_model = 64");
  EXPECT_HAS(error_of("[optimizer]\nlr = 1e-4\nmin_lr = 1e-3\n"),
             "tiny.toml: optimizer.lr = 0.0001 is less than optimizer.min_lr = 0.001");
  // Products that would wrap in the memory plan are refused by name; the largest sizes that count
  // still pass (12 x 4096 x 262144^2 parameters is 3.4e15 > 2^50; 8192 wide, 3.3e12).
  EXPECT_HAS(error_of("[model]\nn_layers = 4096\nd_model = 262144\nn_heads = 1\n"),
             "parameters is beyond what the memory plan can count (allowed: below 2^50)");
  EXPECT_NO_THROW(load_config(write("[model]\nn_layers = 4096\nd_model = 8192\nn_heads = 64\n"), {}));
  EXPECT_HAS(error_of("[model]\nn_layers = 4096\nseq_len = 1048576\nd_model = 128\nn_heads = 2\n"
                      "[train]\nmicro_batch = 65536\n"),
             "model.n_layers x train.micro_batch x model.seq_len x 4 x model.d_model = 1.44e+17 elements of activations");
  // Dropless with expert parallelism, a rank's experts are planned for what they may receive: 256
  // ranks x 2^23 tokens x min(2 choices, 2 experts) rows is past what a slot index counts.
  EXPECT_HAS(error_of("[model]\nseq_len = 1024\n[train]\nmicro_batch = 8192\n"
                      "[moe]\nexperts = 512\ndropless = true\n[parallel]\nexpert = 256\n"),
             "parallel.expert x train.micro_batch x model.seq_len x min(moe.top_k, moe.experts / parallel.expert) "
             "(dropless: the rows a rank's experts may receive) = 4.29e+09 rows is beyond what a slot index can count");
  // A wide dense MLP counts by its own width, SwiGLU's fc twice it.
  EXPECT_HAS(error_of("[model]\nffn_hidden_size = 1073741824\n[train]\nmicro_batch = 1048576\n"),
             "tiny.toml: train.micro_batch x model.seq_len x max(model.ffn_hidden_size, model.vocab_size) =");
  EXPECT_HAS(error_of("[model]\nn_layers = 4096\nseq_len = 64\nmlp = \"swiglu\"\nffn_hidden_size = 1073741824\n"
                      "[train]\nmicro_batch = 1\n"),
             "x (4 x model.d_model + 2 x model.ffn_hidden_size + model.ffn_hidden_size) x model.d_model");
  // With experts, theirs by their own width (Mixtral's: SwiGLU, twice it in fc).
  EXPECT_HAS(error_of("[model]\nn_layers = 4096\nseq_len = 64\nmlp = \"swiglu\"\n[moe]\nexperts = 64\n"
                      "ffn_hidden_size = 16777216\n[train]\nmicro_batch = 1\n"),
             "x (4 x model.d_model + 8 x model.d_model + 4 x model.d_model + (2 x moe.ffn_hidden_size + "
             "moe.ffn_hidden_size) x (moe.experts + moe.shared_experts)) x model.d_model");
  EXPECT_HAS(error_of("[model]\nmlp = \"swiglu\"\n[moe]\nexperts = 4\nshared_experts = 2\nffn_hidden_size = 1073741824\n"
                      "[train]\nmicro_batch = 1048576\n"),
             "max(8 x model.d_model, 2 x moe.ffn_hidden_size x moe.shared_experts, model.vocab_size)");
  EXPECT_NO_THROW(load_config(write("[model]\nmlp = \"swiglu\"\nbias = false\n[moe]\nexperts = 8\nffn_hidden_size = 112\n"), {}));
  // The shared MLP's gate (Qwen2-MoE's): a shared MLP without biases to gate.
  EXPECT_NO_THROW(load_config(write("[model]\nmlp = \"swiglu\"\nbias = false\n[moe]\nexperts = 8\nshared_experts = 1\n"
                                    "shared_gate = true\n"), {}));
  EXPECT_HAS(error_of("[model]\nbias = false\n[moe]\nexperts = 8\nshared_gate = true\n"),
             "moe.shared_gate = true gates the shared MLP of a model without biases (allowed: with moe.shared_experts > 0 "
             "and model.bias = false");
  EXPECT_HAS(error_of("[moe]\nexperts = 8\nshared_experts = 1\nshared_gate = true\n"), "moe.shared_gate = true gates");
  EXPECT_NO_THROW(load_config(write("[model]\nmlp = \"swiglu\"\nffn_hidden_size = 11008\n"), {}));
  // Document masking needs its end-of-document token, one of the vocabulary.
  EXPECT_HAS(error_of("[data]\ndocument_mask = true\n"),
             "tiny.toml: data.document_mask = true needs data.eod_token, the end-of-document token's id");
  EXPECT_HAS(error_of("[model]\nvocab_size = 100\n[data]\ndocument_mask = true\neod_token = 100\n"),
             "tiny.toml: data.eod_token = 100 is not a token of model.vocab_size = 100 (allowed: -1 = none, or 0 to 99)");
  EXPECT_NO_THROW(load_config(write("[model]\nvocab_size = 100\n[data]\ndocument_mask = true\neod_token = 99\n"), {}));
  EXPECT_HAS(error_of("[data]\neod_mask_loss = true\n"),
             "tiny.toml: data.eod_mask_loss = true needs data.eod_token, the end-of-document token's id");
  EXPECT_NO_THROW(load_config(write("[model]\nvocab_size = 100\n[data]\neod_mask_loss = true\neod_token = 99\n"), {}));
  // --eval's config: checkpoint.dir's checkpoints read as a resume, nothing saved or logged.
  Config c = load_config(write("[checkpoint]\ndir = \"/nonexistent/ck\"\nkeep_best = true\n[log]\n"
                               "metrics_file = \"m.jsonl\"\nval_every = 0\n"), {});
  const Config e = evaluation_config(c);
  EXPECT_EQ(e.checkpoint.resume, "none");  // no checkpoint there: what a run would start from
  EXPECT_TRUE(e.checkpoint.dir.empty() && e.log.metrics_file.empty() && !e.checkpoint.keep_best);
  EXPECT_EQ(e.log.val_every, 1);
}

TEST_F(ConfigTest, SetConvertsByType) {
  const Config c = load_config(write("[model]\nn_layers = 2\n"),
                               {"model.n_layers=3", "optimizer.lr=1e-3", "train.deterministic=true",
                                "train.precision=bf16", "log.metrics_file=\"a b.jsonl\"", "model.dropout=0"});
  EXPECT_EQ(c.model.n_layers, 3);
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 1e-3);
  EXPECT_TRUE(c.train.deterministic);
  EXPECT_EQ(c.train.precision, "bf16");
  EXPECT_EQ(c.log.metrics_file, "a b.jsonl");
  EXPECT_DOUBLE_EQ(c.model.dropout, 0.0);
  // The last --set of a key wins.
  EXPECT_EQ(load_config(write(""), {"train.steps=5", "train.steps=7"}).train.steps, 7);
}

TEST_F(ConfigTest, BadSet) {
  EXPECT_HAS(error_of("", {"train.steps=abc"}),
             "--set train.steps=abc: train.steps must be an integer (allowed: 1 to 2147483647)");
  EXPECT_HAS(error_of("", {"train.steps=1.5"}), "--set train.steps=1.5: train.steps must be an integer");
  EXPECT_HAS(error_of("", {"model.vocab_size=99999999999999999999"}),
             "model.vocab_size must be an integer of 64 bits (allowed: 1 to 2147483647)");
  EXPECT_HAS(error_of("", {"optimizer.lr=inf"}), "--set optimizer.lr=inf: optimizer.lr must be a finite number (allowed: >= 0)");
  EXPECT_HAS(error_of("", {"optimizer.lr=fast"}), "--set optimizer.lr=fast: optimizer.lr must be a finite number");
  EXPECT_HAS(error_of("", {"train.deterministic=1"}), "--set train.deterministic=1: not a boolean");
  EXPECT_HAS(error_of("", {"train.steps"}), "--set train.steps: expected section.key=value");
  EXPECT_HAS(error_of("", {"steps=3"}), "--set steps=3: expected section.key=value");
  EXPECT_HAS(error_of("", {"trian.steps=3"}), "--set trian.steps=3: unknown section [trian]");
  EXPECT_HAS(error_of("", {"train.step=3"}), "--set train.step=3: unknown key train.step (known keys in [train]:");
  EXPECT_HAS(error_of("", {"train.precision=fp8"}),
             "--set train.precision=fp8: train.precision = \"fp8\" is not allowed (allowed: auto, fp32, bf16, fp16)");
  EXPECT_HAS(error_of("", {"model.n_heads=5"}), "tiny.toml: model.n_heads = 5 does not divide model.d_model = 768");
}

TEST_F(ConfigTest, WorldLayoutAndBatch) {
  EXPECT_HAS(world_error_of("[train]\nmicro_batch = 8\nglobal_batch = 24\n", 2),
             "tiny.toml: train.global_batch = 24 is not a multiple of train.micro_batch (8) x data-parallel size (2) = 16");
  EXPECT_HAS(world_error_of("[train]\nmicro_batch = 8\nglobal_batch = 12\n", 1),
             "train.global_batch = 12 is not a multiple of train.micro_batch (8) x data-parallel size (1) = 8");
  const Config c = load_config(write("[train]\nmicro_batch = 4\nglobal_batch = 32\n"), {});
  const BatchLayout b = resolve_batch(c, 4);
  EXPECT_EQ(b.data, 4);
  EXPECT_EQ(b.global_batch, 32);
  EXPECT_EQ(b.accumulation, 2);
  EXPECT_EQ(resolve_batch(load_config(write(""), {}), 1).global_batch, 8);
  // At most kMaxAccumulation micro-batches a step on each data rank.
  EXPECT_EQ(resolve_batch(load_config(write("[train]\nmicro_batch = 2\nglobal_batch = 262144\n"), {}), 2).accumulation,
            kMaxAccumulation);
  EXPECT_HAS(world_error_of("[train]\nmicro_batch = 2\nglobal_batch = 262148\n", 2),
             "train.global_batch = 262148 makes 65537 micro-batches a step on each data rank");
  EXPECT_NO_THROW(validate_for_world(c, 1));
}

TEST_F(ConfigTest, ZeroStages) {
  for (int stage = 0; stage <= 3; ++stage)
    EXPECT_NO_THROW(validate_for_world(load_config(write("[zero]\nstage = " + std::to_string(stage) + "\n"), {}), 2));
  EXPECT_HAS(error_of("[zero]\nstage = 4\n"), "zero.stage");
  EXPECT_HAS(world_error_of("[zero]\nstage = 3\nreduce_dtype = \"bf16\"\n", 2),
             "zero.reduce_dtype = bf16: ZeRO stage 3 reduce-scatters gradients in f32 only");
}

// Tensor parallelism: the model must split over the group (heads, d_ffn, padded vocabulary), and
// with sequence parallelism the tokens of a micro-batch.
TEST_F(ConfigTest, TensorShapes) {
  EXPECT_NO_THROW(validate_for_world(load_config(write("[parallel]\ntensor = 2\nsequence_parallel = true\n"), {}), 2));
  EXPECT_HAS(world_error_of("[parallel]\ntensor = 5\n", 5),
             "tiny.toml: tensor parallelism splits the attention heads: model.n_heads = 12 must be divisible by "
             "parallel.tensor = 5");
  EXPECT_HAS(world_error_of("[model]\nn_heads = 256\nd_model = 256\n[parallel]\ntensor = 256\n", 256),
             "model.vocab_size = 50257, padded to 50304 (a multiple of 128), must be divisible by parallel.tensor = 256");
  EXPECT_HAS(world_error_of("[model]\nseq_len = 30\n[train]\nmicro_batch = 1\n[parallel]\ntensor = 4\n"
                            "sequence_parallel = true\n", 4),
             "parallel.sequence_parallel splits the train.micro_batch x model.seq_len = 30 tokens of a micro-batch "
             "into parallel.tensor = 4 shards: it must be divisible");
  EXPECT_NO_THROW(validate_for_world(load_config(write("[parallel]\ntensor = 2\ntensor_comm_chunks = 4\n"), {}), 2));
  EXPECT_HAS(world_error_of("[model]\nseq_len = 4\n[train]\nmicro_batch = 2\n[parallel]\ntensor = 2\n"
                            "tensor_comm_chunks = 9\n", 2),
             "parallel.tensor_comm_chunks = 9 exceeds the train.micro_batch x model.seq_len = 8 token rows");
  EXPECT_HAS(world_error_of("[parallel]\ntensor = 2\nsequence_parallel = true\ntensor_comm_chunks = 2\n", 2),
             "parallel.tensor_comm_chunks = 2 applies only without parallel.sequence_parallel");
  EXPECT_HAS(error_of("[parallel]\ntensor_comm_chunks = -1\n"), "tensor_comm_chunks");
}

// With experts in every block (moe.layer_freq = 1) there is no dense MLP: model.ffn_hidden_size sets
// nothing, so its tensor split is not checked and the model's description takes 0 (a checkpoint
// written with one width resumes with another); with a dense block left, it counts.
TEST_F(ConfigTest, FfnHiddenSizeCountsOnlyWithADenseBlock) {
  const std::string all_moe = "[model]\nffn_hidden_size = 1001\n[moe]\nexperts = 4\nlayer_freq = 1\n";
  const Config c = load_config(write(all_moe), {});
  EXPECT_EQ(dense_ffn_hidden_size(c), 0);
  EXPECT_NO_THROW(validate_for_world(load_config(write(all_moe + "[parallel]\ntensor = 2\n"), {}), 2));
  const Config mixed = load_config(write("[model]\nffn_hidden_size = 1001\n[moe]\nexperts = 4\nlayer_freq = 2\n"), {});
  EXPECT_EQ(dense_ffn_hidden_size(mixed), 1001);
}

TEST_F(ConfigTest, TensorCommChunksAutoIsTwoOnlyWithThePeerAllReduceAndAWholeBatch) {
  auto chunks = [&](const std::string& text, bool gpu) { return resolved_tensor_comm_chunks(load_config(write(text), {}), gpu); };
  const std::string odd = "[train]\nmicro_batch = 3\n";  // no batch split
  EXPECT_EQ(chunks(odd + "[parallel]\ntensor = 2\n", true), 2);
  EXPECT_EQ(chunks("[parallel]\ntensor = 2\ntensor_split_batch = false\n", true), 2);
  EXPECT_EQ(chunks("[train]\nmicro_batch = 4\n[parallel]\ntensor = 2\n", true), 1);  // split: no chunks
  EXPECT_EQ(chunks(odd + "[parallel]\ntensor = 2\n", false), 1);  // the CPU
  EXPECT_EQ(chunks(odd + "[parallel]\ntensor = 4\n", true), 1);
  EXPECT_EQ(chunks(odd + "[parallel]\ntensor = 2\npeer_all_reduce = false\n", true), 1);
  EXPECT_EQ(chunks(odd + "[parallel]\ntensor = 2\nsequence_parallel = true\n", true), 1);
  EXPECT_EQ(chunks("[parallel]\ntensor = 2\ntensor_comm_chunks = 3\n", false), 3);
}

TEST_F(ConfigTest, TensorSplitsTheBatchWhenItCan) {
  auto splits = [&](const std::string& text) { return tensor_splits_batch(load_config(write(text), {})); };
  EXPECT_TRUE(splits("[train]\nmicro_batch = 2\n[parallel]\ntensor = 2\n"));
  EXPECT_FALSE(splits("[train]\nmicro_batch = 3\n[parallel]\ntensor = 2\n"));  // odd
  EXPECT_FALSE(splits("[train]\nmicro_batch = 2\n[parallel]\ntensor = 1\n"));
  EXPECT_FALSE(splits("[train]\nmicro_batch = 2\n[parallel]\ntensor = 2\nsequence_parallel = true\n"));
  EXPECT_FALSE(splits("[train]\nmicro_batch = 2\n[parallel]\ntensor = 2\ntensor_split_batch = false\n"));
}

// Pipeline parallelism is built; shapes the schedule cannot run are one line naming the keys.
TEST_F(ConfigTest, PipelineShapes) {
  EXPECT_NO_THROW(validate_for_world(load_config(write("[parallel]\npipeline = 2\n"), {}), 2));
  EXPECT_NO_THROW(validate_for_world(
      load_config(write("[parallel]\npipeline = 2\nschedule = \"interleaved\"\nvirtual_stages = 2\n"
                        "[train]\nmicro_batch = 4\nglobal_batch = 16\n"),
                  {}),
      4));
  EXPECT_HAS(world_error_of("[parallel]\npipeline = 2\nschedule = \"interleaved\"\nvirtual_stages = 2\n"
                            "[train]\nmicro_batch = 8\nglobal_batch = 24\n",
                            2),
             "tiny.toml: parallel.schedule = interleaved needs the micro-batches per step (3 = train.global_batch / "
             "(train.micro_batch x data-parallel size)) to be a multiple of parallel.pipeline = 2");
  EXPECT_HAS(world_error_of("[model]\nn_layers = 3\n[parallel]\npipeline = 4\n", 4),
             "tiny.toml: model.n_layers = 3 is less than parallel.pipeline (4) x parallel.virtual_stages (1) = 4");
  EXPECT_HAS(world_error_of("[parallel]\nvirtual_stages = 2\n", 1),
             "tiny.toml: parallel.virtual_stages = 2 needs parallel.schedule = interleaved (it is 1f1b)");
}

TEST_F(ConfigTest, DataParallelIsAllowed) {
  // Data parallelism is built: any world size works when the batch arithmetic fits.
  const Config c = load_config(write("[train]\nmicro_batch = 4\nglobal_batch = 16\n"), {});
  EXPECT_NO_THROW(validate_for_world(c, 2));
  EXPECT_NO_THROW(validate_for_world(c, 4));
  EXPECT_EQ(resolve_batch(c, 2).accumulation, 2);
  EXPECT_HAS(world_error_of("[train]\nmicro_batch = 4\nglobal_batch = 16\n", 8), "train.global_batch = 16");
}

TEST_F(ConfigTest, StageLayers) {
  // Empty: the balanced partition. Otherwise blocks per virtual stage, in virtual-stage order.
  EXPECT_TRUE(parse_stage_layers(load_config(write(""), {})).empty());
  const std::string model = "[model]\nn_layers = 8\n";
  Config c = load_config(write(model + "[parallel]\npipeline = 2\nstage_layers = \"3,5\"\n"), {});
  EXPECT_EQ(parse_stage_layers(c), (std::vector<int>{3, 5}));
  c = load_config(write(model), {"parallel.pipeline=2", "parallel.schedule=interleaved", "parallel.virtual_stages=2",
                                 "parallel.stage_layers= 1, 3 ,2,2 "});
  EXPECT_EQ(parse_stage_layers(c), (std::vector<int>{1, 3, 2, 2}));
  c = load_config(write(model), {"parallel.stage_layers=8"});  // one stage: the whole model
  EXPECT_EQ(parse_stage_layers(c), (std::vector<int>{8}));
  EXPECT_NO_THROW(validate_for_world(c, 1));

  // One line naming the file, the key, the value and what is allowed.
  const std::string path = (dir_ / "tiny.toml").string();
  std::string e = error_of(model, {"parallel.pipeline=2", "parallel.stage_layers=3,4"});
  EXPECT_HAS(e, path + ": parallel.stage_layers = \"3,4\" sums to 7 (allowed: empty = balanced by cost, or "
                "parallel.pipeline x parallel.virtual_stages = 2 comma-separated integers >= 1, blocks per virtual "
                "stage, summing to model.n_layers = 8)");
  EXPECT_HAS(error_of(model, {"parallel.pipeline=2", "parallel.stage_layers=2,2,4"}), "\"2,2,4\" has 3 entries");
  EXPECT_HAS(error_of(model, {"parallel.pipeline=2", "parallel.stage_layers=0,8"}), "has a stage with 0 blocks");
  EXPECT_HAS(error_of(model, {"parallel.pipeline=2", "parallel.stage_layers=-1,9"}), "has a stage with -1 blocks");
  for (const char* bad : {"4;4", "4,,4", "4,", "4.0,4", "a,b", "4 4", "99999999999,4"})
    EXPECT_HAS(error_of(model, {"parallel.pipeline=2", std::string("parallel.stage_layers=") + bad}),
               "is not a list of integers");
  EXPECT_HAS(error_of(model + "[parallel]\nstage_layers = [4, 4]\n"), "parallel.stage_layers must be a string");
}

TEST_F(ConfigTest, ToTomlRoundTrips) {
  const Config c = load_config(
      write("[model]\nd_model = 96\nn_heads = 3\ndropout = 0.1\n[optimizer]\nlr = 0.00030000000000000003\n"
            "min_lr = 1e-30\n[log]\nmetrics_file = \"q\\\"uote\\\\ \\t.jsonl\"\n"),
      {"train.deterministic=true", "fp16.min_scale=1"});
  const std::string text = config_to_toml(c);
  const Config back = load_config(write(text, "resolved.toml"), {});
  EXPECT_EQ(config_to_toml(back), text);
  EXPECT_EQ(back.optimizer.lr, c.optimizer.lr);  // bitwise
  EXPECT_EQ(back.optimizer.min_lr, 1e-30);
  EXPECT_EQ(back.log.metrics_file, "q\"uote\\ \t.jsonl");
  EXPECT_HAS(text, "[model]\nvocab_size = 50257\n");
  EXPECT_HAS(text, "min_scale = 1.0\n");
}

TEST(ConfigDoc, DocsConfigMdIsUpToDate) {
  const std::string path = std::string(TRELLIS_SOURCE_DIR) + "/docs/config.md";
  const std::string generated = config_reference_markdown();
  if (std::getenv("TRELLIS_REGENERATE_DOCS") != nullptr) std::ofstream(path) << generated;
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  EXPECT_TRUE(s.str() == generated)
      << path << " is stale; regenerate it with: build/train_gpt --config-doc > docs/config.md "
      << "(or TRELLIS_REGENERATE_DOCS=1 build/config_test --gtest_filter=ConfigDoc.*)";
  EXPECT_HAS(generated, "| `n_heads` | integer | `12` | 1 to 2147483647 |");
}

TEST(Cli, ParsesOptions) {
  const char* argv[] = {"train_gpt", "run.toml", "--set", "train.steps=3", "--set=model.n_layers=2",
                        "--dump-grads", "g"};
  const CliArgs a = parse_cli(7, const_cast<char**>(argv));
  EXPECT_EQ(a.config_path, "run.toml");
  EXPECT_EQ(a.overrides, (std::vector<std::string>{"train.steps=3", "model.n_layers=2"}));
  EXPECT_EQ(a.dump_grads_dir, "g");
  EXPECT_FALSE(a.print_config_doc);
  EXPECT_FALSE(a.help);
  const char* doc[] = {"train_gpt", "--config-doc"};
  EXPECT_TRUE(parse_cli(2, const_cast<char**>(doc)).print_config_doc);
  const char* plan[] = {"train_gpt", "run.toml", "--plan", "--world=64"};
  const CliArgs p = parse_cli(4, const_cast<char**>(plan));
  EXPECT_TRUE(p.plan);
  EXPECT_EQ(p.plan_world, 64);
  const char* help[] = {"train_gpt", "--help"};
  EXPECT_TRUE(parse_cli(2, const_cast<char**>(help)).help);
  EXPECT_HAS(usage(), "--set section.key=value");
}

TEST(Cli, BadUsage) {
  auto error_of = [](std::vector<const char*> args) -> std::string {
    args.insert(args.begin(), "train_gpt");
    try {
      parse_cli(static_cast<int>(args.size()), const_cast<char**>(args.data()));
    } catch (const UserError& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_HAS(error_of({}), "missing the config file");
  EXPECT_HAS(error_of({"a.toml", "b.toml"}), "more than one config file: a.toml and b.toml");
  EXPECT_HAS(error_of({"a.toml", "--sett", "x"}), "unknown option --sett");
  EXPECT_HAS(error_of({"a.toml", "--set"}), "--set: missing value");
  EXPECT_HAS(error_of({"a.toml", "--set", "train.steps"}), "--set train.steps: expected section.key=value");
  EXPECT_HAS(error_of({"a.toml", "--config-doc"}), "--config-doc prints the configuration reference and takes no config file");
  EXPECT_HAS(error_of({"a.toml", "--world", "8"}), "--world goes with --plan");
  EXPECT_HAS(error_of({"a.toml", "--plan", "--world", "0"}), "--world 0: expected a number of ranks");
  EXPECT_HAS(error_of({"a.toml", "--plan", "--export-weights", "w"}), "--plan prints a plan and exits without training");
  EXPECT_HAS(error_of({"a.toml", "--layouts", "--dump-grads", "g"}), "--layouts prints a plan and exits without training");
  EXPECT_HAS(error_of({"a.toml", "--plan", "--layouts"}), "give one of them");
  EXPECT_HAS(error_of({"a.toml", "--device-memory", "80"}), "--device-memory goes with --plan or --layouts");
  EXPECT_HAS(error_of({"a.toml", "--layouts", "--device-memory", "0"}), "--device-memory 0: expected GiB of device memory");
  EXPECT_HAS(error_of({"a.toml", "--layouts", "--device-memory=80GB"}), "--device-memory 80GB: expected GiB");
}

TEST(Cli, LayoutsTakeTheWorldAndADeviceSize) {
  std::vector<const char*> args = {"train_gpt", "a.toml", "--layouts", "--world", "64", "--device-memory", "79.5"};
  const CliArgs a = parse_cli(static_cast<int>(args.size()), const_cast<char**>(args.data()));
  EXPECT_TRUE(a.layouts);
  EXPECT_FALSE(a.plan);
  EXPECT_EQ(a.plan_world, 64);
  EXPECT_DOUBLE_EQ(a.device_memory_gib, 79.5);
}

}  // namespace
}  // namespace trellis
