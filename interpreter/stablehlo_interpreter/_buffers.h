/* Buffer checks shared by the interpreter's C loop modules (_chains.c,
 * _fastmath.c, _sums.c): one home for reading a Py_buffer's element type and
 * for the overlap test; the float32 near-tie distance the float32
 * functions of _fastmath.c and of _chains.c's loop programs share; and the
 * table of _fastmath.c's loops that _chains.c's block machine calls. Header-only (static inline), so each module stays
 * one translation unit that setuptools builds from its own source. */
#ifndef STABLEHLO_INTERPRETER_BUFFERS_H
#define STABLEHLO_INTERPRETER_BUFFERS_H

#include <Python.h>
#include <stdint.h>

/* Distance, in float64 ULPs, from a float32 rounding boundary (a halfway
 * point) within which a float64 approximation of a function is not trusted
 * to round to the function's float32 value: thousands of times the error of
 * _fastmath.c's polynomials (about 5e-13 relative) and of the C library's
 * and numpy's float64 functions (a few ULPs). Such elements are recomputed
 * by the exact path (_fastmath.c flags them; a loop program pauses). */
#define F32_TIE_GUARD (1u << 15)

/* 1 when the buffer's struct format is the one-letter code `code` in native
 * byte order ("f", "=f", "<f" on a little-endian host; no format is "B"). */
static inline int buffer_format_is(const Py_buffer *b, char code)
{
    const char *f = b->format ? b->format : "B";
    if (*f == '@' || *f == '=')
        f++;
#if PY_LITTLE_ENDIAN
    else if (*f == '<')
        f++;
#else
    else if (*f == '>' || *f == '!')
        f++;
#endif
    return f[0] == code && f[1] == '\0';
}

/* 1 when the two buffers share a byte (empty buffers share none). */
static inline int buffers_overlap(const Py_buffer *a, const Py_buffer *b)
{
    const char *x = a->buf, *y = b->buf;
    return a->len && b->len && x < y + b->len && y < x + a->len;
}

/* _fastmath.c's float32 loops, for _chains.c's FM instruction (a fused
 * chain's transcendental inside a block-machine program): _fastmath exports
 * this table as the capsule FASTMATH_LOOPS_CAPSULE, its loops in the order of
 * the names in _fastmath.LOOPS. A loop is n_flagged = loop(x, out, idx, n):
 * float32 x[:n] into out[:n] (out may be x itself), the indices of the
 * elements to recompute exactly written to idx[:n_flagged] (_fastmath.c's
 * header comment). Called without the GIL. */
typedef Py_ssize_t (*fastmath_loop)(const float *, float *, int64_t *, Py_ssize_t);
typedef struct {
    int32_t version;
    int32_t count;
    const fastmath_loop *loops;
} FastmathLoops;
#define FASTMATH_LOOPS_CAPSULE "stablehlo_interpreter._fastmath._loops"
#define FASTMATH_LOOPS_VERSION 1

#endif
