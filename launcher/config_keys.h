// The key table behind train_config.cpp: every config key with its type, field, doc and allowed
// values. One table drives parsing, --set overrides, validation, config_to_toml and docs/config.md.
#pragma once
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "launcher/train_config.h"

namespace trellis::config_keys {

enum class KeyType { Int, Float, Bool, String };

struct Section {
  const char* name;
  const char* doc;
};

struct KeySpec {
  const char* section;
  const char* name;
  KeyType type;
  void* (*field)(Config&);            // the member this key reads and writes
  const char* doc;                    // one line, for docs/config.md
  std::vector<std::string> choices;   // String keys: the allowed values (empty = any)
  double min = -std::numeric_limits<double>::infinity();
  bool min_exclusive = false;
  double max = std::numeric_limits<double>::infinity();
  bool max_exclusive = false;

  std::string full_name() const { return std::string(section) + "." + name; }
  int64_t& int_ref(Config& c) const { return *static_cast<int64_t*>(field(c)); }
  double& float_ref(Config& c) const { return *static_cast<double*>(field(c)); }
  bool& bool_ref(Config& c) const { return *static_cast<bool*>(field(c)); }
  std::string& string_ref(Config& c) const { return *static_cast<std::string*>(field(c)); }
};

std::span<const Section> sections();
std::span<const KeySpec> keys();
const KeySpec* find_key(std::string_view section, std::string_view name);
bool is_section(std::string_view section);

// "integer", "float", "boolean", "string".
const char* type_name(KeyType t);
// What the key allows, for messages and docs: "auto, fp32, bf16, fp16", ">= 1", "in [0, 1)", "".
std::string allowed_text(const KeySpec& k);
// The key's current value in `c`, written as a TOML value ("fp32", 0.0006, true, 12).
std::string toml_value(const KeySpec& k, const Config& c);
// "vocab_size, seq_len, ..." for one section; "model, parallel, ..." for all sections.
std::string key_list(std::string_view section);
std::string section_list();
// Throws UserError("<where>: <key> = <value> is not allowed (allowed: ...)") when the key's
// current value in `c` is outside its choices or range.
void check_allowed(const KeySpec& k, const Config& c, const std::string& where);

}  // namespace trellis::config_keys
