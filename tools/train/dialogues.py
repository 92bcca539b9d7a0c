#!/usr/bin/env python3
"""Synthetic chat dialogues for the chat-tuned default model, made from the same Debian packages as the corpus
(standard library only):

  * words: WordNet 3.0 (`wordnet-base`): for each common single-word lemma (tagged at least once in SemCor,
    per the index files), its most frequent senses, examples and synonyms;
  * commands and C functions: the NAME line and the first DESCRIPTION paragraph of each man page in sections 1,
    2, 3 and 8 of the packages unpacked under ROOT (rendered with groff, as corpus_extract.py does);
  * computing terms: the first paragraph of each FOLDOC entry;
  * small talk: a few hand-written exchanges (greetings, who the assistant is, thanks, goodbyes).

Each fact becomes a question in one of several phrasings and an answer in plain sentences; dialogues chain one
to four exchanges, some after a system message or a greeting. Facts are split by term (every 50th term goes to
the validation file), so validation questions ask about terms the training never saw.

    python3 tools/train/dialogues.py --root WORK/root --out .corpus

Writes OUT/chat_train.jsonl.gz and OUT/chat_valid.jsonl ({"messages": [{"role", "content"}, ...]} a line)
and OUT/chat_manifest.json (counts per source, sha256 of both files). Deterministic for the same packages.
"""
import argparse
import gzip
import hashlib
import json
import os
import random
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from corpus_extract import clean_dict_entry, dictd_entries, fold_ws, read_text, walk  # noqa: E402

SEED = 20261125
VALID_EVERY = 50

# ---------------------------------------------------------------------------------------------------------
# facts: (kind, term, fields)

POS_NAME = {"n": "noun", "v": "verb", "a": "adjective", "s": "adjective", "r": "adverb"}
WN_FILES = {"n": "noun", "v": "verb", "a": "adj", "r": "adv"}


def _wn_synsets(wn_dir, pos):
    """offset -> (words, definition, examples) of one part of speech's data file."""
    out = {}
    with open(os.path.join(wn_dir, "data." + WN_FILES[pos]), encoding="utf-8", errors="replace") as f:
        for line in f:
            if line.startswith("  ") or " | " not in line:
                continue
            head, gloss = line.rstrip("\n").split(" | ", 1)
            fields = head.split()
            w_cnt = int(fields[3], 16)
            words = [re.sub(r"\([a-z]+\)$", "", w).replace("_", " ") for w in fields[4:4 + 2 * w_cnt:2]]
            parts = [p.strip() for p in fold_ws(gloss).split(";") if p.strip()]
            examples = [p.strip('"') for p in parts if p.startswith('"')]
            definition = "; ".join(p for p in parts if not p.startswith('"'))
            out[fields[0]] = (words, definition, examples)
    return out


def wordnet_facts(wn_dir):
    """One fact per common lemma: its most used part of speech, up to two senses in frequency order."""
    best = {}  # lemma -> (tagged senses, pos, offsets)
    for pos in WN_FILES:
        with open(os.path.join(wn_dir, "index." + WN_FILES[pos]), encoding="utf-8") as f:
            for line in f:
                if line.startswith(" "):
                    continue
                fields = line.split()
                lemma, p_cnt = fields[0], int(fields[3])
                sense_cnt, tagged = int(fields[4 + p_cnt]), int(fields[5 + p_cnt])
                offsets = fields[6 + p_cnt:6 + p_cnt + sense_cnt]
                if tagged < 1 or not re.fullmatch(r"[a-z]{3,15}", lemma):
                    continue
                if lemma not in best or tagged > best[lemma][0]:
                    best[lemma] = (tagged, pos, offsets)
    synsets = {pos: _wn_synsets(wn_dir, pos) for pos in WN_FILES}
    for lemma in sorted(best):
        _, pos, offsets = best[lemma]
        senses = [synsets[pos][o] for o in offsets[:2] if o in synsets[pos]]
        senses = [s for s in senses if s[1]]
        if not senses or any(w.lower() == lemma and w[0].isupper() for w in senses[0][0]):  # none, or a name
            continue
        synonyms = [w for w in senses[0][0] if w.lower() != lemma and " " not in w][:3]
        examples = [e for e in senses[0][2] if re.search(r"\b" + lemma, e)]
        yield ("word", lemma, {"pos": POS_NAME[pos], "senses": [s[1] for s in senses],
                                "synonyms": synonyms, "example": examples[0] if examples else None})


_MAN_NAME = re.compile(r"^\s*([\w.+-]+(?:\s*,\s*[\w.+-]+)*)\s+(?:\\-|-|\u2010|\u2212)\s+(.+)$")


def _render_man(path):
    src = read_text(path)
    if src.lstrip().startswith(".so "):
        return None
    try:
        out = subprocess.run(["groff", "-man", "-Tutf8", "-P-c", "-P-b", "-P-u", "-P-o", "-rLL=20000n", "-rHY=0"],
                             input=src.encode(), capture_output=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return out.decode("utf-8", "replace")


def _man_sections(text):
    """Section name -> its paragraphs (each folded to one line), in page order."""
    sections, name = {}, None
    for para in re.split(r"\n\s*\n", text):
        lines = [l for l in para.split("\n") if l.strip()]
        if lines and not lines[0].startswith(" "):
            name, lines = lines[0].strip().upper(), lines[1:]
        if name and lines:
            sections.setdefault(name, []).append(fold_ws(" ".join(lines)).strip())
    return sections


def _first_sentences(text, limit=260):
    sentences = re.split(r"(?<=[.!?])\s+(?=[A-Z])", text)
    out = ""
    for s in sentences:
        if out and len(out) + len(s) > limit:
            break
        out = (out + " " + s).strip()
    return out if len(out) <= limit * 1.5 else ""


def man_facts(root, verbs):
    seen = set()
    for path in walk(root, r"usr/share/man/man[1238]/[^/]+\.[1238][a-z]*(\.gz)?$"):
        section = re.search(r"/man([1238])/", path).group(1)
        text = _render_man(path)
        if not text:
            continue
        sections = _man_sections(text)
        m = _MAN_NAME.match((sections.get("NAME") or [""])[0])
        if not m:
            continue
        name = m.group(1).split(",")[0].strip()
        summary = m.group(2).strip().rstrip(".")
        if name in seen or not re.fullmatch(r"[a-z][\w.+-]{0,30}", name) or len(summary.split()) < 2:
            continue
        seen.add(name)
        desc = next((p for p in sections.get("DESCRIPTION", []) if len(p.split()) >= 6), "")
        yield ("command" if section in "18" else "function", name,
               {"section": section, "summary": summary, "detail": _first_sentences(desc),
                "starts_with_verb": summary.split()[0].lower() in verbs})


def foldoc_facts(dict_dir):
    for raw in dictd_entries(os.path.join(dict_dir, "foldoc.index"), os.path.join(dict_dir, "foldoc.dict.dz")):
        term = raw.split("\n", 1)[0].strip()
        paras = clean_dict_entry(raw, "foldoc")
        if not paras or not re.fullmatch(r"[A-Za-z][\w .+-]{1,30}", term):
            continue
        head, sep, definition = paras[0].partition(": ")
        if not sep or not head.startswith(term) or len(definition.split()) < 6:
            continue
        definition = _first_sentences(definition)
        if definition:
            yield ("term", term, {"definition": definition})


# ---------------------------------------------------------------------------------------------------------
# questions and answers

def _sentence(text):
    text = text.strip()
    return text[0].upper() + text[1:] + ("" if text[-1] in ".!?" else ".")


def _article(noun_phrase):
    return "an" if noun_phrase[:1].lower() in "aeiou" else "a"


def word_qa(rng, lemma, f):
    pos, senses = f["pos"], f["senses"]
    if f["synonyms"] and rng.random() < 0.15:
        q = rng.choice(["What is another word for {w}?", "Give me a synonym for \"{w}\".",
                        "What is a synonym of {w}?"]).format(w=lemma)
        return q, f"Another word for \"{lemma}\" is \"{f['synonyms'][0]}\"" + \
            (f", or \"{f['synonyms'][1]}\"." if len(f["synonyms"]) > 1 else ".")
    if f["example"] and rng.random() < 0.1:
        q = rng.choice(["Use the word {w} in a sentence.", "Give me an example sentence with \"{w}\"."]).format(w=lemma)
        return q, f"Here is an example: \"{_sentence(f['example'])}\""
    questions = ["What does {w} mean?", "What does the word \"{w}\" mean?", "Define {w}.",
                 "What is the meaning of {w}?", "Can you explain the word {w}?", "what does {w} mean",
                 "What is the definition of \"{w}\"?", "Tell me what {w} means."]
    if pos == "noun":
        questions += ["What is {a} {w}?", "What is {a} {w}?"]
    if pos == "verb":
        questions += ["What does it mean to {w}?", "What does it mean to {w}?"]
    q = rng.choice(questions).format(w=lemma, a=_article(lemma))
    if pos == "verb":
        a = f"To {lemma} means to {senses[0]}."
    elif pos == "noun" and rng.random() < 0.5:
        a = f"{_article(lemma).capitalize()} {lemma} is {senses[0]}." if re.match(r"(a|an) ", senses[0]) \
            else f"The noun \"{lemma}\" means {senses[0]}."
    else:
        a = f"\"{lemma.capitalize()}\" is {_article(pos)} {pos} meaning {senses[0]}."
    if len(senses) > 1 and rng.random() < 0.5:
        a += f" It can also mean {senses[1]}."
    if f["example"] and rng.random() < 0.4:
        a += f" For example: \"{_sentence(f['example'])}\""
    return q, a


def command_qa(rng, name, f):
    summary = f["summary"][0].lower() + f["summary"][1:]
    kind = {"1": "command", "8": "system administration command", "2": "system call",
            "3": "C library function"}[f["section"]]
    if f["section"] in "18":
        questions = ["What does the {n} command do?", "What is {n}?", "What is {n} used for?", "What does {n} do?",
                     "Explain the {n} command.", "what is {n}"]
        if f["starts_with_verb"] and rng.random() < 0.35:
            q = rng.choice(["How do I {s}?", "Which command can I use to {s}?", "How can I {s} on Linux?"])
            return q.format(s=summary), f"You can use the {name} command: it is used to {summary}. " \
                f"Run \"man {name}\" to read its manual."
    else:
        questions = ["What does the {n} function do?", "What is {n} in C?", "Explain the {n} function.",
                     "What is the {n} system call?" if f["section"] == "2" else "What does {n} do in C?"]
    a = f"The {name} {kind} is used to {summary}." if f.get("starts_with_verb") and f["section"] in "18" \
        else f"{name} is {_article(kind)} {kind}: {summary}."
    if f["detail"] and rng.random() < 0.7:
        a += " " + f["detail"]
    a += f" Its manual page is in section {f['section']}."
    return rng.choice(questions).format(n=name), a


def term_qa(rng, term, f):
    q = rng.choice(["What is {t}?", "What is {t} in computing?", "Explain {t}.", "What does {t} mean?",
                    "Tell me about {t}."]).format(t=term)
    d = re.sub(r"^\([^()]*\)\s*", "", f["definition"])
    if re.match(r"(A|An|The) ", d):
        return q, f"{term} is {d[0].lower()}{d[1:]}"
    return q, f"In computing, {term} means: {d}"


QA = {"word": word_qa, "command": command_qa, "function": command_qa, "term": term_qa}

SMALL_TALK = [
    (["Hello", "Hi", "Hello!", "Hi there", "Good morning", "Hey", "hello"],
     ["Hello! How can I help you today?", "Hi! What would you like to know?",
      "Hello! Ask me what a word means or what a command does."]),
    (["Who are you?", "What are you?", "What is your name?", "Tell me about yourself."],
     ["I am a small language model bundled with Drift, an inference engine. I was trained on English text from "
      "Debian packages, so I know word meanings and the Linux commands and manuals best.",
      "I am Drift's small demo assistant. I can explain English words and Linux commands."]),
    (["What can you do?", "How can you help me?", "What do you know about?"],
     ["I can explain what English words mean, give synonyms and examples, and tell you what Linux commands and "
      "C functions do.", "Ask me about a word, a computing term or a Linux command, and I will explain it."]),
    (["Thank you", "Thanks!", "Thanks a lot.", "thank you"],
     ["You are welcome!", "Glad to help.", "You're welcome. Ask me anything else."]),
    (["Bye", "Goodbye!", "See you later."], ["Goodbye!", "Goodbye, and have a nice day."]),
    (["How are you?", "How are you doing?"], ["I am fine, thank you. What would you like to know?"]),
]

SYSTEM_PROMPTS = ["You are a helpful assistant.", "You are a helpful assistant. Answer briefly.",
                  "You are Drift's assistant. You explain words and Linux commands.",
                  "Answer the user's questions clearly."]


def small_talk(rng, i=None):
    qs, answers = SMALL_TALK[rng.randrange(len(SMALL_TALK)) if i is None else i]
    return rng.choice(qs), rng.choice(answers)


def dialogues(facts, rng):
    """Chains the facts (in shuffled order) into dialogues of 1-4 exchanges."""
    rng.shuffle(facts)
    i = 0
    while i < len(facts):
        messages = []
        if rng.random() < 0.3:
            messages.append({"role": "system", "content": rng.choice(SYSTEM_PROMPTS)})
        if rng.random() < 0.15:
            q, a = small_talk(rng, 0)
            messages += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
        for kind, term, f in facts[i:i + rng.choice([1, 1, 2, 2, 3, 4])]:
            q, a = QA[kind](rng, term, f)
            messages += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
            i += 1
        if rng.random() < 0.1:
            q, a = small_talk(rng)
            messages += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
        yield {"messages": messages}


# ---------------------------------------------------------------------------------------------------------

def collect(root):
    facts = {"word": [], "command": [], "function": [], "term": []}
    wn = os.path.join(root, "wordnet-base", "usr", "share", "wordnet")
    facts["word"] = list(wordnet_facts(wn))
    with open(os.path.join(wn, "index.verb"), encoding="utf-8") as f:
        verbs = {line.split()[0] for line in f if not line.startswith(" ")}
    for kind, term, f in man_facts(root, verbs):
        facts[kind].append((kind, term, f))
    foldoc = os.path.join(root, "dict-foldoc", "usr", "share", "dictd")
    if os.path.isdir(foldoc):
        facts["term"] = list(foldoc_facts(foldoc))
    return facts


def write(out_dir, facts, repeats):
    rng = random.Random(SEED)
    train, valid = [], []
    for kind, items in facts.items():
        for n, fact in enumerate(items):
            (valid if n % VALID_EVERY == VALID_EVERY - 1 else train).append(fact)
    small = [{"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": a}]}
             for q, a in (small_talk(rng) for _ in range(len(train) // 40))]
    train_dialogues = [d for _ in range(repeats) for d in dialogues(list(train), rng)] + small
    rng.shuffle(train_dialogues)
    valid_dialogues = list(dialogues(list(valid), random.Random(SEED + 1)))
    os.makedirs(out_dir, exist_ok=True)
    tpath, vpath = os.path.join(out_dir, "chat_train.jsonl.gz"), os.path.join(out_dir, "chat_valid.jsonl")
    with gzip.GzipFile(tpath, "wb", mtime=0) as f:
        for d in train_dialogues:
            f.write((json.dumps(d, ensure_ascii=False) + "\n").encode())
    with open(vpath, "w", encoding="utf-8") as f:
        for d in valid_dialogues:
            f.write(json.dumps(d, ensure_ascii=False) + "\n")
    manifest = {"seed": SEED, "repeats": repeats, "facts": {k: len(v) for k, v in facts.items()},
                "train_dialogues": len(train_dialogues), "valid_dialogues": len(valid_dialogues),
                "sha256": {os.path.basename(p): hashlib.sha256(open(p, "rb").read()).hexdigest()
                           for p in (tpath, vpath)}}
    with open(os.path.join(out_dir, "chat_manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    return manifest


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", required=True, help="folder of unpacked packages (build_dialogues.sh's WORK/root)")
    ap.add_argument("--out", default=os.path.join(HERE, "..", "..", ".corpus"))
    ap.add_argument("--repeats", type=int, default=4, help="each training fact phrased this many times")
    args = ap.parse_args()
    manifest = write(args.out, collect(args.root), args.repeats)
    print(json.dumps(manifest, indent=1))


if __name__ == "__main__":
    main()
