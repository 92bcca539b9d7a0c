#include "engine_config.h"

#include <pybind11/stl.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <string_view>
#include <utility>
#include <vector>

namespace drift::python {

namespace {

template <class Config>
using Setter = std::function<void(Config&, py::handle value, const std::string& name)>;
template <class Config>
using Fields = std::vector<std::pair<std::string_view, Setter<Config>>>;

std::string type_name(py::handle v) { return py::str(v.get_type().attr("__name__")); }

[[noreturn]] void wrong_type(const std::string& name, const char* expected, py::handle v) {
  throw py::type_error(name + " must be " + expected + ", got " + type_name(v));
}

// Python's bool is an int: refused where a count is meant, so `max_num_seqs=True` is not 1.
template <class T>
T cast_value(py::handle v, const std::string& name) {
  if constexpr (std::is_same_v<T, bool>) {
    if (!py::isinstance<py::bool_>(v)) wrong_type(name, "a bool", v);
    return v.cast<bool>();
  } else if constexpr (std::is_integral_v<T>) {
    if (!py::isinstance<py::int_>(v) || py::isinstance<py::bool_>(v)) wrong_type(name, "an int", v);
    const std::string text = py::str(v);
    long long x = 0;
    try {
      x = v.cast<long long>();
    } catch (const py::cast_error&) {
      throw py::value_error(name + " is out of range: " + text);
    }
    if (x < std::numeric_limits<T>::min() || x > std::numeric_limits<T>::max())
      throw py::value_error(name + " is out of range: " + text);
    return T(x);
  } else if constexpr (std::is_floating_point_v<T>) {
    if (!(py::isinstance<py::float_>(v) || py::isinstance<py::int_>(v)) || py::isinstance<py::bool_>(v))
      wrong_type(name, "a number", v);
    return v.cast<T>();
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (!py::isinstance<py::str>(v)) wrong_type(name, "a str", v);
    return v.cast<std::string>();
  } else {
    if (py::isinstance<py::str>(v)) wrong_type(name, "a list of str", v);
    try {
      return v.cast<T>();
    } catch (const py::cast_error&) {
      wrong_type(name, "a list of str", v);
    }
  }
}

template <class Config, class T>
std::pair<std::string_view, Setter<Config>> field(std::string_view name, T Config::*member) {
  return {name, [member](Config& c, py::handle v, const std::string& n) { c.*member = cast_value<T>(v, n); }};
}

// A choice spelled as the drift command spells it.
template <class Config, class E>
std::pair<std::string_view, Setter<Config>> choice(std::string_view name, E Config::*member,
                                                   std::vector<std::pair<std::string, E>> words) {
  return {name, [member, words](Config& c, py::handle v, const std::string& n) {
            const std::string word = cast_value<std::string>(v, n);
            std::string known;
            for (const auto& [w, e] : words) {
              if (w == word) {
                c.*member = e;
                return;
              }
              known += (known.empty() ? "" : ", ") + w;
            }
            throw py::value_error(n + " '" + word + "' is not one of " + known);
          }};
}

template <class Config>
void apply(Config& config, const py::dict& values, const Fields<Config>& fields, const std::string& prefix,
           const char* owner) {
  for (const auto& [key, value] : values) {
    const std::string name = py::str(key);
    auto it = std::find_if(fields.begin(), fields.end(), [&](const auto& f) { return f.first == name; });
    if (it == fields.end()) {
      std::string known;
      for (const auto& f : fields) known += (known.empty() ? "" : ", ") + std::string(f.first);
      throw py::type_error(std::string(owner) + " got an unexpected keyword argument '" + prefix + name +
                           "' (it takes " + known + ")");
    }
    it->second(config, value, prefix + name);
  }
}

const Fields<SpeculativeConfig>& speculative_fields() {
  static const Fields<SpeculativeConfig> fields = {
      field("method", &SpeculativeConfig::method),
      field("num_tokens", &SpeculativeConfig::num_tokens),
      field("ngram_min", &SpeculativeConfig::ngram_min),
      field("ngram_max", &SpeculativeConfig::ngram_max),
      field("draft_dir", &SpeculativeConfig::draft_dir),
      field("depth", &SpeculativeConfig::depth),
      field("top_k", &SpeculativeConfig::top_k),
  };
  return fields;
}

void set_speculative(EngineConfig& c, py::handle v, const std::string& name) {
  if (!py::isinstance<py::dict>(v)) wrong_type(name, "a dict", v);
  apply(c.speculative, py::reinterpret_borrow<py::dict>(v), speculative_fields(), name + ".", "speculative");
}

const Fields<SpecPvConfig>& specpv_fields() {
  static const Fields<SpecPvConfig> fields = {
      field("min_context", &SpecPvConfig::min_context), field("refresh", &SpecPvConfig::refresh),
      field("sink", &SpecPvConfig::sink),               field("retrieval", &SpecPvConfig::retrieval),
      field("window", &SpecPvConfig::window),           field("buffer", &SpecPvConfig::buffer),
      field("score", &SpecPvConfig::score),
  };
  return fields;
}

void set_specpv(EngineConfig& c, py::handle v, const std::string& name) {
  if (!py::isinstance<py::dict>(v)) wrong_type(name, "a dict", v);
  apply(c.specpv, py::reinterpret_borrow<py::dict>(v), specpv_fields(), name + ".", "specpv");
}

// model_dir is LLM's first argument and load_progress a C++ callback: neither is a keyword.
const Fields<EngineConfig>& engine_fields() {
  static const Fields<EngineConfig> fields = {
      field("tokenizer", &EngineConfig::tokenizer_dir),
      field("random_weights", &EngineConfig::random_weights),
      field("extra_weight_files", &EngineConfig::extra_weight_files),
      field("retrofit_file", &EngineConfig::retrofit_file),
      field("tensor_parallel_size", &EngineConfig::tensor_parallel),
      field("enable_expert_parallel", &EngineConfig::expert_parallel),
      field("block_size", &EngineConfig::block_size),
      field("kv_cache_bytes", &EngineConfig::kv_cache_bytes),
      field("kv_cache_dtype", &EngineConfig::kv_cache_dtype),
      field("kv_cache_memory_fraction", &EngineConfig::kv_cache_memory_fraction),
      field("max_model_len", &EngineConfig::max_model_len),
      field("max_num_seqs", &EngineConfig::max_num_seqs),
      field("max_num_batched_tokens", &EngineConfig::max_num_batched_tokens),
      field("max_num_partial_prefills", &EngineConfig::max_num_partial_prefills),
      field("long_prefill_token_threshold", &EngineConfig::long_prefill_token_threshold),
      field("enable_chunked_prefill", &EngineConfig::enable_chunked_prefill),
      field("enable_prefix_cache", &EngineConfig::enable_prefix_cache),
      choice("admission", &EngineConfig::admission,
             {{"guaranteed", AdmissionPolicy::kGuaranteed}, {"optimistic", AdmissionPolicy::kOptimistic}}),
      choice("policy", &EngineConfig::policy,
             {{"fcfs", SchedulingPolicy::kFcfs}, {"small-first", SchedulingPolicy::kSmallFirst}}),
      field("max_waiting_requests", &EngineConfig::max_waiting_requests),
      field("enforce_eager", &EngineConfig::enforce_eager),
      field("overlap_scheduling", &EngineConfig::overlap_scheduling),
      field("mask_threads", &EngineConfig::mask_threads),
      field("slo_ttft_ms", &EngineConfig::slo_ttft_ms),
      field("slo_tpot_ms", &EngineConfig::slo_tpot_ms),
      field("slo_shed", &EngineConfig::slo_shed),
      {"speculative", &set_speculative},
      {"specpv", &set_specpv},
  };
  return fields;
}

}  // namespace

EngineConfig engine_config_from_kwargs(const std::string& model, const std::string& device, const py::kwargs& kwargs) {
  EngineConfig config;
  config.model_dir = model;
  config.device = device;
  apply(config, kwargs, engine_fields(), "", "LLM()");
  return config;
}

}  // namespace drift::python
