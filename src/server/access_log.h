// One access-log line per API call, written when the call ends (the stream closed, the response sent, or
// the request refused): what a collector needs to join it with the client's view of the same call.
// Lines go to the spdlog logger "access" at info level; in LogFormat::kJson the message is one JSON
// object (JsonLogFormatter embeds it as "request"), otherwise key=value pairs.
#pragma once

#include <string>
#include <vector>

#include "drift/request.h"

namespace drift::server {

enum class LogFormat { kText, kJson };

struct AccessRecord {
  std::string id;      // the response id ("chatcmpl-..."), or empty when refused before it had one
  std::string method;  // "POST"
  std::string path;    // "/v1/chat/completions"
  int status = 200;    // the HTTP status; a stream that ended in an error chunk stays 200
  bool stream = false;
  int64_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
  double ttft_s = -1.0;  // first token of the first choice; -1: no token came
  double total_s = 0.0;  // the call, from its arrival at the server
  std::string finish_reason;  // of the choices, comma-joined when they differ ("stop", "length", "abort", "shed", ...)
  std::string error;          // the error message sent, if any
};

// Adds one choice's final output: token counts, TTFT and its finish reason.
void add_output(AccessRecord& record, const Output& final);
void add_outputs(AccessRecord& record, const std::vector<Output>& finals);

std::string access_text(const AccessRecord& record);
std::string access_json(const AccessRecord& record);
void log_access(const AccessRecord& record, LogFormat format);

}  // namespace drift::server
