// Prompts printed in openai/harmony docs/format.md, which renderer tests compare against: the complete
// input of "Function calling" (system, developer with three tools, user) and the turn of "Handling tool
// calls" (the analysis that led to a call, the call, and its result).
#pragma once

namespace drift::testing {

// format.md's system message of that example has "Current date: 2025-06-28" and "Reasoning: high"; the
// developer message "Use a friendly tone." and the tools get_location, get_current_weather and
// get_multiple_weathers.
inline constexpr const char* kDocToolsPrompt = R"doc(<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.
Knowledge cutoff: 2024-06
Current date: 2025-06-28

Reasoning: high

# Valid channels: analysis, commentary, final. Channel must be included for every message.
Calls to these tools must go to the commentary channel: 'functions'.<|end|><|start|>developer<|message|># Instructions

Use a friendly tone.

# Tools

## functions

namespace functions {

// Gets the location of the user.
type get_location = () => any;

// Gets the current weather in the provided location.
type get_current_weather = (_: {
// The city and state, e.g. San Francisco, CA
location: string,
format?: "celsius" | "fahrenheit", // default: celsius
}) => any;

// Gets the current weather in the provided list of locations.
type get_multiple_weathers = (_: {
// List of city and state, e.g. ["San Francisco, CA", "New York, NY"]
locations: string[],
format?: "celsius" | "fahrenheit", // default: celsius
}) => any;

} // namespace functions<|end|><|start|>user<|message|>What is the weather like in SF?<|end|>)doc";

inline constexpr const char* kDocToolCallTurn =
    "<|start|>assistant<|channel|>analysis<|message|>Need to use function get_weather.<|end|>"
    "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
    R"({"location":"San Francisco"})"
    "<|call|><|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>"
    R"({"sunny": true, "temperature": 20})"
    "<|end|>";

}  // namespace drift::testing
