"""Capture JAX profiles on the chip with jax + numpy alone (issue 46).

1. ``fixture``: a 4-micro-batch MLP gradient step (lax.scan), called 5 times under
   jax.profiler; its module text beside it. CI replays it (tests/fixtures/profiles/).
2. ``kinds``: one jitted program per instruction kind (dot, convolution, fusion, gather,
   scatter, reduce, transpose, sort, a loop of small dots), each called 10 times under one trace;
   their module texts; the cost model is checked against them (BENCHMARKS.md).
"""
import json, os, pathlib, shutil, sys, time
import numpy as np
import jax, jax.numpy as jnp
from jax import lax

OUT = pathlib.Path(os.environ.get("OUT", "/tmp/profile_out"))
OUT.mkdir(parents=True, exist_ok=True)
WORK = pathlib.Path("/tmp/profile_traces")
shutil.rmtree(WORK, ignore_errors=True)


def mlp_loss(p, x, y):
    h = jnp.tanh(x @ p["w1"])
    return jnp.mean((h @ p["w2"] - y) ** 2)


def mlp_step(params, xs, ys):
    """Gradient accumulated over 4 micro-batches in a scan."""
    def body(acc, xy):
        g = jax.grad(mlp_loss)(params, *xy)
        return jax.tree.map(jnp.add, acc, g), None
    acc, _ = lax.scan(body, jax.tree.map(jnp.zeros_like, params), (xs, ys))
    return acc


def small_dots(x, w):
    def body(c, _):
        return jnp.tanh(c @ w), None
    return lax.scan(body, x, None, length=100)[0]


def conv(x, k):
    return lax.conv_general_dilated(x, k, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))


key = iter(jax.random.split(jax.random.key(0), 32))
def rnd(shape, dtype=jnp.float32):
    return jax.random.normal(next(key), shape, dtype)

KINDS = {
    "matmul_bf16": (lambda a, b: a @ b, (rnd((4096, 4096), jnp.bfloat16), rnd((4096, 4096), jnp.bfloat16))),
    "matmul_f32": (lambda a, b: a @ b, (rnd((2048, 2048)), rnd((2048, 2048)))),
    "conv_bf16": (conv, (rnd((16, 64, 64, 128), jnp.bfloat16), rnd((3, 3, 128, 128), jnp.bfloat16))),
    "elementwise": (lambda x: jnp.tanh(x * 2.0 + 1.0), (rnd((8192, 8192)),)),
    "reduce": (lambda x: jnp.sum(x, axis=1), (rnd((8192, 8192)),)),
    "transpose": (lambda x: x.T + 0.0, (rnd((8192, 4096)),)),
    "gather": (lambda t, i: jnp.take(t, i, axis=0), (rnd((65536, 512)), jax.random.randint(next(key), (16384,), 0, 65536))),
    "scatter_add": (lambda t, i, u: t.at[i].add(u), (rnd((65536, 512)), jax.random.randint(next(key), (16384,), 0, 65536), rnd((16384, 512)))),
    "sort": (jnp.sort, (rnd((1 << 22,)),)),
    "small_dots_loop": (small_dots, (rnd((128, 128)), rnd((128, 128)))),
}


def trace(name, programs, calls):
    """Compile each program, warm it, time it, then run it ``calls`` times under the profiler."""
    texts, timing = {}, {}
    compiled = {}
    for pname, (fn, args) in programs.items():
        c = jax.jit(fn).lower(*args).compile()
        compiled[pname] = (c, args)
        texts[pname] = c.as_text()
        jax.block_until_ready(c(*args))
        ts = []
        for _ in range(calls):
            t = time.perf_counter(); jax.block_until_ready(c(*args)); ts.append(time.perf_counter() - t)
        timing[pname] = {"median_s_waited": float(np.median(ts)), "min_s": float(min(ts))}
    opts = jax.profiler.ProfileOptions()
    opts.python_tracer_level = 0
    opts.host_tracer_level = 1
    d = WORK / name
    jax.profiler.start_trace(str(d), profiler_options=opts)
    for pname, (c, args) in compiled.items():
        for _ in range(calls):
            jax.block_until_ready(c(*args))
    jax.profiler.stop_trace()
    pbs = sorted(d.rglob("*.xplane.pb"))
    print(name, [(str(p.relative_to(d)), p.stat().st_size) for p in pbs], flush=True)
    shutil.copy(pbs[-1], OUT / f"{name}.xplane.pb")
    (OUT / f"{name}.modules.json").write_text(json.dumps(texts))
    return timing


def main():
    dev = jax.devices()[0]
    info = {"jax": jax.__version__, "platform": dev.platform, "device_kind": dev.device_kind,
            "devices": len(jax.devices())}
    params = {"w1": rnd((128, 256)), "w2": rnd((256, 64))}
    xs, ys = rnd((4, 32, 128)), rnd((4, 32, 64))
    info["fixture"] = trace("fixture", {"mlp_step": (mlp_step, (params, xs, ys))}, calls=5)
    if "--fixture-only" not in sys.argv:
        info["kinds"] = trace("kinds", KINDS, calls=10)
    (OUT / "info.json").write_text(json.dumps(info, indent=1))
    print(json.dumps(info, indent=1))


main()
