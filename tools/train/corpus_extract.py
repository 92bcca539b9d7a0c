#!/usr/bin/env python3
"""Pulls English prose out of extracted Debian packages and writes the training corpus.

Called by build_corpus.sh after it has run `apt-get download` and `dpkg-deb -x` for each package into
ROOT/<package>/. Standard library only (runs on the CPU machine, no PyTorch).

Output (in --out):
  train.txt.xz   documents separated by one line break plus two empty lines ("\\n\\n\\n"); paragraphs inside
                 a document are separated by one empty line ("\\n\\n"); no document contains "\\n\\n\\n".
  valid.txt      the same format, plain UTF-8 (about 1% of the documents, every 100th after the shuffle).
  manifest.json  per-source document and byte counts, sizes and sha256 of the outputs, the recipe version.

Pipeline: per-source extraction -> paragraph cleaning and prose filter -> corpus-wide exact dedupe of
paragraphs (after lower-casing and whitespace folding) and of documents -> documents cut to at most
MAX_DOC_CHARS at paragraph boundaries -> per-source byte caps (deterministic sample) -> deterministic
shuffle (random.Random(SEED)) -> 99/1 split.

Usage: corpus_extract.py --root ROOT --out OUT [--bible-text FILE] [--scale 1.0] [--no-xz]
"""
import argparse
import gzip
import hashlib
import html.parser
import json
import lzma
import os
import random
import re
import sys
import unicodedata
import xml.etree.ElementTree as ET

RECIPE_VERSION = 1
SEED = 20261122
MAX_DOC_CHARS = 16000
VALID_EVERY = 100  # every 100th shuffled document goes to valid.txt (1%)

# Caps in MB of clean text per source (multiplied by --scale). Chosen so that reference/dictionary style
# text does not drown the running prose; sources below their cap are taken whole.
CAPS_MB = {
    "gcide": 16.0,
    "wordnet": 5.0,
    "devil": 1.0,
    "jargon": 2.0,
    "foldoc": 4.0,
    "bible-kjv": 5.0,
    "fortunes": 4.0,
    "python-doc": 12.0,
    "perl-doc": 8.0,
    "postgresql-doc": 10.0,
    "debian-doc": 12.0,
    "gnome-help": 4.0,
    "git-doc": 4.0,
    "gnu-doc": 3.0,
    "linux-doc": 10.0,
    "manpages": 6.0,
    "gimp-help": 8.0,
    "django-doc": 6.0,
    "wesnoth": 8.0,
}

# ---------------------------------------------------------------------------------------------------------
# Paragraph cleaning and the prose filter

_SPACE_MAP = {ord(c): " " for c in "\u00a0\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
                                    "\u202f\u205f\u3000\t\r\f\v"}
_SPACE_MAP.update({ord(c): None for c in "\u200b\u200c\u200d\u2060\ufeff\u00ad\u00b6"})  # zero-width, soft hyphen, pilcrow
_CODE_CHARS = set("{}[]<>=;$@#\\|_`~^*")
_URL = re.compile(r"(https?|ftp)://\S+|www\.\S+")


def fold_ws(text):
    """NFC, odd spaces to ' ', runs of blanks to one space, stripped. Line breaks become spaces too."""
    text = unicodedata.normalize("NFC", text).translate(_SPACE_MAP)
    return re.sub(r"\s+", " ", text).strip()


def foreign_letters(p):
    """Letters outside Latin and Latin Extended (another script). Punctuation such as curly quotes, dashes and
    arrows does not count."""
    return sum(1 for ch in p if ord(ch) > 0x24F and ch.isalpha())


def is_prose(p, min_words=5):
    """True for a paragraph that reads as English sentences rather than code, tables or lists of names."""
    words = p.split()
    if len(words) < min_words:
        return False
    n = len(p)
    letters = sum(ch.isalpha() for ch in p)
    if letters < 0.70 * n:
        return False
    if sum(ch in _CODE_CHARS for ch in p) > 0.02 * n + 1:
        return False
    if foreign_letters(p) > 0.02 * n:
        return False
    if max(len(w) for w in words) > 40:
        return False
    urls = sum(len(m.group(0)) for m in _URL.finditer(p))
    if urls > 0.15 * n:
        return False
    lower = sum(1 for w in words if w.isalpha() and w.islower())
    if lower < 0.45 * len(words):
        return False
    if not re.search(r"[.!?:;]['\")\]]?(\s|$)", p):
        return False
    return True


def is_heading(p):
    words = p.split()
    if not 1 <= len(words) <= 12 or len(p) > 100:
        return False
    letters = sum(ch.isalpha() for ch in p)
    return letters >= 0.75 * len(p.replace(" ", "")) and not any(ch in _CODE_CHARS for ch in p)


def assemble(blocks, min_words=5):
    """blocks: list of (kind, text) with kind in {"h", "p"}. Keeps prose paragraphs and the headings that
    directly precede kept prose. Returns a list of paragraph strings."""
    out = []
    pending = None
    for kind, text in blocks:
        text = fold_ws(text)
        if not text:
            continue
        if kind == "h":
            pending = text.rstrip(" #:") if is_heading(text) else None
            continue
        if is_prose(text, min_words):
            if pending:
                out.append(pending)
                pending = None
            out.append(text)
    return out


# ---------------------------------------------------------------------------------------------------------
# HTML (Sphinx, DocBook, texinfo, asciidoc output)

_BLOCK_TAGS = {"p", "li", "dd", "dt", "div", "blockquote", "section", "article", "td", "th", "tr", "br",
               "caption", "figcaption", "dl", "ul", "ol", "table", "body", "hr", "main", "aside", "header",
               "footer", "center", "form"}
_HEAD_TAGS = {"h1", "h2", "h3", "h4", "h5", "h6"}
_SKIP_TAGS = {"script", "style", "pre", "head", "title", "nav", "table", "math", "svg", "button", "form",
              "textarea", "select", "object", "noscript", "code-block", "kbd", "samp"}
_SKIP_CLASS = re.compile(r"\b(sphinxsidebar|related|footer|headerlink|highlight[\w-]*|toctree-wrapper|"
                         r"navheader|navfooter|toc|lot|contents|topic|footnotes?|footnote-list|copyright|"
                         r"legalnotice|breadcrumbs?|indextable|literal-block|doctest|productionlist|"
                         r"screen|programlisting|synopsis|cmdsynopsis|funcsynopsis|literallayout|example-contents|"
                         r"sig|sig-object|versionmodified|revhistory|author|authorgroup|index)\b")
_VOID = {"br", "img", "hr", "meta", "link", "input", "wbr", "col", "area", "base", "source", "embed", "param",
         "track"}


class _HtmlBlocks(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.blocks = []     # (kind, text)
        self.buf = []
        self.kind = "p"
        self.stack = []      # (tag, skipping)

    def _skipping(self):
        return bool(self.stack) and self.stack[-1][1]

    def _flush(self):
        text = "".join(self.buf)
        if text.strip():
            self.blocks.append((self.kind, text))
        self.buf = []
        self.kind = "p"

    def handle_starttag(self, tag, attrs):
        if tag in _VOID:
            if tag in ("br", "hr") and not self._skipping():
                self.buf.append(" ")
            return
        cls = " ".join(v or "" for k, v in attrs if k == "class")
        skip = self._skipping() or tag in _SKIP_TAGS or bool(_SKIP_CLASS.search(cls))
        if tag in _BLOCK_TAGS or tag in _HEAD_TAGS:
            if not self._skipping():
                self._flush()
            if tag in _HEAD_TAGS:
                self.kind = "h"
        self.stack.append((tag, skip))

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)
        if tag not in _VOID:
            self.handle_endtag(tag)

    def handle_endtag(self, tag):
        if not any(t == tag for t, _ in self.stack):
            return
        while self.stack:
            t, skip = self.stack.pop()
            if t == tag:
                break
        if (tag in _BLOCK_TAGS or tag in _HEAD_TAGS) and not self._skipping():
            if not skip:
                self._flush()
            else:
                self.buf = []
                self.kind = "p"

    def handle_data(self, data):
        if not self._skipping():
            self.buf.append(data)

    def close(self):
        super().close()
        self._flush()


def html_blocks(text):
    p = _HtmlBlocks()
    try:
        p.feed(text)
        p.close()
    except Exception as e:  # malformed markup: keep what was parsed
        print(f"    html parse warning: {e}", file=sys.stderr)
    return p.blocks


def read_text(path):
    with open(path, "rb") as f:
        data = f.read()
    if path.endswith(".gz"):
        data = gzip.decompress(data)
    for enc in ("utf-8", "latin-1"):
        try:
            return data.decode(enc)
        except UnicodeDecodeError:
            pass
    return data.decode("utf-8", "replace")


def walk(root, include, exclude=None):
    """Sorted list of files under root whose path (relative to root) matches include and not exclude."""
    inc, exc = re.compile(include), re.compile(exclude) if exclude else None
    found = []
    if not os.path.isdir(root):
        return found
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for fn in sorted(filenames):
            full = os.path.join(dirpath, fn)
            rel = os.path.relpath(full, root)
            if inc.search(rel) and not (exc and exc.search(rel)) and os.path.isfile(full):
                found.append(full)
    return found


def docs_from_html(files):
    for path in files:
        paras = assemble(html_blocks(read_text(path)))
        if paras:
            yield paras


# ---------------------------------------------------------------------------------------------------------
# dictd databases (GCIDE, Devil's Dictionary, Jargon File, FOLDOC)

_B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def _b64num(s):
    n = 0
    for ch in s:
        n = n * 64 + _B64.index(ch)
    return n


def dictd_entries(index_path, dict_path):
    """Raw entry texts in dictionary order, one per distinct (offset, length) in the .index file."""
    with open(dict_path, "rb") as f:
        data = gzip.decompress(f.read())
    seen, spans = set(), []
    with open(index_path, encoding="utf-8", errors="replace") as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) < 3 or parts[0].startswith("00-database") or parts[0].startswith("00database"):
                continue
            try:
                span = (_b64num(parts[1]), _b64num(parts[2]))
            except ValueError:
                continue
            if span not in seen:
                seen.add(span)
                spans.append(span)
    spans.sort()
    for off, ln in spans:
        yield data[off:off + ln].decode("utf-8", "replace")


_GCIDE_TAG = re.compile(r"\[[^\[\]]{0,600}\]")
_PRON = re.compile(r"\\[^\\\n]{0,120}\\(\s*\([^()]{0,80}\))?")
# GCIDE writes accented letters and ligatures as bracket codes: ['e] = e acute, [a^] = a breve, [=o] = o
# macron, [ae] = ae ligature. Diacritics that modern English spelling keeps become real letters; the
# pronunciation-only marks (breve, macron, dots) become the bare letter.
_GCIDE_COMBINING = {"'": "\u0301", "`": "\u0300", '"': "\u0308", "^": "\u0302", "~": "\u0303", ",": "\u0327"}
_GCIDE_WORDS = {"ae": "ae", "AE": "Ae", "oe": "oe", "OE": "Oe", "=ae": "ae", "imac": "i", "asl": "a", "aum": "a",
                "add": "a", "udd": "u", "eth": "th", "th": "th", "ng": "ng", "yogh": "y", "deg": "\u00b0",
                "sect": "\u00a7", "root": "", "=oo": "oo", "oo^": "oo", "ee": "ee"}
_GCIDE_CODE = re.compile(r"\[([=\-.~*`'\"^,]?)([a-zA-Z]{1,4})(\^?)\]")


def _gcide_char(m):
    mark, body, breve = m.group(1), m.group(2), m.group(3)
    key = mark + body + breve
    if key in _GCIDE_WORDS:
        return _GCIDE_WORDS[key]
    if len(body) != 1:
        return m.group(0)  # a tag such as [Obs] or [Cant]: removed later with the other brackets
    if mark in ("'", "`", '"') or (mark == "^" and body in "aeiou") or (mark == "~" and body == "n") or \
            (mark == "," and body == "c"):
        return unicodedata.normalize("NFC", body + _GCIDE_COMBINING[mark])
    if mark or breve:
        return body
    return m.group(0)
_ATTRIB = re.compile(r"\s--\s?[A-Z(].*$")


def clean_dict_entry(raw, kind):
    """One dictd entry -> list of paragraphs. Headword lines keep the word and part of speech; pronunciation
    (\\...\\), bracketed etymologies and source tags, cross-reference braces, quotation attributions (--Author)
    and synonym lists go."""
    lines = raw.split("\n")
    paras, cur = [], []
    for line in lines:
        if not line.strip():
            if cur:
                paras.append(cur)
                cur = []
            continue
        cur.append(line)
    if cur:
        paras.append(cur)
    if kind in ("foldoc", "jargon") and len(paras) >= 2 and len(paras[0]) <= 2 and \
            len(" ".join(paras[0]).split()) <= 8:
        head = " ".join(l.strip() for l in paras.pop(0))
        head = head.rstrip(".") + "." if kind == "jargon" else head + ":"
        paras[0] = [head + " " + paras[0][0].strip()] + paras[0][1:]
    out = []
    for pl in paras:
        first = pl[0].strip()
        if first.startswith(("Syn:", "Syn.", "See also", "Usage:", "Ant:")):
            continue
        if kind == "foldoc" and len(pl) == 1 and re.fullmatch(r"\(\d{4}-\d{2}-\d{2}\)", first):
            continue
        kept = []
        for line in pl:
            line = _ATTRIB.sub("", line)
            kept.append(line.strip())
        text = " ".join(kept)
        if kind == "gcide":
            text = _GCIDE_CODE.sub(_gcide_char, text)
        text = _PRON.sub("", text)
        for _ in range(3):
            text = _GCIDE_TAG.sub("", text)
        text = text.replace("{", "").replace("}", "")
        text = re.sub(r"(?<!\w)_([^_]{1,80})_(?!\w)", r"\1", text)  # _italics_
        text = re.sub(r"\(\d{4}-\d{2}-\d{2}\)", "", text)     # FOLDOC dates
        if kind == "jargon":
            text = re.sub(r"\s/[^/\n]{1,60}/(?=[,.\s])", "", text)  # pronunciation /.../
        text = re.sub(r"<[^<>]{1,80}>", "", text)              # e-mail addresses, stray tags
        text = re.sub(r"\s+([,.;:])", r"\1", text)
        text = re.sub(r"\s*,(\s*,)+", ",", text)
        text = fold_ws(text).strip(" ,;")
        if text:
            out.append(text)
    return out


def docs_from_dict(index_path, dict_path, kind, target_chars=4000):
    """Consecutive entries grouped into documents of about target_chars."""
    doc, size = [], 0
    for raw in dictd_entries(index_path, dict_path):
        paras = [p for p in clean_dict_entry(raw, kind) if _dict_para_ok(p)]
        if not paras:
            continue
        doc.append(" ".join(paras) if kind == "gcide" else "\n".join(paras))
        size += sum(len(p) for p in paras)
        if size >= target_chars:
            yield doc
            doc, size = [], 0
    if doc:
        yield doc


def _dict_para_ok(p):
    words = p.split()
    if len(words) < 3:
        return False
    letters = sum(ch.isalpha() for ch in p)
    if letters < 0.65 * len(p):
        return False
    return foreign_letters(p) <= 0.02 * len(p)


# ---------------------------------------------------------------------------------------------------------
# WordNet glosses

def docs_from_wordnet(wn_dir, target_chars=4000):
    pos_name = {"n": "noun", "v": "verb", "a": "adjective", "s": "adjective", "r": "adverb"}
    for fname in ("data.noun", "data.verb", "data.adj", "data.adv"):
        path = os.path.join(wn_dir, fname)
        if not os.path.exists(path):
            continue
        groups = {}
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("  ") or " | " not in line:
                    continue
                head, gloss = line.rstrip("\n").split(" | ", 1)
                fields = head.split()
                try:
                    lexfile, ss_type, w_cnt = int(fields[1]), fields[2], int(fields[3], 16)
                except (ValueError, IndexError):
                    continue
                words = [re.sub(r"\([a-z]+\)$", "", w).replace("_", " ") for w in fields[4:4 + 2 * w_cnt:2]]
                gloss = fold_ws(gloss).rstrip(" ;")
                if not gloss or not words:
                    continue
                if gloss[-1] not in '.!?"':
                    gloss += "."
                entry = f"{', '.join(words)} ({pos_name.get(ss_type, 'word')}): {gloss}"
                groups.setdefault(lexfile, []).append(entry)
        for lexfile in sorted(groups):
            doc, size = [], 0
            for entry in groups[lexfile]:
                doc.append(entry)
                size += len(entry)
                if size >= target_chars:
                    yield ["\n".join(doc)]
                    doc, size = [], 0
            if doc:
                yield ["\n".join(doc)]


# ---------------------------------------------------------------------------------------------------------
# King James Bible (text produced by the bible-kjv program, one verse a line: "Ge1:1 In the beginning ...")

def docs_from_bible(path):
    cur, verses = None, []
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            m = re.match(r"^(\d?[A-Za-z]+)(\d+):(\d+) (.*)$", line.rstrip("\n"))
            if not m:
                continue
            key = (m.group(1), m.group(2))
            if key != cur and verses:
                yield _bible_paras(verses)
                verses = []
            cur = key
            verses.append(m.group(4).strip())
    if verses:
        yield _bible_paras(verses)


def _bible_paras(verses, per=6):
    return [fold_ws(" ".join(verses[i:i + per])) for i in range(0, len(verses), per)]


# ---------------------------------------------------------------------------------------------------------
# fortune cookies

FORTUNE_SKIP = {"ascii-art", "ethnic", "men-women", "translate-me", "perl", "zippy"}


def docs_from_fortunes(files, target_chars=3000):
    seen = set()
    doc, size = [], 0
    for path in files:
        name = os.path.basename(path)
        if name.endswith((".dat", ".u8")) or name in FORTUNE_SKIP:
            continue
        text = read_text(path)
        for cookie in re.split(r"\n%\n", text):
            lines = [unicodedata.normalize("NFC", l).translate(_SPACE_MAP).strip() for l in cookie.split("\n")]
            lines = [re.sub(r" {2,}", " ", l) for l in lines if l]
            if not lines:
                continue
            body = "\n".join(lines)
            n = len(body)
            if n < 20 or n > 2500:
                continue
            letters = sum(ch.isalpha() for ch in body)
            if letters < 0.6 * n or sum(ch in _CODE_CHARS for ch in body) > 0.02 * n + 1:
                continue
            if foreign_letters(body) > 0.01 * n:
                continue
            key = fold_ws(body).lower()
            if key in seen:
                continue
            seen.add(key)
            doc.append(body)
            size += n
            if size >= target_chars:
                yield doc
                doc, size = [], 0
    if doc:
        yield doc


# ---------------------------------------------------------------------------------------------------------
# Perl POD

_POD_CODE = re.compile(r"([A-Z])<(<+)\s(.*?)\s\2>|([A-Z])<([^<>]*)>", re.S)


def _pod_inline(text):
    def repl(m):
        code = m.group(1) or m.group(4)
        body = m.group(3) if m.group(1) else m.group(5)
        if code in "XZ":
            return ""
        if code == "E":
            return {"lt": "<", "gt": ">", "sol": "/", "verbar": "|", "quot": '"', "amp": "&"}.get(body, "")
        if code == "L":
            if "|" in body:
                return body.split("|", 1)[0]
            body = body.split("/", 1)[-1].strip('"')
            return body
        return body
    for _ in range(6):
        new = _POD_CODE.sub(repl, text)
        if new == text:
            break
        text = new
    return text


POD_SKIP = re.compile(r"(perl\d+delta|perldelta|perltoc|perlapi|perlintern|perlmodlib|perlartistic|perlgpl|"
                      r"perlhist|perlvms|perlwin32|perlport)\.pod$")


def docs_from_pod(files):
    for path in files:
        if POD_SKIP.search(path):
            continue
        text = read_text(path)
        blocks, skipping = [], False
        for para in re.split(r"\n\s*\n", text):
            if not para.strip():
                continue
            if para.startswith("=begin") or para.startswith("=for"):
                skipping = para.startswith("=begin")
                continue
            if para.startswith("=end"):
                skipping = False
                continue
            if skipping:
                continue
            if para.startswith("="):
                cmd, _, rest = para.partition(" ")
                if cmd.startswith("=head"):
                    blocks.append(("h", _pod_inline(rest)))
                elif cmd == "=item":
                    rest = rest.strip()
                    if rest and rest not in ("*",) and not re.fullmatch(r"\d+\.?", rest):
                        blocks.append(("h", _pod_inline(rest)))
                continue
            if para[0] in " \t":  # verbatim (code)
                continue
            blocks.append(("p", _pod_inline(para)))
        paras = assemble(blocks)
        if paras:
            yield paras


# ---------------------------------------------------------------------------------------------------------
# GNOME help (Mallard XML)

def docs_from_mallard(files):
    for path in files:
        try:
            root = ET.parse(path).getroot()
        except ET.ParseError:
            continue
        parent = {c: p for p in root.iter() for c in p}
        blocks = []
        for el in root.iter():
            tag = el.tag.split("}")[-1] if isinstance(el.tag, str) else ""
            if tag not in ("title", "p"):
                continue
            anc, skip = parent.get(el), False
            while anc is not None:
                atag = anc.tag.split("}")[-1] if isinstance(anc.tag, str) else ""
                if atag in ("info", "screen", "code", "credit", "license", "comment", "p"):
                    skip = True
                    break
                anc = parent.get(anc)
            if not skip:
                blocks.append(("h" if tag == "title" else "p", "".join(el.itertext())))
        paras = assemble(blocks)
        if paras:
            yield paras


# ---------------------------------------------------------------------------------------------------------
# reStructuredText (Linux kernel documentation)

def docs_from_rst(files):
    for path in files:
        text = read_text(path)
        blocks, literal, directive_indent = [], False, None
        paras = re.split(r"\n\s*\n", text)
        for para in paras:
            if not para.strip():
                continue
            indent = len(para) - len(para.lstrip(" \t"))
            if directive_indent is not None:
                if indent > directive_indent:
                    continue
                directive_indent = None
            if literal:
                if indent > 0:
                    continue
                literal = False
            stripped = para.strip()
            if stripped.startswith(".. "):
                directive_indent = indent
                continue
            lines = stripped.split("\n")
            # section titles: a line underlined (and maybe overlined) with punctuation
            if len(lines) >= 2 and re.fullmatch(r"([=\-~^\"'`#*+.:_])\1{2,}", lines[-1].strip()):
                title = [l for l in lines if not re.fullmatch(r"([=\-~^\"'`#*+.:_])\1{2,}", l.strip())]
                blocks.append(("h", " ".join(title)))
                continue
            if re.match(r"^[+|]", stripped) or re.match(r"^=+\s+=+", stripped):  # tables
                continue
            if stripped.endswith("::"):
                literal = True
                stripped = stripped[:-1] if not stripped.endswith(" ::") else stripped[:-3]
            if indent > 0 and not re.match(r"^[-*]\s|^\d+\.\s", stripped):
                continue  # block quote / code-ish indentation
            stripped = re.sub(r"^[-*]\s+|^\d+\.\s+", "", stripped)
            stripped = re.sub(r":[a-z:]+:`([^`<]*?)(\s*<[^>]*>)?`", r"\1", stripped)  # roles
            stripped = re.sub(r"`([^`<]+?)\s*<[^>]+>`_+", r"\1", stripped)           # links
            stripped = stripped.replace("``", "").replace("`", "").replace("**", "")
            stripped = re.sub(r"(?<=\w)_(?=\W|$)", "", stripped)
            blocks.append(("p", stripped))
        paras = assemble(blocks)
        if paras:
            yield paras


# ---------------------------------------------------------------------------------------------------------
# manual pages (rendered with groff; each filled paragraph comes out as one line)

MAN_SKIP_SECTIONS = {"NAME", "SYNOPSIS", "SEE ALSO", "COLOPHON", "EXAMPLES", "EXAMPLE", "AUTHORS", "AUTHOR",
                     "COPYRIGHT", "REPORTING BUGS", "ATTRIBUTES", "VERSIONS", "STANDARDS", "CONFORMING TO",
                     "LIBRARY", "FILES", "ENVIRONMENT", "RETURN VALUE", "ERRORS"}


def docs_from_man(files):
    import subprocess
    for path in files:
        try:
            src = read_text(path)
            if src.lstrip().startswith(".so "):  # an alias page
                continue
            out = subprocess.run(["groff", "-man", "-Tutf8", "-P-c", "-P-b", "-P-u", "-P-o", "-rLL=20000n",
                                  "-rHY=0"], input=src.encode(), capture_output=True, timeout=60).stdout
        except (OSError, subprocess.SubprocessError):
            continue
        text = out.decode("utf-8", "replace")
        blocks, section = [], None
        for para in re.split(r"\n\s*\n", text):
            lines = [l for l in para.split("\n") if l.strip()]
            if not lines:
                continue
            first = lines[0]
            if not first.startswith(" "):            # section heading (indent 0)
                section = first.strip()
                lines = lines[1:]
                if not lines:
                    continue
            if section is None or section.upper() in MAN_SKIP_SECTIONS:
                continue
            # a sub-heading (indent 3) may sit on the first line of a paragraph
            if re.match(r"^ {3}\S", lines[0]) and len(lines) > 1:
                blocks.append(("h", lines[0]))
                lines = lines[1:]
            if len(lines) == 1:
                blocks.append(("p", lines[0]))
            elif all(re.match(r"^ {7}\S", l) for l in lines[1:]) and re.match(r"^ {7}\S", lines[0]) is None:
                blocks.append(("h", lines[0]))          # a tagged paragraph: the tag, then its text
                blocks += [("p", l) for l in lines[1:]]
            # otherwise: several unfilled lines (code, tables): dropped
        paras = assemble(blocks)
        if paras:
            yield paras


# ---------------------------------------------------------------------------------------------------------
# Battle for Wesnoth campaigns: story text and dialogue from the WML scenario files

_WML_STR = re.compile(r'^\s*(\w+)\s*=\s*_\s*"((?:[^"]|"")*)"', re.M)
_WML_SPEAKER = re.compile(r'^\s*speaker\s*=\s*"?([^"\n#]*)"?', re.M)
_WML_NON_NAMES = {"narrator", "unit", "second_unit", "secondunit", ""}


def _wml_clean(text):
    text = text.replace('""', '"')
    text = re.sub(r"<[^<>]{0,80}>", "", text)   # <i>, <b>, <span ...> markup
    return text


def docs_from_wml(files):
    """One document per scenario (or unit/utility file): story parts as narration, [message] lines as
    'Speaker: text' when the speaker is a named character. Strings with $variables are dropped."""
    for path in files:
        src = read_text(path)
        events = []
        for m in re.finditer(r'^\s*speaker\s*=\s*"?([^"\n#]*)"?|^\s*(\w+)\s*=\s*_\s*"((?:[^"]|"")*)"',
                             src, re.M):
            if m.group(2) is None:
                events.append(("speaker", m.group(1).strip()))
            else:
                events.append((m.group(2), m.group(3)))
        speaker, blocks = None, []
        for key, val in events:
            if key == "speaker":
                speaker = val
                continue
            if key not in ("message", "story", "description", "note", "text"):
                continue
            if "$" in val or "{" in val:
                continue
            text = _wml_clean(val)
            for part in re.split(r"\n\s*\n", text):
                part = fold_ws(part)
                if len(part.split()) < 3:
                    continue
                if key == "message" and speaker and speaker.lower() not in _WML_NON_NAMES and \
                        re.fullmatch(r"[A-Z][\w' -]{1,30}", speaker):
                    part = f"{speaker}: {part}"
                blocks.append(part)
            if key == "message":
                speaker = None
        # dialogue is short: keep every line with a few words and mostly letters
        keep = [b for b in blocks if sum(ch.isalpha() for ch in b) >= 0.6 * len(b)]
        if keep:
            yield keep


# ---------------------------------------------------------------------------------------------------------
# sources

def source_docs(root, bible_text):
    """Yields (source, paragraphs) for every package found under root, in a fixed order."""
    R = lambda *p: os.path.join(root, *p)  # noqa: E731
    dictd = [("gcide", "dict-gcide", "gcide"), ("devil", "dict-devil", "devil"),
             ("jargon", "dict-jargon", "jargon"), ("foldoc", "dict-foldoc", "foldoc")]
    for source, pkg, base in dictd:
        idx, dct = R(pkg, "usr/share/dictd", base + ".index"), R(pkg, "usr/share/dictd", base + ".dict.dz")
        if os.path.exists(idx) and os.path.exists(dct):
            for d in docs_from_dict(idx, dct, source):
                yield source, d
    for d in docs_from_wordnet(R("wordnet-base", "usr/share/wordnet")):
        yield "wordnet", d
    if bible_text and os.path.exists(bible_text):
        for d in docs_from_bible(bible_text):
            yield "bible-kjv", d
    fort = []
    for pkg in ("fortunes-min", "fortunes", "fortune-anarchism", "fortunes-debian-hints"):
        fort += walk(R(pkg), r"usr/share/games/fortunes/[^/]+$")
    for d in docs_from_fortunes(fort):
        yield "fortunes", d

    py = R("python3.11-doc", "usr/share/doc/python3.11/html")
    for d in docs_from_html(walk(py, r"\.html$", r"^(_|genindex|py-modindex|search|download|bugs|copyright|license|"
                                                  r"contents|glossary)|whatsnew/changelog")):
        yield "python-doc", d
    for d in docs_from_pod(walk(R("perl-doc"), r"usr/share/perl/[^/]+/pod/[^/]+\.pod$")):
        yield "perl-doc", d
    pg = walk(R("postgresql-doc-15"), r"usr/share/doc/postgresql-doc-15/html/.*\.html$",
              r"/(bookindex|release-\d|biblio|docguide|appendix-obsolete|app-|sql-\w+\.html|catalog-|view-pg)")
    for d in docs_from_html(pg):
        yield "postgresql-doc", d
    deb = []
    deb += walk(R("debian-reference-en"), r"\.en\.html$")
    deb += walk(R("debian-handbook"), r"html/en-US/.*\.html$")
    deb += walk(R("debian-faq"), r"\.en\.html$")
    deb += walk(R("maint-guide"), r"\.en\.html$")
    deb += walk(R("developers-reference"), r"usr/share/developers-reference/[^/]+\.html$",
                r"developers-reference\.html$|genindex|search")
    deb += walk(R("debian-policy"), r"policy\.html/[^/]+\.html$|(autopkgtest|copyright-format-1\.0|"
                                    r"debconf_specification|menu-policy|perl-policy)\.html$",
                r"genindex|search|upgrading")
    deb += walk(R("harden-doc"), r"html/en-US/.*\.html$")
    deb += walk(R("debian-history"), r"docs/[^/]+\.en\.html$")
    for d in docs_from_html(deb):
        yield "debian-doc", d
    for d in docs_from_mallard(walk(R("gnome-user-docs"), r"usr/share/help/C/.*\.page$")):
        yield "gnome-help", d
    for d in docs_from_html(walk(R("git-doc"), r"usr/share/doc/git-doc/[^/]+\.html$",
                                 r"RelNotes|howto-index|cmds-|git-credential|fsck-msgids|config\.html$")):
        yield "git-doc", d
    gnu = walk(R("gnu-standards"), r"usr/share/doc/gnu-standards/.*\.html$")
    gnu += walk(R("bash-doc"), r"usr/share/doc/bash/bashref\.html$")
    for d in docs_from_html(gnu):
        yield "gnu-doc", d
    man = walk(R("manpages"), r"usr/share/man/man[1-8]/[^/]+\.gz$")
    man += walk(R("manpages-dev"), r"usr/share/man/man[23]/[^/]+\.gz$")
    for d in docs_from_man(man):
        yield "manpages", d
    for d in docs_from_html(walk(R("gimp-help-en"), r"usr/share/gimp/2\.0/help/en/.*\.html$",
                                 r"/(index|glossary|bibliography)\.html$")):
        yield "gimp-help", d
    for d in docs_from_html(walk(R("python-django-doc"), r"usr/share/doc/python-django-doc/html/.*\.html$",
                                 r"/(_modules|_sources|releases)/|genindex|search|py-modindex")):
        yield "django-doc", d
    for d in docs_from_html(walk(R("debian-edu-doc-en"), r"usr/share/doc/debian-edu-doc-en/[^/]+-manual\.html$")):
        yield "debian-doc", d
    wml = []
    for pkg in sorted(os.listdir(root)):
        if pkg.startswith("wesnoth-"):
            wml += walk(R(pkg), r"data/campaigns/.*\.cfg$")
    for d in docs_from_wml(wml):
        yield "wesnoth", d
    lx = walk(R("linux-doc-6.1"), r"usr/share/doc/linux-doc-6.1/Documentation/.*\.rst(\.gz)?$",
              r"/(translations|ABI|devicetree|output|sphinx|netlink/specs)/")
    for d in docs_from_rst(lx):
        yield "linux-doc", d


def split_long(paras, limit=MAX_DOC_CHARS):
    doc, size = [], 0
    for p in paras:
        if doc and size + len(p) > limit:
            yield doc
            doc, size = [], 0
        doc.append(p)
        size += len(p) + 2
    if doc:
        yield doc


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", required=True, help="folder holding one extracted package per subfolder")
    ap.add_argument("--out", required=True)
    ap.add_argument("--bible-text", default=None, help="KJV text from the bible-kjv program, one verse a line")
    ap.add_argument("--scale", type=float, default=1.0, help="multiplies every per-source cap")
    ap.add_argument("--no-xz", action="store_true", help="write train.txt instead of train.txt.xz")
    args = ap.parse_args()

    seen_para, seen_doc = set(), set()
    last_source = None
    by_source = {}
    stats = {}
    for source, paras in source_docs(args.root, args.bible_text):
        kept = []
        for p in paras:
            p = p.replace("\n\n", "\n").strip("\n")
            key = hashlib.sha1(re.sub(r"\s+", " ", p.lower()).encode()).digest()
            if key in seen_para and len(p) > 40:
                continue
            seen_para.add(key)
            kept.append(p)
        # a document must hold some prose beyond headings
        if sum(len(p) for p in kept) < 200:
            continue
        for doc in split_long(kept):
            text = "\n\n".join(doc)
            if len(text) < 200:
                continue
            dk = hashlib.sha1(text.encode()).digest()
            if dk in seen_doc:
                continue
            seen_doc.add(dk)
            by_source.setdefault(source, []).append(text)
        if source != last_source:
            print(f"  reading {source}", file=sys.stderr)
            last_source = source

    docs = []
    rng = random.Random(SEED)
    for source in sorted(by_source):
        items = by_source[source]
        total = sum(len(t.encode()) for t in items)
        cap = int(CAPS_MB.get(source, 2.0) * args.scale * 1e6)
        if total > cap:
            order = list(range(len(items)))
            rng.shuffle(order)
            chosen, size = [], 0
            for i in order:
                if size >= cap:
                    break
                chosen.append(i)
                size += len(items[i].encode())
            items = [items[i] for i in sorted(chosen)]
        nbytes = sum(len(t.encode()) for t in items)
        stats[source] = {"docs": len(items), "bytes": nbytes, "bytes_before_cap": total}
        docs += [(source, t) for t in items]
        print(f"  {source:16s} {len(items):7d} docs {nbytes / 1e6:8.2f} MB (of {total / 1e6:.2f} MB)", file=sys.stderr)

    rng = random.Random(SEED)
    rng.shuffle(docs)
    train = [t for i, (_, t) in enumerate(docs) if i % VALID_EVERY != VALID_EVERY - 1]
    valid = [t for i, (_, t) in enumerate(docs) if i % VALID_EVERY == VALID_EVERY - 1]
    for t in train + valid:
        assert "\n\n\n" not in t
    os.makedirs(args.out, exist_ok=True)
    train_text = "\n\n\n".join(train) + "\n"
    valid_text = "\n\n\n".join(valid) + "\n"
    outputs = {}
    vpath = os.path.join(args.out, "valid.txt")
    with open(vpath, "w", encoding="utf-8", newline="\n") as f:
        f.write(valid_text)
    outputs["valid.txt"] = valid_text.encode()
    for stale in ("train.txt", "train.txt.xz"):
        if os.path.exists(os.path.join(args.out, stale)):
            os.remove(os.path.join(args.out, stale))
    if args.no_xz:
        tpath = os.path.join(args.out, "train.txt")
        with open(tpath, "w", encoding="utf-8", newline="\n") as f:
            f.write(train_text)
    else:
        tpath = os.path.join(args.out, "train.txt.xz")
        with lzma.open(tpath, "wb", preset=6) as f:
            f.write(train_text.encode())
    manifest = {
        "recipe_version": RECIPE_VERSION,
        "seed": SEED,
        "format": "UTF-8; paragraphs separated by \\n\\n, documents by \\n\\n\\n",
        "sources": stats,
        "train": {"file": os.path.basename(tpath), "docs": len(train), "text_bytes": len(train_text.encode()),
                  "file_bytes": os.path.getsize(tpath),
                  "text_sha256": hashlib.sha256(train_text.encode()).hexdigest()},
        "valid": {"file": "valid.txt", "docs": len(valid), "text_bytes": len(valid_text.encode()),
                  "text_sha256": hashlib.sha256(valid_text.encode()).hexdigest()},
    }
    with open(os.path.join(args.out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    print(json.dumps({k: manifest[k] for k in ("train", "valid")}, indent=1))


if __name__ == "__main__":
    main()
