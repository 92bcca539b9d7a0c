// Encodes the o200k_harmony test corpus with the npm package `tiktoken` (version pinned by
// package-lock.json) and writes what the C++ test (tiktoken_oracle_test.cc) expects.
//
// The encoding is built as gpt-oss builds o200k_harmony (openai/gpt-oss gpt_oss/tokenizer.py): the package's
// o200k_base ranks and pattern, its special tokens, the harmony tokens, and <|reserved_N|> for every other id
// up to 201087. Text is encoded with every special token allowed, as Drift's encode() does.
// The corpus: texts.json, then generated strings that mix scripts, digits, punctuation, whitespace and
// special-token look-alikes (a fixed seed, so the output only changes with the generator).
//
// Usage: node encode.mjs <texts.json> <output.json>
import fs from "node:fs";
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
const { Tiktoken } = require("tiktoken/lite");
const o200k = require("tiktoken/encoders/o200k_base.json");
// The package exports no package.json; it sits next to this script's node_modules.
const tiktokenVersion = JSON.parse(
  fs.readFileSync(new URL("./node_modules/tiktoken/package.json", import.meta.url), "utf8")).version;

const [textsPath, outPath] = process.argv.slice(2);
if (!textsPath || !outPath) {
  console.error("usage: node encode.mjs <texts.json> <output.json>");
  process.exit(2);
}

function harmonySpecialTokens() {
  const named = {
    ...o200k.special_tokens,
    "<|startoftext|>": 199998,
    "<|endoftext|>": 199999,
    "<|return|>": 200002,
    "<|constrain|>": 200003,
    "<|channel|>": 200005,
    "<|start|>": 200006,
    "<|end|>": 200007,
    "<|message|>": 200008,
    "<|call|>": 200012,
  };
  const used = new Set(Object.values(named));
  const tokens = { ...named };
  for (let id = 199998; id < 201088; ++id) {
    if (!used.has(id)) tokens[`<|reserved_${id}|>`] = id;
  }
  return tokens;
}

// mulberry32: a small seeded generator, so the corpus is the same on every machine.
function generator(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const alphabets = [
  "abcdefghijklmnopqrstuvwxyz",
  "ABCDEFGHIJKLMNOPQRSTUVWXYZ",
  "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
  "àáâäæçèéêëìíîïñòóôöøùúûüýÿßÀÉÎÖÜÑ",
  "αβγδεζηθικλμνξοπρστυφχψωΑΒΓΔΩ",
  "абвгдежзийклмнопрстуфхцчшщъыьэюяАБВГДЯ",
  "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年",
  "あいうえおかきくけこさしすせそたちつてとアイウエオカキクケコ",
  "가나다라마바사아자차카타파하한국어텍스트",
  "ابتثجحخدذرزسشصضطظعغفقكلمنهوي",
  "कखगघङचछजझञटठडढणतथदधनपफबभमयरलवशसह\u093e\u093f\u0940\u0941\u094d",
  "กขฃคฅฆงจฉชซฌญฎฏฐ\u0e31\u0e34\u0e35",
  "0123456789",
];
const pieces = [
  " ", " ", " ", "  ", "\t", "\n", "\n\n", "\r\n", "   \n", "\u00a0", "\u3000",
  ".", ",", "!", "?", ":", ";", "...", "--", "/", "//", "\\", "(", ")", "[", "]", "{", "}", "\"", "'",
  "'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'LL", "'D",
  "=>", "->", "==", "+=", "<", ">", "#", "$", "%", "&", "*", "@", "_", "|", "~", "^", "`",
  "😀", "🚀", "👩‍💻", "🇯🇵", "❤️", "👍🏽",
  "e\u0301", "\u0301", "\u200d",
  "<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|endoftext|>", "<|reserved_200100|>",
  "<|start", "|>", "<|", "<|end", "<|endofprompt|>x",
];

function generatedTexts(count) {
  const random = generator(20251122);
  const pick = (list) => list[Math.floor(random() * list.length)];
  const texts = [];
  for (let i = 0; i < count; ++i) {
    const units = 1 + Math.floor(random() * 24);
    let text = "";
    for (let u = 0; u < units; ++u) {
      if (random() < 0.55) {
        const letters = [...pick(alphabets)];
        const length = 1 + Math.floor(random() * 9);
        for (let k = 0; k < length; ++k) text += pick(letters);
      } else {
        text += pick(pieces);
      }
    }
    texts.push(text);
  }
  return texts;
}

const encoding = new Tiktoken(o200k.bpe_ranks, harmonySpecialTokens(), o200k.pat_str);
const texts = [...JSON.parse(fs.readFileSync(textsPath, "utf8")), ...generatedTexts(400)];
const cases = texts.map((text) => ({ text, ids: Array.from(encoding.encode(text, "all")) }));
encoding.free();

const out = {
  oracle: `npm tiktoken ${tiktokenVersion}, o200k_base ranks + gpt-oss harmony special tokens`,
  pat_str: o200k.pat_str,
  cases,
};
fs.writeFileSync(outPath, JSON.stringify(out, null, 0).replace(/\},\{"text"/g, '},\n{"text"') + "\n");
console.log(`encoded ${cases.length} texts with tiktoken ${tiktokenVersion}`);
