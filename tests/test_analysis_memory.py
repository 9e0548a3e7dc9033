"""An analysis that is dropped leaves nothing of itself alive, nor does a program file imported again.

The explorer analyses again on every ``r`` and a notebook calls ``shardscope.inspect`` over and
over: what one analysis parsed (the compiled module's instructions, the loops' trip counts, the
names of the program's equations) must go with it. The trip counts and the names are worked out
during the analysis and dropped after it; the instructions are held by the result. The counts
here are of live objects by type, taken with ``gc.get_objects()`` after a full collection
(objects earlier tests left are frozen out of the collector by the conftest, and
``get_objects`` does not list them).
"""

from __future__ import annotations

import ast
import gc
import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from _support import ROOT
from jax import lax
from jax.sharding import Mesh, PartitionSpec as P

import shardscope
from shardscope.engine.hlo.equation_names import EquationNames
from shardscope.engine.hlo.loops import LoopCounts
from shardscope.engine.hlo.text import Instruction
from shardscope.pipeline.run import analyze
from shardscope.config.settings import Settings

KINDS = (Instruction, EquationNames, LoopCounts)


def alive() -> dict[str, int]:
    """How many objects of each of :data:`KINDS` are alive (after a full collection)."""
    gc.collect()
    counts = dict.fromkeys((kind.__name__ for kind in KINDS), 0)
    for obj in gc.get_objects():
        if type(obj) in KINDS:
            counts[type(obj).__name__] += 1
    return counts


def test_the_explorers_analysis_goes_when_it_is_dropped():
    before = alive()
    result = analyze(Settings(ROOT / "demos" / "linear.py", repeats=1))
    assert alive()["Instruction"] > before["Instruction"]  # the result holds its compiled modules
    del result
    assert alive() == before
    analyze(Settings(ROOT / "demos" / "linear.py", repeats=1))  # a second run, dropped at once
    assert alive() == before


def test_an_inspection_goes_when_it_is_dropped():
    mesh = Mesh(np.array(jax.devices()[:4]), ("d",))

    @jax.jit
    @jax.shard_map(mesh=mesh, in_specs=(P(), P(None, "d")), out_specs=P())
    def step(w, xs):
        def body(acc, x):
            return acc + lax.psum(jnp.tanh(x @ w).sum(0), "d"), None
        return lax.scan(body, jnp.zeros((8,), jnp.float32), xs)[0]

    args = (jax.ShapeDtypeStruct((8, 8), jnp.float32), jax.ShapeDtypeStruct((3, 8, 8), jnp.float32))
    before = alive()
    inspection = shardscope.inspect(step, *args)
    assert [c.executions for c in inspection.compiled.collectives] == [3]  # the psum, once per step of the scan
    assert alive()["Instruction"] > before["Instruction"]
    del inspection
    assert alive() == before


def test_a_cached_method_computes_once_per_instance_and_arguments_and_goes_with_its_instance():
    import weakref

    from shardscope.engine.hlo.memo import cached_method

    class Counted:
        def __init__(self):
            self.calls = []

        @cached_method
        def fib(self, n: int, *, step: int = 1) -> int:
            self.calls.append((n, step))
            return n if n < 2 else self.fib(n - step, step=step) + self.fib(n - 2 * step, step=step)

        @cached_method
        def parts(self, *given, **named):
            self.calls.append("parts")
            return given, named

    a, b = Counted(), Counted()
    assert a.parts(1, step=2) == ((1,), {"step": 2})
    assert a.parts((1,), (("step", 2),)) == (((1,), (("step", 2),)), {})
    assert a.calls == ["parts", "parts"]  # a keyword argument and a tuple given by position: two entries
    a.calls.clear()
    assert a.fib(20) == 6765 and a.fib(20) == 6765
    assert sorted(a.calls) == [(n, 1) for n in range(21)]  # each n once, recursion included
    assert a.fib(20, step=1) == 6765 and len(a.calls) == 22  # fib(20, step=1) is its own entry
    assert b.fib(3) == 2 and sorted(b.calls) == [(0, 1), (1, 1), (2, 1), (3, 1)]  # b computes its own
    gone = weakref.ref(a)
    del a
    gc.collect()
    assert gone() is None


def class_wide_method_caches(package: Path) -> list[str]:
    """Methods decorated with ``functools.lru_cache`` or ``functools.cache`` (one table per class,
    keyed by ``self``: every instance stays alive): ``module.py:line Class.method``."""
    found = []
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if not isinstance(node, ast.ClassDef):
                continue
            for method in node.body:
                if not isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                for decorator in method.decorator_list:
                    called = decorator.func if isinstance(decorator, ast.Call) else decorator
                    name = called.attr if isinstance(called, ast.Attribute) else getattr(called, "id", "")
                    if name in ("lru_cache", "cache"):
                        found.append(f"{path.relative_to(package.parent)}:{method.lineno} {node.name}.{method.name}")
    return found


def test_a_class_wide_method_cache_is_found(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "a.py").write_text(textwrap.dedent("""\
        import functools
        from functools import cache, lru_cache


        @functools.lru_cache
        def free(x): ...


        class A:
            @functools.lru_cache(maxsize=None)
            def one(self): ...

            @cache
            def two(self): ...

            @lru_cache
            def three(self): ...

            @staticmethod
            def four(): ...
        """))
    assert class_wide_method_caches(package) == ["pkg/a.py:11 A.one", "pkg/a.py:14 A.two", "pkg/a.py:17 A.three"]


def test_no_method_of_the_package_is_cached_for_its_whole_class():
    """``engine.hlo.memo.cached_method`` keeps a method's results in its instance instead."""
    assert class_wide_method_caches(ROOT / "shardscope") == []


BOUND_METHOD_PROGRAM = '''
import jax.numpy as jnp
import numpy as np

import shardscope


class Trainer:
    def __init__(self):
        self.weights = np.ones((256, 256), np.float32)

    def step(self, w, x):
        return jnp.sum(jnp.tanh(x @ w))


trainer = Trainer()
step = shardscope.program(args=(jnp.ones((8, 8)), jnp.ones((4, 8))))(trainer.step)  # a bound method takes no mark
'''


def test_a_program_file_imported_again_lets_go_of_the_bound_methods_it_marked_before(tmp_path):
    """A bound method cannot carry its mark, so the mark is kept aside: the app's ``r`` imports
    the file again, and the marks of the earlier imports must not keep their objects alive."""
    import weakref

    from shardscope.sources.loading import load_file

    path = tmp_path / "trainer.py"
    path.write_text(BOUND_METHOD_PROGRAM)
    earlier = []
    for _ in range(3):
        loaded = load_file(path)
        (program,) = loaded.functions.values()
        assert program.name == "step" and [a.shape for a in program.spec.args] == [(8, 8), (4, 8)]  # the mark is read
        earlier.append(weakref.ref(program.fn.__self__))
        del loaded, program
    gc.collect()
    assert [ref() is None for ref in earlier] == [True, True, False]  # the last import's module still holds its own
