"""A small JAX program, run on whatever platform JAX picked.

    JAX_PLATFORMS=stablehlo_ref python -m stablehlo_pjrt.demo

Runs one training step of a tiny MLP (jit + grad), a lax.fori_loop, a sort
and a random draw, and prints the results and the device they ran on.
"""

import jax
import jax.numpy as jnp


def mlp_loss(params, x, y):
    (w1, b1), (w2, b2) = params
    h = jnp.tanh(x @ w1 + b1)
    return jnp.mean((h @ w2 + b2 - y) ** 2)


def main():
    dev = jax.devices()[0]
    print(f"platform: {dev.platform}  device: {dev}")
    k1, k2, k3 = jax.random.split(jax.random.key(0), 3)
    params = ((jax.random.normal(k1, (4, 8)) * 0.5, jnp.zeros(8)),
              (jax.random.normal(k2, (8, 1)) * 0.5, jnp.zeros(1)))
    x = jax.random.uniform(k3, (16, 4))
    y = jnp.sum(x, axis=1, keepdims=True)

    @jax.jit
    def step(params, x, y):
        loss, grads = jax.value_and_grad(mlp_loss)(params, x, y)
        return loss, jax.tree.map(lambda p, g: p - 0.1 * g, params, grads)

    for i in range(3):
        loss, params = step(params, x, y)
        print(f"step {i}: loss = {float(loss):.6f}")
    print("fori_loop 2**10 =", int(jax.jit(
        lambda n: jax.lax.fori_loop(0, n, lambda i, v: v * 2, 1))(10)))
    print("sort:", jax.jit(jnp.sort)(jnp.array([3.0, -1.0, 2.5, 0.0])))
    print("power(1, 2) =", jax.jit(lambda v: jnp.power(v, jnp.int32(2)))(1))


if __name__ == "__main__":
    main()
