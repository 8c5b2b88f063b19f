"""Duplicated code in the tree: pairs of places that share six or more lines alike, names aside.

Each Python file is read with ``tokenize``; blank lines, comments, docstrings (string-only statements), imports,
signatures (``def``, ``class``, decorators) and lines of punctuation alone are passed over. Each line left has a
shape: a name that is not a keyword, a string and a number each one symbol, keywords and operators as they are.
Windows of six consecutive shapes are hashed; equal windows on the same diagonal of two places merge into a maximal
run. A window found in more than eight places is an idiom, not a copy; a pair is boilerplate when most of its lines
are thin (``else:``, ``return x``, ``name=name,``: at most one name or value, or two with punctuation alone) or when
it is a table (no more distinct shapes than half its lines). Two files sharing several runs are one pair (its longest
run named). One pass over the tokens, one over the windows: linear. ``python -m testbed.duplicates`` lists the tree's.
"""

from __future__ import annotations

import io
import keyword
import token
import tokenize
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

MIN_LINES = 6
# A run found in more places than this is a common idiom (a fixture's teardown, a server's start), not a copy.
MOST_PLACES = 8
# A pair is boilerplate above this share of thin lines, or at or below this share of distinct shapes (a table).
THIN_SHARE = 0.5
VARIETY = 0.5
# A thin line: this many names or values at the most, or MAX_PLAIN_ATOMS where its operators are PUNCTUATION alone.
MAX_THIN_ATOMS = 1
MAX_PLAIN_ATOMS = 2
PUNCTUATION = {",", ":", "(", ")", "[", "]", "{", "}", "=", ";"}
TREE_FOLDERS = ("kftrain", "components", "pipelines", "testbed", "tests", "bench", "examples", "containers", "scripts")
# Python 3.12 splits an f-string into parts (tokenize's FSTRING_START ... FSTRING_END); the whole is one string.
FSTRING_START = getattr(token, "FSTRING_START", None)
FSTRING_END = getattr(token, "FSTRING_END", None)
SKIPPED = {token.NEWLINE, token.NL, token.INDENT, token.DEDENT, token.COMMENT, token.ENDMARKER, token.ENCODING}


@dataclass(frozen=True)
class Line:
    """A kept line: its number in the file, its shape, its text with white space folded, and whether it is thin."""

    number: int
    shape: str
    text: str
    thin: bool


@dataclass(frozen=True)
class Pair:
    """Two places that share a run of lines: ``a`` lines ``a_lines``, ``b`` lines ``b_lines`` (first, last)."""

    a: str
    a_lines: tuple[int, int]
    b: str
    b_lines: tuple[int, int]
    shared: int
    identical: bool
    boilerplate: bool
    more_runs: int = 0

    def __str__(self) -> str:
        row = f"{self.a}:{self.a_lines[0]}-{self.a_lines[1]} ~ {self.b}:{self.b_lines[0]}-{self.b_lines[1]}"
        notes = ([] if self.identical else ["shape"]) + (["boilerplate"] if self.boilerplate else [])
        if self.more_runs:
            notes.append(f"(+{self.more_runs} more run{'s' if self.more_runs > 1 else ''})")
        return " ".join([row, *notes])


# A token as a line's shape reads it: (its row, its text, its symbol, its kind).
Token = tuple[int, str, str, int]
ATOM, KEYWORD, OPERATOR, OTHER = range(4)


def statements(source: str) -> Iterator[list[Token]]:
    """The tokens of each logical line (statement), white space and comments left out; a name that is not a
    keyword stands as ``N``, a string as ``S``, a number as ``0``."""
    tokens: list[Token] = []
    depth = 0
    for kind, text, (row, _), _, _ in tokenize.generate_tokens(io.StringIO(source).readline):
        if depth or kind in (FSTRING_START, FSTRING_END):
            if kind == FSTRING_START:
                depth += 1
                if depth == 1:
                    tokens.append((row, text, "S", ATOM))
            elif kind == FSTRING_END:
                depth -= 1
        elif kind == token.NAME:
            tokens.append((row, text, text, KEYWORD) if keyword.iskeyword(text) else (row, text, "N", ATOM))
        elif kind == token.OP:
            tokens.append((row, text, text, OPERATOR))
        elif kind == token.STRING:
            tokens.append((row, text, "S", ATOM))
        elif kind == token.NUMBER:
            tokens.append((row, text, "0", ATOM))
        elif kind == token.NEWLINE or kind == token.ENDMARKER:
            if tokens:
                yield tokens
            tokens = []
        elif kind not in SKIPPED:
            tokens.append((row, text, text, OTHER))
    if tokens:
        yield tokens


def passed_over(tokens: list[Token]) -> bool:
    """A docstring or any string-only statement, an import, or a signature (``def``, ``class``, a decorator)."""
    first = tokens[0][1]
    if first in ("import", "from", "def", "class", "@") or (first == "async" and tokens[1:2] and tokens[1][1] == "def"):
        return True
    return all(symbol == "S" for _, _, symbol, _ in tokens)


def kept_lines(source: str) -> list[Line]:
    """The lines that count, one per physical line that holds a token of a counted statement."""
    by_row: dict[int, list[Token]] = defaultdict(list)
    for tokens in statements(source):
        if not passed_over(tokens):
            for tok in tokens:
                by_row[tok[0]].append(tok)
    lines = []
    for row in sorted(by_row):
        tokens = by_row[row]
        kinds = [kind for _, _, _, kind in tokens]
        atoms = kinds.count(ATOM)
        if atoms == 0 and kinds.count(OPERATOR) == len(kinds):
            continue  # punctuation alone: ``)``, ``],``
        shape = " ".join([symbol for _, _, symbol, _ in tokens])
        text = " ".join([text for _, text, _, _ in tokens])
        plain = all(kind != OPERATOR or part in PUNCTUATION for _, part, _, kind in tokens)
        thin = atoms <= MAX_THIN_ATOMS or (plain and atoms <= MAX_PLAIN_ATOMS)
        lines.append(Line(row, shape, text, thin))
    return lines


def windows(lines: list[Line], size: int) -> Iterator[tuple[int, int]]:
    """(start, hash) of each window of ``size`` consecutive lines."""
    for start in range(len(lines) - size + 1):
        yield start, hash(tuple(line.shape for line in lines[start : start + size]))


def find_pairs(files: dict[str, list[Line]], size: int = MIN_LINES, most: int = MOST_PLACES) -> list[Pair]:
    """Every pair of places sharing ``size`` or more lines alike, most shared first; one row per pair of files (the
    longest run, with how many more the two files share)."""
    places: dict[int, list[tuple[str, int]]] = defaultdict(list)
    for name, lines in files.items():
        for start, digest in windows(lines, size):
            places[digest].append((name, start))
    # diagonal (file a, file b, offset b - a) -> the window starts in a that match there
    diagonals: dict[tuple[str, str, int], list[int]] = defaultdict(list)
    for found in places.values():
        if len(found) < 2 or len(found) > most:
            continue
        for i, (a, start_a) in enumerate(found):
            for b, start_b in found[i + 1 :]:
                if a == b and abs(start_b - start_a) < size:
                    continue  # a run overlapping itself is repetition, not a copy
                diagonals[(a, b, start_b - start_a)].append(start_a)
    runs: dict[tuple[str, str], list[Pair]] = defaultdict(list)
    for (a, b, offset), starts in diagonals.items():
        for first, last in merged(sorted(starts)):
            runs[(a, b)].append(run_pair(files, a, b, (first, last + size - 1), offset))
    pairs = []
    for found_runs in runs.values():
        best = max(found_runs, key=lambda pair: (pair.shared, pair.identical))
        pairs.append(Pair(**{**best.__dict__, "more_runs": len(found_runs) - 1}))
    return sorted(pairs, key=lambda pair: (pair.boilerplate, -pair.shared, pair.a, pair.a_lines))


def merged(starts: list[int]) -> Iterator[tuple[int, int]]:
    """Consecutive window starts joined into (first, last) spans."""
    first = last = starts[0]
    for start in starts[1:]:
        if start != last + 1:
            yield first, last
            first = start
        last = start
    yield first, last


def run_pair(files: dict[str, list[Line]], a: str, b: str, span: tuple[int, int], offset: int) -> Pair:
    """The pair for kept lines ``span`` of ``a`` and the same lines moved by ``offset`` in ``b``."""
    first, last = span
    lines_a = files[a][first : last + 1]
    lines_b = files[b][first + offset : last + offset + 1]
    identical = all(x.text == y.text for x, y in zip(lines_a, lines_b, strict=True))
    thin = sum(1 for x, y in zip(lines_a, lines_b, strict=True) if x.thin and y.thin)
    varied = len({line.shape for line in lines_a}) > VARIETY * len(lines_a)
    return Pair(
        a=a,
        a_lines=(lines_a[0].number, lines_a[-1].number),
        b=b,
        b_lines=(lines_b[0].number, lines_b[-1].number),
        shared=len(lines_a),
        identical=identical,
        boilerplate=thin > THIN_SHARE * len(lines_a) or not varied,
    )


def scan(root: Path, paths: Iterable[Path], size: int = MIN_LINES) -> list[Pair]:
    """The pairs among ``paths``, named relative to ``root``."""
    files = {}
    for path in paths:
        try:
            files[str(path.relative_to(root))] = kept_lines(path.read_text(encoding="utf-8"))
        except (SyntaxError, tokenize.TokenError) as error:
            raise ValueError(f"{path}: not Python that tokenize reads: {error}") from error
    return find_pairs(files, size)


def counted(pairs: Iterable[Pair]) -> list[Pair]:
    """The pairs that count against the tree's limit: boilerplate aside."""
    return [pair for pair in pairs if not pair.boilerplate]


def tree_files(root: Path) -> list[Path]:
    """The Python files of the tree: the packages, the tests, the testbed, the benchmarks and the examples."""
    top = sorted(root.glob("*.py"))
    return top + [path for folder in TREE_FOLDERS for path in sorted((root / folder).rglob("*.py"))]


def main() -> None:
    from testbed import REPO_ROOT

    pairs = scan(REPO_ROOT, tree_files(REPO_ROOT))
    print(f"{len(counted(pairs))} pairs counted, {len(pairs) - len(counted(pairs))} boilerplate")
    for pair in pairs:
        print(pair)


if __name__ == "__main__":
    main()
