"""The layout holds: imports point one way, and the compiler never reaches up into a frontend.

Every import statement of ``ir``, ``limn`` and ``limn_array`` is read with ``ast`` (those
inside functions too, which is where a circle hides), each resolved to the module it names,
and the resulting graph must have no cycle.
"""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("ir", "limn", "limn_array")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """module -> the modules of these packages its import statements name."""
    files = {_module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for mod, path in files.items():
        edges = graph.setdefault(mod, set())
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                edges |= {a.name for a in node.names if a.name in files}
            elif isinstance(node, ast.ImportFrom) and node.module in files and not node.level:
                for a in node.names:  # ``from pkg import sub`` names the submodule
                    sub = f"{node.module}.{a.name}"
                    edges.add(sub if sub in files else node.module)
        edges.discard(mod)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        path.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                return path[path.index(n) :] + [n]
            if n not in state and (found := visit(n)):
                return found
        path.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state and (found := visit(m)):
            return found
    return None


def test_the_import_graph_has_no_cycle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_ir_imports_nothing_from_the_frontends():
    upward = {
        (m, n)
        for m, edges in import_graph().items()
        if m.split(".")[0] == "ir"
        for n in edges
        if n.split(".")[0] != "ir"
    }
    assert not upward, f"ir imports a frontend: {sorted(upward)}"


def test_the_checker_sees_a_circle_and_an_upward_import():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
    real = import_graph()
    assert "ir.graph.dtypes" in real["ir.graph.node"]  # ``from ir.graph.dtypes import DType``
    assert "ir.graph.compose" in real["limn.tensor"]  # ``from ir.graph import compose``


# how the code reads a variable: os.environ.get("X"), os.environ["X"], "X" in os.environ,
# env_number("X", ...)
_READS = re.compile(
    r'(?:environ(?:\.get)?\(|environ\[|env_number\()"([A-Z_]+)"|"([A-Z_]+)" in os\.environ'
)


def test_every_environment_variable_limn_reads_is_in_the_runtime_table():
    """docs/runtime.md's table names each variable the code reads, and each row names a
    test that exists."""
    read = set()
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            read |= {a or b for a, b in _READS.findall(path.read_text())}
    assert "LIMN_CACHE_DIR" in read and "OMP_NUM_THREADS" in read  # the pattern sees them
    table = {}
    for line in (ROOT / "docs" / "runtime.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| `") and len(cells) == 4:
            for name in re.findall(r"`([A-Z_]+)`", cells[0]):
                table[name] = cells[3].strip("`")
    assert read == set(table), (sorted(read - set(table)), sorted(set(table) - read))
    for name, test in table.items():
        file, func = test.split("::")
        assert f"def {func}(" in (ROOT / "tests" / file).read_text(), (name, test)
