#include "server/prometheus.h"

#include <fmt/format.h>

#include <utility>
#include <vector>

namespace drift::server {

namespace {

// Label values escape backslash, quote and newline.
std::string escape_label(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

class Exposition {
 public:
  explicit Exposition(const std::string& model_name) : labels_(fmt::format("model_name=\"{}\"", escape_label(model_name))) {}

  void gauge(const char* name, const char* help, double value) {
    family(name, help, "gauge");
    sample(name, labels_, value);
  }
  void counter(const char* name, const char* help, double value) {
    family(name, help, "counter");
    sample(name, labels_, value);
  }
  // One counter family with a sample per value of `label`.
  void labelled_counter(const char* name, const char* help, const char* label,
                        std::initializer_list<std::pair<const char*, double>> values) {
    family(name, help, "counter");
    for (const auto& [label_value, v] : values) sample(name, fmt::format("{},{}=\"{}\"", labels_, label, label_value), v);
  }
  // One gauge family with a sample per value of `label`.
  void labelled_gauge(const char* name, const char* help, const char* label,
                      const std::vector<std::pair<std::string, double>>& values) {
    family(name, help, "gauge");
    for (const auto& [label_value, v] : values)
      sample(name, fmt::format("{},{}=\"{}\"", labels_, label, escape_label(label_value)), v);
  }
  // One sample per index of `values`, labelled position="0", "1", ...
  void position_counter(const char* name, const char* help, const std::vector<int64_t>& values) {
    family(name, help, "counter");
    for (size_t i = 0; i < values.size(); ++i) sample(name, fmt::format("{},position=\"{}\"", labels_, i), double(values[i]));
  }
  // Prometheus buckets are cumulative; EngineMetrics keeps per-bucket counts.
  void histogram(const char* name, const char* help, const Histogram& h) {
    family(name, help, "histogram");
    uint64_t cumulative = 0;
    for (size_t i = 0; i < h.counts.size(); ++i) {
      cumulative += h.counts[i];
      const std::string le = i < h.bounds.size() ? fmt::format("{}", h.bounds[i]) : "+Inf";
      sample(fmt::format("{}_bucket", name).c_str(), fmt::format("{},le=\"{}\"", labels_, le), double(cumulative));
    }
    sample(fmt::format("{}_sum", name).c_str(), labels_, h.sum);
    sample(fmt::format("{}_count", name).c_str(), labels_, double(h.count));
  }

  std::string take() { return std::move(text_); }

 private:
  void family(const char* name, const char* help, const char* type) {
    text_ += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  }
  void sample(const char* name, const std::string& labels, double value) {
    text_ += fmt::format("{}{{{}}} {}\n", name, labels, value);
  }

  std::string labels_;
  std::string text_;
};

// Bytes held over bytes allocated: a sliding-window group's blocks may be as large as a full group's
// while its pool is far smaller, so a block count would misstate how full the cache is.
double kv_usage(const EngineMetrics& m) {
  double used = 0, total = 0;
  for (const KvGroupMetrics& g : m.kv_groups) {
    used += double(g.blocks_used) * double(g.bytes_per_block);
    total += double(g.blocks_total) * double(g.bytes_per_block);
  }
  return total > 0 ? used / total : 0.0;
}

}  // namespace

std::string prometheus_text(const EngineMetrics& m, const FinishCounts& finished, const std::string& model_name) {
  Exposition e(model_name);
  e.gauge("drift:num_requests_running", "Number of requests in model execution batches.", double(m.num_requests_running));
  e.gauge("drift:num_requests_waiting", "Number of requests waiting to be processed.", double(m.num_requests_waiting));
  e.gauge("drift:kv_cache_usage_perc", "KV-cache usage in bytes, over every layer group. 1 means 100 percent usage.",
          kv_usage(m));
  e.gauge("drift:kv_blocks_used", "KV-cache blocks held by requests, summed over the layer groups.", double(m.kv_blocks_used));
  e.gauge("drift:kv_blocks_used_peak", "The most KV-cache blocks held after any step so far.", double(m.kv_blocks_used_peak));
  e.gauge("drift:kv_blocks_total", "KV-cache blocks in the pools, summed over the layer groups.", double(m.kv_blocks_total));
  std::vector<std::pair<std::string, double>> used, total;
  for (const KvGroupMetrics& g : m.kv_groups) {
    used.emplace_back(g.name, double(g.blocks_used));
    total.emplace_back(g.name, double(g.blocks_total));
  }
  e.labelled_gauge("drift:kv_group_blocks_used", "KV-cache blocks held by requests, by layer group.", "kv_group", used);
  e.labelled_gauge("drift:kv_group_blocks_total", "KV-cache blocks in the layer group's pool.", "kv_group", total);
  e.counter("drift:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens.",
            double(m.prefix_cache_queries));
  e.counter("drift:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.",
            double(m.prefix_cache_hits));
  e.counter("drift:prefix_cache_evictions_total", "Prefix cache blocks evicted.", double(m.prefix_cache_evictions));
  e.counter("drift:prompt_tokens_total", "Number of prefill tokens processed.", double(m.prompt_tokens_total));
  e.counter("drift:generation_tokens_total", "Number of generation tokens processed.", double(m.generation_tokens_total));
  e.counter("drift:num_preemptions_total", "Cumulative number of preemptions from the engine.", double(m.num_preemptions_total));
  e.counter("drift:overlapped_steps_total", "Steps planned and launched while the step before them ran.",
            double(m.overlapped_steps_total));
  e.counter("drift:num_rejections_total", "Requests the engine refused after accepting them.", double(m.num_rejections_total));
  e.counter("drift:num_requests_shed_total", "Requests refused by SLO admission control as unable to meet the TTFT target.",
            double(m.num_requests_shed_total));
  e.labelled_counter("drift:request_success_total", "Count of finished requests by finish reason.", "finished_reason",
                     {{"stop", double(finished.stop)},
                      {"length", double(finished.length)},
                      {"abort", double(finished.abort)},
                      {"error", double(finished.error)}});
  e.histogram("drift:time_to_first_token_seconds", "Histogram of time to first token in seconds.", m.time_to_first_token_s);
  // vLLM named the gap between consecutive tokens time_per_output_token before renaming it
  // inter_token_latency; both names are served so dashboards of either generation work.
  e.histogram("drift:time_per_output_token_seconds", "Histogram of time per output token (inter-token latency) in seconds.",
              m.time_per_output_token_s);
  e.histogram("drift:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", m.time_per_output_token_s);
  e.histogram("drift:e2e_request_latency_seconds", "Histogram of end to end request latency in seconds.", m.e2e_request_latency_s);
  e.histogram("drift:iteration_tokens_total", "Histogram of number of tokens per engine step.", m.tokens_per_step);
  e.counter("drift:spec_decode_num_drafts_total", "Verify steps that carried drafted tokens.",
            double(m.spec_decode_num_drafts));
  e.counter("drift:spec_decode_num_draft_tokens_total", "Drafted tokens scored by the model.",
            double(m.spec_decode_num_draft_tokens));
  e.counter("drift:spec_decode_num_accepted_tokens_total", "Drafted tokens accepted.",
            double(m.spec_decode_num_accepted_tokens));
  e.position_counter("drift:spec_decode_num_accepted_tokens_per_pos_total", "Drafted tokens accepted, by position in the draft.",
                     m.spec_decode_num_accepted_tokens_per_pos);
  e.counter("drift:spec_decode_num_partial_verifies_total", "SpecPV verify steps that read part of the KV cache.",
            double(m.spec_decode_num_partial_verifies));
  e.counter("drift:spec_decode_num_full_verifies_total", "SpecPV verify steps that read all of the KV cache (refreshes).",
            double(m.spec_decode_num_full_verifies));
  e.counter("drift:spec_decode_num_recomputed_tokens_total",
            "SpecPV: tokens whose KV a full verification computed again after a partial one.",
            double(m.spec_decode_num_recomputed_tokens));
  const StepPhaseSeconds& p = m.step_seconds;
  e.labelled_counter("drift:step_phase_seconds_total",
                     "Wall time of engine steps by phase: plan, launch, device, apply (plan + launch + apply is host "
                     "work on a GPU).",
                     "phase", {{"plan", p.plan}, {"launch", p.launch}, {"device", p.device}, {"apply", p.apply}});
  return e.take();
}

}  // namespace drift::server
