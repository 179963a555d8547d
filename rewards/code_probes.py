"""Tests split into probes: the parts that need the graded program, and the rest, which does not.

A probe is a maximal chain of calls, attributes and subscripts rooted at a name the program
defines (`f(2)`, `Pair(5, 24).x`, `max_chain_length([Pair(5, 24)], 4)`): it runs in the program's
process, with only its inputs. Everything around it (`== 4`, `math.isclose(..., 28.27)`,
`set(...) == set((4, 5))`) runs in the judge, a process that never ran the program, with the
probe's value substituted. A name is the program's when the test uses it without binding it and it
is neither a builtin nor bound by the test's set-up code. Names the test binds itself (a
comprehension's variable) travel to the program with the probe, as values.

In the judge, each probe becomes `_probe(SOURCE, {name: value, ...})` (`rewrite`); with `record`,
every simple statement of the test (and of the bodies of the functions it defines, such as
`check`) is wrapped so that a probe not answered yet lets the rest run on, so one judge run
collects every probe whose inputs do not depend on another probe's value.
"""

from __future__ import annotations

import ast
import builtins
from dataclasses import dataclass

PROBE = "_probe"
PENDING = "_Pending"
BUILTIN_NAMES = frozenset(dir(builtins))


def bound_names(tree: ast.AST) -> set[str]:
    """Every name `tree` binds anywhere: assignments, defs, classes, imports, loop and `with`
    targets, comprehension variables, arguments, `except ... as`."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
    return names


def _chain_root(node: ast.AST) -> ast.AST:
    while isinstance(node, (ast.Call, ast.Attribute, ast.Subscript)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node


@dataclass(frozen=True)
class Rewritten:
    """A test's source for the judge, and the probes whose inputs are known without running it."""

    source: str
    static_probes: tuple[str, ...]  # probes that take no value from the test (keys of `probe_key`)
    dynamic: bool  # some probe takes a value the test computes: the judge must find its inputs


class _ProbeRewriter(ast.NodeTransformer):
    def __init__(self, program_names: set[str], local_names: set[str]) -> None:
        self.program_names, self.local_names = program_names, local_names
        self.static: list[str] = []
        self.dynamic = False

    def _is_probe(self, node: ast.AST) -> bool:
        root = _chain_root(node)
        return isinstance(root, ast.Name) and root.id in self.program_names

    def visit(self, node: ast.AST) -> ast.AST:
        if isinstance(node, (ast.Call, ast.Attribute, ast.Subscript, ast.Name)) and self._is_probe(node):
            if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
                return node
            return self._probe(node)
        return self.generic_visit(node)

    def _probe(self, node: ast.expr) -> ast.expr:
        used = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        bindings = sorted(used & self.local_names)
        source = ast.unparse(node)
        if bindings:
            self.dynamic = True
        else:
            self.static.append(source)
        scope = ast.Dict(
            keys=[ast.Constant(name) for name in bindings],
            values=[ast.Name(name, ast.Load()) for name in bindings],
        )
        return ast.copy_location(
            ast.Call(ast.Name(PROBE, ast.Load()), [ast.Constant(source), scope], []), node
        )


class _RecordWrapper(ast.NodeTransformer):
    """Each simple statement in `try: ... except (_Pending, Exception): pass`."""

    COMPOUND = (ast.For, ast.AsyncFor, ast.While, ast.If, ast.With, ast.AsyncWith, ast.Try, ast.FunctionDef,
                ast.AsyncFunctionDef, ast.ClassDef)  # fmt: skip

    def _wrap(self, body: list[ast.stmt]) -> list[ast.stmt]:
        wrapped: list[ast.stmt] = []
        for stmt in body:
            if isinstance(stmt, self.COMPOUND):
                wrapped.append(self.visit(stmt))
            elif isinstance(stmt, (ast.Return, ast.Break, ast.Continue, ast.Global, ast.Nonlocal, ast.Pass)):
                wrapped.append(stmt)
            else:
                caught = ast.Tuple(
                    [ast.Name(PENDING, ast.Load()), ast.Name("Exception", ast.Load())], ast.Load()
                )
                handler = ast.ExceptHandler(type=caught, name=None, body=[ast.Pass()])
                wrapped.append(ast.Try(body=[stmt], handlers=[handler], orelse=[], finalbody=[]))
        return wrapped or [ast.Pass()]

    def generic_visit(self, node: ast.AST) -> ast.AST:
        for field in ("body", "orelse", "finalbody"):
            if isinstance(getattr(node, field, None), list):
                setattr(node, field, self._wrap(getattr(node, field)))
        for handler in getattr(node, "handlers", []):
            handler.body = self._wrap(handler.body)
        return node


def rewrite(test: str, setup_names: set[str], *, record: bool) -> Rewritten:
    """`test` with its probes replaced (SyntaxError for a test that does not parse)."""
    tree = ast.parse(test)
    loaded = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    local = bound_names(tree)
    program_names = loaded - local - setup_names - BUILTIN_NAMES
    rewriter = _ProbeRewriter(program_names, local)
    tree = rewriter.visit(tree)
    if record:
        tree = _RecordWrapper().generic_visit(tree)
    ast.fix_missing_locations(tree)
    return Rewritten(ast.unparse(tree), tuple(rewriter.static), rewriter.dynamic)


def literal_comparison(test: str, setup_names: set[str]) -> tuple[str, object] | None:
    """(probe source, expected value) for a test that is exactly `assert PROBE == LITERAL` (either
    side), which needs no judge: the value is compared here, as plain data. None for any other test."""
    try:
        tree = ast.parse(test)
    except SyntaxError:
        return None
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.Assert):
        return None
    check = tree.body[0].test
    if not (isinstance(check, ast.Compare) and len(check.ops) == 1 and isinstance(check.ops[0], ast.Eq)):
        return None
    program_names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} - setup_names - BUILTIN_NAMES
    for probe, expected in ((check.left, check.comparators[0]), (check.comparators[0], check.left)):
        root = _chain_root(probe)
        if not (isinstance(root, ast.Name) and root.id in program_names):
            continue
        if {n.id for n in ast.walk(probe) if isinstance(n, ast.Name)} - program_names - BUILTIN_NAMES:
            return None
        try:
            return ast.unparse(probe), ast.literal_eval(expected)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            return None
    return None
