"""The prompts whose answers the target writes for its own head (self-distillation).

Written here from templates and word lists, in the kinds the page is used for (code, edits of given
code, prose, SQL, JSON, translation), and never the bench prompts, the example prompts, the held-out
prompts or the tests' prompts: acceptance is measured on those (tests/test_head_train.py checks that
none of them appears here). Edit prompts take their code from functions of the installed packages
(specdec/train/corpus.py), so they vary as much as that code does.

Two versions (the recipe's `prompts`, recorded in the working folder and the head file, since it
decides the held-out set too):
- 1: the templates and word lists alone: 9 SQL tasks, 48 sentences to translate. The shipped head's data.
- 2: also tasks made from the installed packages' own text (`Material`): a function to write from a
  public function's signature and the first sentence of its docstring, sentences of the packages'
  docs to translate, and SQL tasks over schemas generated from a list of tables. Written for the
  held-out figures' gap: a head that saw a few dozen SQL and translation prompts drafts well on
  those, not on the next ones.
"""

from __future__ import annotations

import ast
import random
import textwrap

from specdec.train.prompt_material import Material

FUNCTIONS = [
    ("is_palindrome(text: str) -> bool", "tells whether a string reads the same backwards, ignoring case and spaces"),
    ("flatten(items: list) -> list", "flattens arbitrarily nested lists"),
    ("chunked(items: list, size: int) -> list[list]", "splits a list into consecutive pieces of at most `size` items"),
    ("word_counts(text: str) -> dict[str, int]", "counts how often each word occurs, case-insensitively"),
    ("parse_duration(text: str) -> int", "turns strings like '1h30m' or '45s' into a number of seconds"),
    ("roman_to_int(numeral: str) -> int", "converts a Roman numeral to an integer"),
    ("binary_search(items: list[int], target: int) -> int", "returns the index of `target` in a sorted list, or -1"),
    ("moving_average(values: list[float], window: int) -> list[float]", "computes the moving average over a window"),
    ("dedupe(items: list) -> list", "removes duplicates while keeping the first occurrence's order"),
    ("transpose(matrix: list[list[int]]) -> list[list[int]]", "transposes a rectangular matrix"),
    ("slugify(title: str) -> str", "turns a title into a lowercase URL slug with hyphens"),
    ("gcd(a: int, b: int) -> int", "computes the greatest common divisor with Euclid's algorithm"),
    ("primes_below(n: int) -> list[int]", "returns every prime below n with the sieve of Eratosthenes"),
    ("rotate(items: list, k: int) -> list", "rotates a list to the right by k places"),
    ("camel_to_snake(name: str) -> str", "converts camelCase names to snake_case"),
    ("top_k(counts: dict[str, int], k: int) -> list[str]", "returns the k keys with the largest counts"),
    ("read_csv_rows(path: str) -> list[dict]", "reads a CSV file with a header into a list of dicts"),
    ("fibonacci(n: int) -> list[int]", "returns the first n Fibonacci numbers"),
    ("matrix_multiply(a: list[list[float]], b: list[list[float]]) -> list[list[float]]", "multiplies two matrices"),
    ("valid_brackets(text: str) -> bool", "checks that (), [] and {} are balanced"),
    ("run_length(text: str) -> str", "run-length encodes a string, e.g. 'aaab' -> 'a3b1'"),
    ("group_by(items: list[dict], key: str) -> dict", "groups dicts by the value of one key"),
    ("median(values: list[float]) -> float", "returns the median of a non-empty list"),
    ("retry(func, attempts: int, delay: float)", "calls func until it succeeds, sleeping between attempts"),
    ("lru_cache_dict(capacity: int)", "implements a tiny LRU cache class with get and put"),
    ("merge_sorted(a: list[int], b: list[int]) -> list[int]", "merges two sorted lists into one sorted list"),
    ("anagrams(words: list[str]) -> list[list[str]]", "groups words that are anagrams of each other"),
    ("to_base(n: int, base: int) -> str", "writes a non-negative integer in any base from 2 to 36"),
    ("count_lines(path: str) -> int", "counts the non-empty lines of a text file"),
    ("clamp(value: float, low: float, high: float) -> float", "limits a value to a range"),
]
LANGUAGES = ["Python", "Python", "Python", "JavaScript", "TypeScript", "Go", "Rust", "Bash"]
CODE_TEMPLATES = [
    "Write a {lang} function `{sig}` that {task}.",
    "Write a {lang} function `{sig}` that {task}. Include a short docstring or comment.",
    "Implement `{sig}` in {lang}: it {task}. Add one usage example.",
    "In {lang}, write `{sig}`, which {task}. Keep it short and readable.",
]
EDIT_TEMPLATES = [
    "Add type hints to this function. Reply with only the code.\n\n```python\n{code}\n```",
    "Write a docstring for this function and reply with the whole function.\n\n```python\n{code}\n```",
    "Explain in three sentences what this code does.\n\n```python\n{code}\n```",
    "Write two pytest tests for this function.\n\n```python\n{code}\n```",
    "Rename the variable `{old}` to `{new}` in this code. Change nothing else and reply with only the code.\n\n```python\n{code}\n```",
    "Find a possible bug or edge case in this function and show the fixed version.\n\n```python\n{code}\n```",
]
CONCEPTS = [
    "a binary search tree", "recursion", "a race condition", "garbage collection", "a linked list", "Big-O notation",
    "a REST API", "a database index", "a mutex", "dynamic programming", "a closure", "the call stack",
    "a cache miss", "floating-point rounding", "version control", "a unit test", "a virtual machine", "a compiler",
    "a queue versus a stack", "public-key cryptography", "a memory leak", "an operating system's scheduler",
    "a regular expression", "an HTTP cookie", "a Python generator", "a decorator", "type inference", "a deadlock",
    "a bloom filter", "TCP versus UDP", "a B-tree", "lazy evaluation", "continuous integration", "a neural network",
]
AUDIENCES = ["a first-year student", "a new colleague", "a child of twelve", "a manager", "an experienced Java developer"]
PROSE_TEMPLATES = [
    "Explain {concept} to {audience} in one short paragraph.",
    "What is {concept}? Answer for {audience}, with one small example.",
    "Give three bullet points on when to use {concept}.",
]
SCHEMAS = [
    ("`books(id, title, author_id, year)` and `authors(id, name, born)`",
     ["List each author with their number of books", "Find the books published before the author was 30",
      "Show the three most recent books with their author's name"]),
    ("`employees(id, name, dept, salary, manager_id)`",
     ["Find the highest paid employee of each department", "List employees who earn more than their manager",
      "Give the average salary per department, highest first"]),
    ("`sensors(id, site)` and `readings(sensor_id, taken_at, value)`",
     ["Find each site's daily maximum reading", "List sensors without a reading in the last 7 days",
      "Count readings per sensor in March 2023"]),
]
SENTENCES = [
    "Please restart the server after you change the configuration file.",
    "The new release fixes a crash that happened when the disk was full.",
    "Our meeting is moved to Thursday at ten in the small room.",
    "Write short functions and give every variable a clear name.",
    "The report shows that most users open the app in the evening.",
    "Back up your files before you upgrade the operating system.",
    "The library reads the data lazily, so large files use little memory.",
    "Thank you for the quick review; I will merge the change tomorrow.",
]
TARGET_LANGUAGES = ["German", "Spanish", "Italian", "Portuguese", "Dutch", "French"]
NAMES = ["alice", "bob", "chen", "dana", "emil", "fatima", "goran", "hana", "ivan", "julia"]


def functions_of(text: str, limit: int = 4) -> list[str]:
    """Up to `limit` top-level functions of 4 to 25 lines from Python source, as written."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return []
    lines = text.splitlines()
    found = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and 4 <= node.end_lineno - node.lineno + 1 <= 25:
            found.append(textwrap.dedent("\n".join(lines[node.lineno - 1 : node.end_lineno])))
        if len(found) >= limit:
            break
    return found


def _edit_prompt(rng: random.Random, code: str) -> str:
    template = rng.choice(EDIT_TEMPLATES)
    if "{old}" in template:
        tree = ast.parse(code)
        names = sorted({n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
                       | {a.arg for a in ast.walk(tree) if isinstance(a, ast.arg) and a.arg not in ("self", "cls")})
        if not names:
            template = EDIT_TEMPLATES[0]
        else:
            old = rng.choice(names)
            return template.format(code=code, old=old, new=f"{old}_{rng.choice(['value', 'item', 'data'])}")
    return template.format(code=code)


def _json_prompt(rng: random.Random) -> str:
    import json

    people = [{"id": rng.randint(1, 999), "name": n.title(), "team": rng.choice(["red", "blue", "green"]),
               "score": rng.randint(0, 100)} for n in rng.sample(NAMES, 3)]
    task = rng.choice(["Sort this list by `score`, highest first", "Group these people by `team`",
                       "Turn this list into a CSV table with a header row", "Keep only the people with a score above 50"])
    return f"{task}. Reply with only the result.\n\n```json\n{json.dumps(people, indent=2)}\n```"


DOCSTRING_TEMPLATES = [
    "Write a Python function `{sig}`. Its docstring says: \"{doc}.\"",
    "Implement `{sig}` in Python so that it does what its docstring says: \"{doc}.\"",
    "Write `{sig}` in Python, with a short docstring. What it does: {doc}.",
]
# Tables for generated SQL schemas: name -> columns (the first is its key; *_id columns refer to the table
# they name; numeric and date columns are named so that the tasks can tell them apart).
TABLES = {
    "clients": ["id", "name", "city", "joined_on"],
    "invoices": ["id", "clients_id", "amount", "issued_on"],
    "products": ["id", "name", "category", "price"],
    "shipments": ["id", "products_id", "quantity", "shipped_on"],
    "students": ["id", "name", "cohort", "enrolled_on"],
    "exams": ["id", "students_id", "score", "taken_on"],
    "flights": ["id", "origin", "destination", "seats"],
    "bookings": ["id", "flights_id", "price", "booked_on"],
    "repositories": ["id", "name", "language", "created_on"],
    "commits": ["id", "repositories_id", "additions", "committed_on"],
    "warehouses": ["id", "name", "region", "opened_on"],
    "stock": ["id", "warehouses_id", "units", "counted_on"],
}
NUMERIC = ("amount", "price", "quantity", "score", "seats", "additions", "units")
SQL_TASKS = [
    "List each row of `{parent}` with the number of its `{child}`, most first",
    "Find the `{parent}` that have no `{child}`",
    "Find the `{parent}` that have no `{child}` since {year}",
    "Show the {n} `{parent}` with the highest total `{num}` of their `{child}`",
    "Show the {n} `{parent}` with the highest total `{num}` of their `{child}` in {year}",
    "Give the average `{num}` of `{child}` per month of `{date}` in {year}, oldest month first",
    "Count the `{child}` per `{parent}`.`{group}`",
    "Count the `{child}` per `{parent}`.`{group}` in {year}, largest count first",
    "List the `{child}` whose `{num}` is above the average of their `{parent}`",
    "Find the first `{child}` of each `{parent}` by `{date}`",
    "Find the `{parent}` whose `{child}` had a total `{num}` above {limit} in {year}",
    "For each `{parent}`.`{group}`, show the largest `{num}` of a single row of `{child}`",
]


def _docstring_prompt(rng: random.Random, tasks: list[tuple[str, str]]) -> str | None:
    if not tasks:
        return None
    signature, doc = rng.choice(tasks)
    return rng.choice(DOCSTRING_TEMPLATES).format(sig=signature, doc=doc)


def _schema_prompt(rng: random.Random) -> str:
    """An SQL task over two generated tables, a parent and a child whose `<parent>_id` refers to it."""
    child = rng.choice([name for name, columns in TABLES.items() if columns[1].endswith("_id")])
    columns = TABLES[child]
    parent = columns[1].removesuffix("_id")
    num = next(c for c in columns if c in NUMERIC)
    date = next(c for c in columns if c.endswith("_on"))
    schema = " and ".join(f"`{name}({', '.join(TABLES[name])})`" for name in (parent, child))
    task = rng.choice(SQL_TASKS).format(parent=parent, child=child, num=num, date=date, group=TABLES[parent][2], n=rng.choice([3, 5, 10]),
                                      year=rng.randint(2019, 2025), limit=rng.choice([100, 500, 1000, 5000]))
    return f"Write an SQL query. Tables: {schema}. {task}."


def _translation_prompt(rng: random.Random, sentences: list[str]) -> str:
    pool = sentences if sentences and rng.random() < 0.75 else SENTENCES
    return f"Translate into {rng.choice(TARGET_LANGUAGES)}:\n\n" + " ".join(rng.sample(pool, min(2, len(pool))))


KINDS = ("code", "edit", "prose", "sql", "json", "translation")  # the kinds written, in the makers' order


def written_prompts(seed: int, count: int, snippets: list[str], version: int = 1, material: Material | None = None) -> list[str]:
    """`count` prompts in the seed's order, every kind mixed; `snippets`: code for the edit prompts."""
    return [prompt for _, prompt in written(seed, count, snippets, version, material)]


def written(seed: int, count: int, snippets: list[str], version: int = 1, material: Material | None = None) -> list[tuple[str, str]]:
    """(kind, prompt) for written_prompts' prompts, in the same order: the figures per kind of text.
    version: 1 or 2 (module docstring); material: what version 2 takes from the installed text."""
    if version not in (1, 2):
        raise ValueError(f"the written prompts have versions 1 and 2, not {version}")
    rng = random.Random(seed)
    makers = [
        lambda: rng.choice(CODE_TEMPLATES).format(lang=rng.choice(LANGUAGES), **dict(zip(("sig", "task"), rng.choice(FUNCTIONS)))),
        lambda: _edit_prompt(rng, rng.choice(snippets)) if snippets else None,
        lambda: rng.choice(PROSE_TEMPLATES).format(concept=rng.choice(CONCEPTS), audience=rng.choice(AUDIENCES)),
        lambda: (lambda s: f"Write an SQL query. Tables: {s[0]}. {rng.choice(s[1])}.")(rng.choice(SCHEMAS)),
        lambda: _json_prompt(rng),
        lambda: f"Translate into {rng.choice(TARGET_LANGUAGES)}:\n\n" + " ".join(rng.sample(SENTENCES, 2)),
    ]
    kinds, weights = list(KINDS), [4, 3, 2, 1, 1, 1]  # code first: it is what this pair is for
    if version == 2:
        material = material or Material()
        makers += [lambda: _docstring_prompt(rng, material.tasks), lambda: _schema_prompt(rng),
                   lambda: _translation_prompt(rng, material.sentences)]
        kinds += ["code", "sql", "translation"]
        weights = [2, 3, 2, 1, 1, 1, 2, 1, 2]  # as many code prompts, and three times the SQL and translation
    out, seen = [], set()
    while len(out) < count and len(seen) < 50 * count:
        kind = rng.choices(range(len(makers)), weights)[0]
        prompt = makers[kind]()
        if prompt and prompt not in seen:
            seen.add(prompt)
            out.append((kinds[kind], prompt))
        elif prompt:
            seen.add(prompt + str(len(seen)))  # count a repeat so a small pool cannot loop forever
    return out
