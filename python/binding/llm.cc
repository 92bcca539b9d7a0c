#include "llm.h"

#include <pybind11/stl.h>

#include <fmt/format.h>

#include "engine_config.h"
#include "errors.h"
#include "server/chat_request.h"
#include "tokenizer/tokenizer.h"

namespace drift::python {

namespace {

std::shared_ptr<Engine> create_engine(const std::string& model, const std::string& device, const py::kwargs& kwargs) {
  const EngineConfig config = engine_config_from_kwargs(model, device, kwargs);
  py::gil_scoped_release nogil;
  Expected<std::unique_ptr<Engine>> engine = Engine::create(config);
  if (!engine.ok()) throw DriftException(engine.status());
  return std::move(engine).value();
}

// In a batch, the message says which prompt it is about.
Status in_batch(const Status& status, size_t index, size_t num_prompts) {
  if (num_prompts == 1) return status;
  return Status(status.code(), fmt::format("prompts[{}]: {}", index, status.message()));
}

// Taken under the GIL: another Python thread may change `params` while this one waits without it.
Request base_request(const SamplingOptions& params, bool add_special_tokens) {
  params.validate();
  Request r = params.to_request();
  r.add_special_tokens = add_special_tokens;
  return r;
}

bool wants_logprobs(const Request& r) { return r.sampling.top_logprobs >= 0; }

std::optional<std::string> prompt_text(const Prompt& prompt) {
  if (const auto* text = std::get_if<std::string>(&prompt)) return *text;
  return std::nullopt;
}

server::Json parse_json(const std::string& text, const char* what) {
  server::Json json = server::Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) throw py::value_error(std::string(what) + " is not valid JSON");
  return json;
}

// The server's message points at /v1/completions; from Python the way without a template is generate().
Status chat_template_error(const Status& status, const std::string& model_dir) {
  if (status.code() != StatusCode::kNotFound) return status;
  return not_found(fmt::format("{} has no chat template (no chat_template in tokenizer_config.json and no "
                               "chat_template.jinja): use generate() with a prompt instead", model_dir));
}

}  // namespace

PyEngine::PyEngine(const std::string& model, const std::string& device, const py::kwargs& kwargs)
    : engine_(create_engine(model, device, kwargs)),
      chat_template_(server::ChatTemplate::load(engine_->config().tokenizer_folder())) {}

PyEngine::~PyEngine() = default;

Expected<std::string> PyEngine::submit(const Prompt& prompt, Request request, OutputCallback on_output) {
  if (const auto* text = std::get_if<std::string>(&prompt)) {
    request.prompt = *text;
  } else {
    request.prompt_tokens = std::get<std::vector<int32_t>>(prompt);
  }
  return engine_->submit(std::move(request), std::move(on_output));
}

py::list PyEngine::generate(const std::vector<Prompt>& prompts, const SamplingOptions& params, bool add_special_tokens) {
  const Request base = base_request(params, add_special_tokens);
  auto queue = std::make_shared<OutputQueue>();
  std::vector<std::string> ids;
  {
    py::gil_scoped_release nogil;  // the engine tokenizes text prompts in submit()
    for (size_t i = 0; i < prompts.size(); ++i) {
      Expected<std::string> id = submit(prompts[i], base, queue_callback(queue, i));
      if (!id.ok()) {
        for (const std::string& submitted : ids) engine_->cancel(submitted);
        throw DriftException(in_batch(id.status(), i, prompts.size()));
      }
      ids.push_back(std::move(*id));
    }
  }
  std::vector<Gathered> gathered(prompts.size());
  size_t num_done = 0;
  while (num_done < prompts.size()) {
    for (const Event& e : wait_for_events(*engine_, *queue, ids)) {
      gathered[e.first].add(e.second);
      num_done += e.second.finished ? 1 : 0;
    }
  }
  py::list outputs;
  for (size_t i = 0; i < prompts.size(); ++i) {
    if (gathered[i].failed()) throw DriftException(in_batch(gathered[i].last.error, i, prompts.size()));
    outputs.append(to_request_output(gathered[i], prompt_text(prompts[i]), wants_logprobs(base)));
  }
  return outputs;
}

std::unique_ptr<RequestStream> PyEngine::stream(const Prompt& prompt, const SamplingOptions& params,
                                                bool add_special_tokens) {
  const Request base = base_request(params, add_special_tokens);
  auto queue = std::make_shared<OutputQueue>();
  Expected<std::string> id = [&] {
    py::gil_scoped_release nogil;
    return submit(prompt, base, queue_callback(queue, 0));
  }();
  if (!id.ok()) throw DriftException(id.status());
  return std::make_unique<RequestStream>(engine_, queue, std::move(*id), prompt_text(prompt), wants_logprobs(base));
}

std::string PyEngine::render_chat(const std::string& messages_json, const std::string& tools_json,
                                  bool add_generation_prompt, const std::string& template_kwargs_json) const {
  // The same checks as the server's chat endpoint: known roles, content as a string or text parts.
  auto messages = server::normalize_messages(parse_json(messages_json, "messages"));
  if (!messages.ok()) throw py::value_error(messages.error().message);
  if (!chat_template_.ok()) throw DriftException(chat_template_error(chat_template_.status(), engine_->config().model_dir));
  auto rendered = chat_template_->render(*messages, parse_json(tools_json, "tools"), add_generation_prompt,
                                         parse_json(template_kwargs_json, "chat_template_kwargs"));
  if (!rendered.ok())
    throw DriftException(Status(rendered.status().code(), "the chat template failed: " + rendered.status().message()));
  return *rendered;
}

std::vector<int32_t> PyEngine::encode(const std::string& text, bool add_special_tokens) const {
  return engine_->tokenizer().encode(text, add_special_tokens);
}

std::string PyEngine::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  return engine_->tokenizer().decode(ids, skip_special_tokens);
}

py::dict PyEngine::metrics() const {
  const EngineMetrics m = engine_->metrics();
  py::dict d;
  d["num_requests_running"] = m.num_requests_running;
  d["num_requests_waiting"] = m.num_requests_waiting;
  d["kv_blocks_total"] = m.kv_blocks_total;
  d["kv_blocks_used"] = m.kv_blocks_used;
  d["kv_blocks_used_peak"] = m.kv_blocks_used_peak;
  py::list groups;  // one pool per KV layer group (GPT-OSS: a window-sized "sliding" pool and a "full" one)
  for (const KvGroupMetrics& g : m.kv_groups) {
    py::dict group;
    group["name"] = g.name;
    group["sliding_window"] = g.sliding_window;
    group["bytes_per_block"] = g.bytes_per_block;
    group["blocks_total"] = g.blocks_total;
    group["blocks_used"] = g.blocks_used;
    groups.append(group);
  }
  d["kv_groups"] = groups;
  d["prefix_cache_queries"] = m.prefix_cache_queries;
  d["prefix_cache_hits"] = m.prefix_cache_hits;
  d["prompt_tokens_total"] = m.prompt_tokens_total;
  d["generation_tokens_total"] = m.generation_tokens_total;
  d["num_preemptions_total"] = m.num_preemptions_total;
  d["requests_finished_total"] = m.requests_finished_total;
  d["steps_total"] = m.steps_total;
  d["overlapped_steps_total"] = m.overlapped_steps_total;
  d["spec_decode_num_drafts"] = m.spec_decode_num_drafts;
  d["spec_decode_num_accepted_tokens"] = m.spec_decode_num_accepted_tokens;
  d["spec_decode_num_partial_verifies"] = m.spec_decode_num_partial_verifies;
  d["spec_decode_num_full_verifies"] = m.spec_decode_num_full_verifies;
  d["spec_decode_num_recomputed_tokens"] = m.spec_decode_num_recomputed_tokens;
  py::dict phases;
  phases["plan"] = m.step_seconds.plan;
  phases["launch"] = m.step_seconds.launch;
  phases["device"] = m.step_seconds.device;
  phases["apply"] = m.step_seconds.apply;
  d["step_phase_seconds"] = phases;
  return d;
}

void PyEngine::shutdown() {
  py::gil_scoped_release nogil;
  engine_->shutdown();
}

void bind_engine(py::module_& m) {
  py::class_<PyEngine>(m, "Engine", "The C++ engine behind drift.LLM (use that).")
      .def(py::init([](const std::string& model, const std::string& device, const py::kwargs& kwargs) {
             return std::make_unique<PyEngine>(model, device, kwargs);
           }),
           py::arg("model"), py::arg("device") = "cpu")
      .def("generate", &PyEngine::generate, py::arg("prompts"), py::arg("params"), py::arg("add_special_tokens"))
      .def("stream", &PyEngine::stream, py::arg("prompt"), py::arg("params"), py::arg("add_special_tokens"))
      .def("render_chat", &PyEngine::render_chat, py::arg("messages_json"), py::arg("tools_json"),
           py::arg("add_generation_prompt"), py::arg("chat_template_kwargs_json"))
      .def("encode", &PyEngine::encode, py::arg("text"), py::arg("add_special_tokens"))
      .def("decode", &PyEngine::decode, py::arg("token_ids"), py::arg("skip_special_tokens"))
      .def("metrics", &PyEngine::metrics)
      .def_property_readonly("max_model_len", &PyEngine::max_model_len)
      .def_property_readonly("model_name", &PyEngine::model_name)
      .def("shutdown", &PyEngine::shutdown);
}

}  // namespace drift::python
