/* Buffer checks shared by the interpreter's C loop modules (_chains.c,
 * _fastmath.c, _sums.c): one home for reading a Py_buffer's element type and
 * for the overlap test; and the float32 near-tie distance the float32
 * functions of _fastmath.c and of _chains.c's loop programs share. Header-only (static inline), so each module stays
 * one translation unit that setuptools builds from its own source. */
#ifndef STABLEHLO_INTERPRETER_BUFFERS_H
#define STABLEHLO_INTERPRETER_BUFFERS_H

#include <Python.h>

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

#endif
