"""The suite passes on any machine (docs/contributing.md#a-suite-that-passes-on-any-machine): no assertion in
``tests/`` compares a wall or CPU time with a bound, and no wait gives up in under 60 s; a test asserts
behaviour (exit codes, lines, files, bytes, calls), a slow machine only takes longer."""

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent
CLOCKS = {"perf_counter", "monotonic", "process_time", "time", "thread_time", "perf_counter_ns", "monotonic_ns"}
# Names a measured duration goes by in the tests.
DURATIONS = ("seconds", "elapsed", "took", "duration")
LEAST_WAIT = 60  # seconds: a timeout counts as a failure (a hang), never as a measure of speed


def _reads_a_clock(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in CLOCKS
               and isinstance(n.func.value, ast.Name) and n.func.value.id == "time" for n in ast.walk(node))


def _is_duration(node: ast.AST) -> bool:
    names = [n.id for n in ast.walk(node) if isinstance(n, ast.Name)]
    names += [n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)]
    names += [n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    return any(word in name.lower() for name in names for word in DURATIONS)


def _small_bound(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, int | float) and 0 < node.value < LEAST_WAIT


def timed_assertions(source: str) -> list[int]:
    """Lines of ``source`` whose ``assert`` orders a clock reading or a duration against a number under 60 or
    against another duration, or
    whose wait (``timeout=``) is under 60 s (the ``timeout`` a tool under test is given is its own business:
    only ``wait``, ``communicate``, ``join``, ``subprocess.run`` and ``get`` are the test's own waits)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Assert):
            for compare in (n for n in ast.walk(node.test) if isinstance(n, ast.Compare)
                            and any(isinstance(op, ast.Lt | ast.LtE | ast.Gt | ast.GtE) for op in n.ops)):
                sides = [compare.left, *compare.comparators]
                timed = [_reads_a_clock(s) or _is_duration(s) for s in sides]
                bounded = any(_small_bound(s) for s in sides)
                if (bounded and any(t for s, t in zip(sides, timed, strict=True) if not _small_bound(s))
                        or all(timed)):  # one measured time against another: faster, slower
                    found.append(node.lineno)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in (
                "wait", "communicate", "join", "run", "get"):
            found += [node.lineno for k in node.keywords if k.arg == "timeout" and _small_bound(k.value)]
    return sorted(set(found))


def test_no_test_asserts_a_time_under_60_s():
    found = {path.name: lines for path in sorted(TESTS.rglob("*.py")) if (lines := timed_assertions(path.read_text()))}
    assert found == {}, found


def test_the_rule_finds_what_it_forbids():
    assert timed_assertions("assert time.perf_counter() - started < 2\n") == [1]
    assert timed_assertions("assert seconds < 2 and megabytes < 300\n") == [1]
    assert timed_assertions("assert finished.seconds < 30\n") == [1]
    assert timed_assertions("assert again.seconds['top'] < 1.5\n") == [1]
    assert timed_assertions("assert again.seconds['top'] < printed['seconds']['top']\n") == [1]
    assert timed_assertions("node.wait(timeout=30)\n") == [1]
    assert timed_assertions("assert node.wait(timeout=120) == 0\nassert megabytes < 300\n") == []
    assert timed_assertions("assert result['median_seconds'] == 0.6\n") == []  # a computed figure, not a clock
    assert timed_assertions("run_json('x', {}, 'slow child', timeout=1)\n") == []  # the tool's own limit
