#include "core/request/sequence.h"

namespace drift::core {

const char* seq_status_name(SeqStatus status) {
  switch (status) {
    case SeqStatus::kWaiting: return "waiting";
    case SeqStatus::kRunning: return "running";
    case SeqStatus::kPreempted: return "preempted";
    case SeqStatus::kFinished: return "finished";
  }
  return "?";
}

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kNone: return "none";
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAbort: return "abort";
  }
  return "?";
}

}  // namespace drift::core
