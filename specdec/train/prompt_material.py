"""What version 2 of the written prompts (specdec/train/prompts.py) takes from the installed text.

From the training documents (specdec/train/corpus.py; never the held-out ones): the signature and
the first docstring sentence of public functions, which become functions to write, and plain
sentences of docstrings and docs, which become text to translate. Only text a person wrote and that
reads as one plain sentence is kept: no markup, no code, no links.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field


@dataclass
class Material:
    """What version 2's prompts take from the training documents (never the held-out ones)."""

    tasks: list[tuple[str, str]] = field(default_factory=list)  # (signature, the first sentence of its docstring)
    sentences: list[str] = field(default_factory=list)  # plain sentences of the packages' docs

    def add(self, name: str, text: str) -> None:
        if name.endswith(".py"):
            try:
                tree = ast.parse(text)  # once for both: parsing is most of the time this takes
            except (SyntaxError, ValueError):
                return
            self.tasks += docstring_tasks(tree)
            self.sentences += plain_sentences("\n\n".join(docstrings(tree)), limit=2)
        elif name.endswith((".md", ".rst", ".txt")):
            self.sentences += plain_sentences(text)


def docstrings(tree: ast.Module) -> list[str]:
    """Every docstring of parsed Python source (the module's, its classes' and functions'): prose the
    packages' authors wrote, the most of it there is on a machine with few docs files."""
    nodes = [node for node in ast.walk(tree) if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))]
    return [doc for doc in map(ast.get_docstring, nodes) if doc]


def docstring_tasks(tree: ast.Module, limit: int = 4) -> list[tuple[str, str]]:
    """(signature, first sentence of its docstring) of up to `limit` public top-level functions of parsed
    Python source: a short signature, and a sentence of 4 to 30 words of plain text (no markup, no code)."""
    found = []
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef) or node.name.startswith("_"):
            continue
        doc = (ast.get_docstring(node) or "").split("\n\n")[0].replace("\n", " ").strip()
        sentence = doc.split(". ")[0].rstrip(".").strip()
        signature = f"{node.name}({ast.unparse(node.args)})" + (f" -> {ast.unparse(node.returns)}" if node.returns else "")
        if 4 <= len(sentence.split()) <= 30 and re.fullmatch(r"[A-Za-z0-9 ,;'()/-]+", sentence) and len(signature) <= 90:
            found.append((signature, sentence))
        if len(found) >= limit:
            break
    return found


def plain_sentences(text: str, limit: int = 6) -> list[str]:
    """Up to `limit` sentences of prose from a document: 8 to 25 words of letters, digits and common
    punctuation, from lines that are not headings, lists, tables, code or directives."""
    markup = ("    ", "\t", "#", "..", "*", "-", "|", ">", "=", "`", ":", "[", "!", "<")
    flat = " ".join(line.strip() for line in text.splitlines() if line.strip() and not line.startswith(markup))
    found = []
    for sentence in re.split(r"(?<=[.!?])\s+", flat):
        if 8 <= len(sentence.split()) <= 25 and sentence[:1].isupper() and re.fullmatch(r"[A-Za-z0-9 ,;:'\"()/-]+[.!?]", sentence):
            found.append(sentence)
        if len(found) >= limit:
            break
    return found
