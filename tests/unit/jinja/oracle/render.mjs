// Renders every corpus template x conversation x add_generation_prompt (off, on) with
// @huggingface/jinja and writes what the C++ corpus test expects:
//   <out>/<template>/<conversation>.gen-off.txt   the rendered prompt, byte for byte
//   <out>/<template>/<conversation>.gen-on.error.txt   instead, when rendering raised (the message)
// The context is built as render_chat builds it (src/tokenizer/jinja/chat.cc): the conversation's
// "extra" keyword arguments, then messages, tools (null when absent), add_generation_prompt and the
// special tokens from corpus/special_tokens.json.
//
// Usage: node render.mjs <corpus dir> <output dir>
import { Template } from "@huggingface/jinja";
import fs from "node:fs";
import path from "node:path";

const [corpusDir, outDir] = process.argv.slice(2);
if (!corpusDir || !outDir) {
  console.error("usage: node render.mjs <corpus dir> <output dir>");
  process.exit(2);
}

const readJson = (file) => JSON.parse(fs.readFileSync(file, "utf8"));
const listFiles = (dir, suffix) =>
  fs.readdirSync(dir).filter((name) => name.endsWith(suffix)).sort().map((name) => name.slice(0, -suffix.length));

const specialTokens = readJson(path.join(corpusDir, "special_tokens.json"));
const templates = listFiles(path.join(corpusDir, "templates"), ".jinja");
const conversations = listFiles(path.join(corpusDir, "conversations"), ".json");

fs.rmSync(outDir, { recursive: true, force: true });
let rendered = 0;
let raised = 0;
for (const templateName of templates) {
  const source = fs.readFileSync(path.join(corpusDir, "templates", `${templateName}.jinja`), "utf8");
  const template = new Template(source);
  fs.mkdirSync(path.join(outDir, templateName), { recursive: true });
  for (const conversationName of conversations) {
    const conversation = readJson(path.join(corpusDir, "conversations", `${conversationName}.json`));
    for (const generationPrompt of [false, true]) {
      const context = {
        ...(conversation.extra ?? {}),
        messages: conversation.messages,
        tools: conversation.tools ?? null,
        add_generation_prompt: generationPrompt,
        bos_token: specialTokens.bos_token,
        eos_token: specialTokens.eos_token,
      };
      const stem = path.join(outDir, templateName, `${conversationName}.${generationPrompt ? "gen-on" : "gen-off"}`);
      try {
        fs.writeFileSync(`${stem}.txt`, template.render(context));
        rendered += 1;
      } catch (error) {
        fs.writeFileSync(`${stem}.error.txt`, error.message);
        raised += 1;
      }
    }
  }
}
console.log(`${templates.length} templates x ${conversations.length} conversations x 2: ${rendered} rendered, ${raised} raised`);
