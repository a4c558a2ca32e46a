// JSON-lines metrics: doubles read back exactly, strings are escaped, objects nest, the file
// gets one flushed line per write and a bad path is a one-line UserError.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>

#include "core/error.h"
#include "launcher/metrics.h"

namespace trellis {
namespace {

TEST(Metrics, DoublesRoundTrip) {
  for (double v : {0.1, 1.0 / 3.0, 3.2, -2.5e-300, 6.02214076e23, std::numeric_limits<double>::denorm_min(),
                   std::numeric_limits<double>::max(), 0.0}) {
    const std::string text = json_number(v);
    EXPECT_EQ(std::strtod(text.c_str(), nullptr), v) << text;
  }
  EXPECT_EQ(json_number(std::nan("")), "null");
  EXPECT_EQ(json_number(std::numeric_limits<double>::infinity()), "null");
  EXPECT_EQ(JsonObject().add("x", 2.0).str(), "{\"x\":2}");
}

TEST(Metrics, ScalarsAndArrays) {
  JsonObject o;
  o.add("step", int64_t{7}).add("n", 3).add("ok", true).add("name", "gpt").add("s", std::string("x"));
  o.add("ids", std::vector<int64_t>{1, -2}).add("v", std::vector<double>{0.5, NAN}).add("e", std::vector<double>{});
  EXPECT_EQ(o.str(), "{\"step\":7,\"n\":3,\"ok\":true,\"name\":\"gpt\",\"s\":\"x\",\"ids\":[1,-2],\"v\":[0.5,null],\"e\":[]}");
}

TEST(Metrics, Escaping) {
  JsonObject o;
  o.add("a\"b", std::string_view("q\"\\/\n\r\t\b\f\x01 \xc3\xa9"));
  EXPECT_EQ(o.str(), "{\"a\\\"b\":\"q\\\"\\\\/\\n\\r\\t\\b\\f\\u0001 \xc3\xa9\"}");
}

TEST(Metrics, NestedObjects) {
  JsonObject inner;
  inner.add("peak", 1.5).add("current", int64_t{2});
  JsonObject outer;
  outer.add("step", 1).add("memory", inner).add("empty", JsonObject());
  EXPECT_EQ(outer.str(), "{\"step\":1,\"memory\":{\"peak\":1.5,\"current\":2},\"empty\":{}}");
  outer.add("self", outer);
  EXPECT_EQ(outer.str().rfind("\"self\":{\"step\":1,", 0), std::string::npos);
  EXPECT_NE(outer.str().find("\"self\":{\"step\":1,"), std::string::npos);
}

TEST(Metrics, FileWritesOneLinePerObject) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("trellis_metrics_test_" + std::to_string(::getpid()));
  const std::string path = (dir / "sub" / "m.jsonl").string();
  {
    MetricsFile f(path);
    ASSERT_TRUE(f.enabled());
    f.write(JsonObject().add("step", 1));
    f.write(JsonObject().add("step", 2).add("loss", 0.25));
    std::ifstream in(path);  // flushed: readable before the file is closed
    std::string l1, l2;
    std::getline(in, l1);
    std::getline(in, l2);
    EXPECT_EQ(l1, "{\"step\":1}");
    EXPECT_EQ(l2, "{\"step\":2,\"loss\":0.25}");
  }
  fs::remove_all(dir);

  MetricsFile off("");
  EXPECT_FALSE(off.enabled());
  off.write(JsonObject().add("x", 1));

  try {
    MetricsFile bad("/proc/trellis_no_such_dir/m.jsonl");
    FAIL();
  } catch (const UserError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("log.metrics_file = /proc/trellis_no_such_dir/m.jsonl: cannot open for writing: ", 0), 0u)
        << e.what();
  }
}

}  // namespace
}  // namespace trellis
