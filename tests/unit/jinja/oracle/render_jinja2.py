"""Renders the corpus with Python's Jinja2, configured as Hugging Face transformers configures it for
chat templates (sandboxed, trim_blocks, lstrip_blocks, loop controls, {% generation %} blocks, a tojson
without HTML escaping, raise_exception and strftime_now). It writes the same layout as render.mjs, so the two oracles can be
diffed against each other and against expected/.

Usage: python3 render_jinja2.py <corpus dir> <output dir>
"""
import datetime
import json
import shutil
import sys
from pathlib import Path

from jinja2 import TemplateError
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


class GenerationBlock(Extension):
    """{% generation %}...{% endgeneration %}: transformers marks assistant text this way to build an
    assistant-token mask; for rendering, the block is just its body."""

    tags = {"generation"}

    def parse(self, parser):
        next(parser.stream)
        return parser.parse_statements(("name:endgeneration",), drop_needle=True)


def make_environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[loopcontrols, GenerationBlock])

    def tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def raise_exception(message):
        raise TemplateError(message)

    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
    return env


def main(corpus_dir, out_dir):
    corpus, out = Path(corpus_dir), Path(out_dir)
    env = make_environment()
    tokens = json.loads((corpus / "special_tokens.json").read_text(encoding="utf-8"))
    shutil.rmtree(out, ignore_errors=True)
    rendered = raised = 0
    conversations = sorted((corpus / "conversations").glob("*.json"))
    for template_path in sorted((corpus / "templates").glob("*.jinja")):
        template = env.from_string(template_path.read_text(encoding="utf-8"))
        (out / template_path.stem).mkdir(parents=True)
        for conversation_path in conversations:
            conversation = json.loads(conversation_path.read_text(encoding="utf-8"))
            for generation_prompt in (False, True):
                context = dict(conversation.get("extra", {}))
                context.update(messages=conversation["messages"], tools=conversation.get("tools"),
                               add_generation_prompt=generation_prompt, **tokens)
                suffix = "gen-on" if generation_prompt else "gen-off"
                stem = out / template_path.stem / f"{conversation_path.stem}.{suffix}"
                try:
                    Path(f"{stem}.txt").write_bytes(template.render(**context).encode("utf-8"))
                    rendered += 1
                except TemplateError as error:
                    Path(f"{stem}.error.txt").write_bytes(str(error.message).encode("utf-8"))
                    raised += 1
    print(f"{rendered} rendered, {raised} raised")


if __name__ == "__main__":
    main(*sys.argv[1:3])
