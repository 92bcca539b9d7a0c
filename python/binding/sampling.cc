#include "sampling.h"

#include <pybind11/stl.h>

#include <charconv>
#include <cstdlib>
#include <optional>

namespace drift::python {

namespace {

// vLLM takes `stop` as one string or a list of them.
std::vector<std::string> stop_list(const py::object& stop) {
  if (stop.is_none()) return {};
  if (py::isinstance<py::str>(stop)) return {stop.cast<std::string>()};
  try {
    return stop.cast<std::vector<std::string>>();
  } catch (const py::cast_error&) {
    throw py::type_error("stop must be a str or a list of str, got " + std::string(py::str(stop.get_type().attr("__name__"))));
  }
}

SamplingOptions make_options(float temperature, float top_p, int32_t top_k, float min_p, int32_t max_tokens,
                             const py::object& stop, std::optional<std::vector<int32_t>> stop_token_ids,
                             std::optional<uint64_t> seed, std::optional<int32_t> logprobs, bool ignore_eos,
                             float repetition_penalty, float presence_penalty, float frequency_penalty,
                             bool exact_verification) {
  SamplingOptions o;
  o.sampling.temperature = temperature;
  o.sampling.top_p = top_p;
  o.sampling.top_k = top_k;
  o.sampling.min_p = min_p;
  o.sampling.repetition_penalty = repetition_penalty;
  o.sampling.presence_penalty = presence_penalty;
  o.sampling.frequency_penalty = frequency_penalty;
  o.sampling.seed = seed;
  o.sampling.top_logprobs = logprobs.value_or(-1);
  o.max_tokens = max_tokens;
  o.stop = stop_list(stop);
  o.stop_token_ids = stop_token_ids.value_or(std::vector<int32_t>{});
  o.ignore_eos = ignore_eos;
  o.exact_verification = exact_verification;
  o.validate();
  return o;
}

// The double a Python user wrote: 0.7, not the 0.699999988 a float widens to.
double as_written(float x) {
  char text[32];
  *std::to_chars(text, text + sizeof(text) - 1, x).ptr = '\0';
  return std::strtod(text, nullptr);
}

template <class T>
void def_sampling_field(py::class_<SamplingOptions>& c, const char* name, T SamplingParams::*field) {
  c.def_property(
      name,
      [field](const SamplingOptions& o) {
        if constexpr (std::is_same_v<T, float>) {
          return as_written(o.sampling.*field);
        } else {
          return o.sampling.*field;
        }
      },
      [field](SamplingOptions& o, T value) { o.sampling.*field = value; });
}

std::string repr(const SamplingOptions& o) {
  const py::object none = py::none();
  const py::object seed = o.sampling.seed ? py::cast(*o.sampling.seed) : none;
  const py::object logprobs = o.wants_logprobs() ? py::cast(o.sampling.top_logprobs) : none;
  return py::str("SamplingParams(temperature={}, top_p={}, top_k={}, min_p={}, max_tokens={}, stop={!r}, "
                 "stop_token_ids={}, seed={}, logprobs={}, ignore_eos={}, repetition_penalty={}, "
                 "presence_penalty={}, frequency_penalty={}, exact_verification={})")
      .format(as_written(o.sampling.temperature), as_written(o.sampling.top_p), o.sampling.top_k,
              as_written(o.sampling.min_p), o.max_tokens, o.stop, o.stop_token_ids, seed, logprobs, o.ignore_eos,
              as_written(o.sampling.repetition_penalty), as_written(o.sampling.presence_penalty),
              as_written(o.sampling.frequency_penalty), o.exact_verification);
}

}  // namespace

void SamplingOptions::validate() const {
  if (Status s = sampling.validate(); !s.ok()) throw py::value_error(s.message());
  if (max_tokens < 1) throw py::value_error("max_tokens must be at least 1, got " + std::to_string(max_tokens));
}

Request SamplingOptions::to_request() const {
  Request r;
  r.sampling = sampling;
  r.max_tokens = max_tokens;
  r.stop = stop;
  r.stop_token_ids = stop_token_ids;
  r.ignore_eos = ignore_eos;
  r.exact_verification = exact_verification;
  return r;
}

void bind_sampling_params(py::module_& m) {
  py::class_<SamplingOptions> c(m, "SamplingParams",
                                "How one request samples and when it stops (vLLM's names). temperature 0 is greedy; "
                                "logprobs=n returns the chosen token's logprob and the n most likely.");
  c.def(py::init(&make_options), py::kw_only(), py::arg("temperature") = 1.0f, py::arg("top_p") = 1.0f,
        py::arg("top_k") = 0, py::arg("min_p") = 0.0f, py::arg("max_tokens") = 16, py::arg("stop") = py::none(),
        py::arg("stop_token_ids") = py::none(), py::arg("seed") = py::none(), py::arg("logprobs") = py::none(),
        py::arg("ignore_eos") = false, py::arg("repetition_penalty") = 1.0f, py::arg("presence_penalty") = 0.0f,
        py::arg("frequency_penalty") = 0.0f, py::arg("exact_verification") = false);
  def_sampling_field(c, "temperature", &SamplingParams::temperature);
  def_sampling_field(c, "top_p", &SamplingParams::top_p);
  def_sampling_field(c, "top_k", &SamplingParams::top_k);
  def_sampling_field(c, "min_p", &SamplingParams::min_p);
  def_sampling_field(c, "repetition_penalty", &SamplingParams::repetition_penalty);
  def_sampling_field(c, "presence_penalty", &SamplingParams::presence_penalty);
  def_sampling_field(c, "frequency_penalty", &SamplingParams::frequency_penalty);
  def_sampling_field(c, "seed", &SamplingParams::seed);
  c.def_property(
      "logprobs", [](const SamplingOptions& o) { return o.wants_logprobs() ? std::optional(o.sampling.top_logprobs) : std::nullopt; },
      [](SamplingOptions& o, std::optional<int32_t> n) { o.sampling.top_logprobs = n.value_or(-1); });
  c.def_property(
      "stop", [](const SamplingOptions& o) { return o.stop; },
      [](SamplingOptions& o, const py::object& stop) { o.stop = stop_list(stop); });
  c.def_readwrite("max_tokens", &SamplingOptions::max_tokens);
  c.def_readwrite("stop_token_ids", &SamplingOptions::stop_token_ids);
  c.def_readwrite("ignore_eos", &SamplingOptions::ignore_eos);
  // Drift's: with SpecPV on, this request's verify steps read its whole KV (greedy = non-speculative output).
  c.def_readwrite("exact_verification", &SamplingOptions::exact_verification);
  c.def("__repr__", &repr);
}

}  // namespace drift::python
