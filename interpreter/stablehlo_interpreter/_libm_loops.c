/* stablehlo_interpreter._libm_loops: spec mode's per-element C library
 * calls and sequential folds, as whole-buffer C loops.
 *
 * Why hand-written C: spec mode (numerics="spec", ops/spec_kernels.py and
 * ops/spec_elementwise.py) must give the C++ reference interpreter's bits.
 * (1) Its float64 functions are the C library's (glibc's) own: numpy's
 * float64 loops may be SIMD/SVML code with another last bit, so the numpy
 * path calls Python's math module once per element (~100 ns each); here the
 * same libm functions run in a C loop. (2) Its reductions and contractions
 * are left folds in the element type, one dependent rounding after another:
 * numpy has no strided sequential fold (ufunc.reduce is pairwise along a
 * contiguous axis, ufunc.accumulate writes every prefix), and a contraction
 * as numpy steps materialises every product. A C loop folds in the
 * reference's order and stays vectorized across independent outputs:
 * contractions in register tiles of outputs (AVX512F, AVX2 or SSE2 lanes,
 * chosen at run time), float16 in AVX512-FP16 arithmetic where the CPU has
 * it. Every instruction-set level gives the same bits; fold and contract
 * take an isa level so that the tests run each one.
 *
 * Every result is bit-identical to the numpy/Python path it replaces
 * (tests/test_spec_loops.py runs both): no reassociation, no fused
 * multiply-add (fp-contract is off below and in the build flags), IEEE
 * single and double arithmetic only.
 *
 * Plain CPython C API and the buffer protocol (no numpy headers), no
 * global state, the GIL released around every loop; every buffer's type,
 * shape and writability is checked and a bad one raises TypeError or
 * ValueError.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__GNUC__) && !defined(__clang__)
/* A fused a * b + c rounds once: the reference rounds the product and the
 * sum. (GCC's GNU C default is -ffp-contract=fast.) */
#pragma GCC optimize("fp-contract=off")
#elif defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

/* target_clones needs glibc's ifunc (musl's GCC refuses it). */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__) \
    && defined(__GLIBC__)
/* The vectorized loops also in an AVX2 version, picked at load time by the
 * host: wider vectors, the same IEEE operations one by one (AVX2 does not
 * include FMA), so the same bits on every host. */
#define VECTOR_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define VECTOR_CLONES
#endif

/* ---- the C library's functions as Python's math module calls them ------ */

/* CPython's m_log (Modules/mathmodule.c): log's special values are
 * handled before calling the C library. */
static double
m_log(double x)
{
    if (isfinite(x)) {
        if (x > 0.0)
            return log(x);
        errno = EDOM;
        return x == 0.0 ? -HUGE_VAL : NAN;
    }
    if (isnan(x) || x > 0.0)
        return x;
    errno = EDOM;
    return NAN;
}

static double
m_log1p(double x)
{
    /* CPython keeps the sign of a zero itself (some libms lose it). */
    return x == 0.0 ? x : log1p(x);
}

/* CPython's m_atan2: C99 Annex F's special values spelled out. */
static double
m_atan2(double y, double x)
{
    if (isnan(x) || isnan(y))
        return NAN;
    if (isinf(y)) {
        if (isinf(x)) {
            if (copysign(1., x) == 1.)
                return copysign(0.25 * M_PI, y);
            return copysign(0.75 * M_PI, y);
        }
        return copysign(0.5 * M_PI, y);
    }
    if (isinf(x) || y == 0.) {
        if (copysign(1., x) == 1.)
            return copysign(0., y);
        return copysign(M_PI, y);
    }
    return atan2(y, x);
}

/* CPython's is_error(r), errno != 0: 1 where math raises. */
static int
raises(int err, double r)
{
    if (err == ERANGE)
        return fabs(r) >= 1.5;   /* underflow is not an error */
    return 1;
}

typedef double (*unary_fn)(double);

static const struct {
    const char *name;
    unary_fn fn;
} UNARY[] = {
    {"exp", exp}, {"expm1", expm1}, {"log", m_log}, {"log1p", m_log1p},
    {"sin", sin}, {"cos", cos}, {"tan", tan}, {"tanh", tanh},
    {"cbrt", cbrt},
};

/* math_1_to_whatever: r = fn(x); math raises where r is NaN from a non-NaN
 * x, infinite from a finite x, or finite with an error in errno. */
static Py_ssize_t
unary_loop(unary_fn fn, const double *x, double *out, unsigned char *flag, Py_ssize_t n)
{
    Py_ssize_t bad = 0;
    errno = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        double v = x[i];
        double r = fn(v);
        int e = errno;
        int f;
        if (isnan(r))
            f = !isnan(v);
        else if (isinf(r))
            f = isfinite(v);
        else
            f = e && raises(e, r);
        if (e)
            errno = 0;
        out[i] = r;
        flag[i] = (unsigned char)f;
        bad += f;
    }
    return bad;
}

/* math_2 over m_atan2. */
static int
atan2_one(double y, double x, double *r)
{
    errno = 0;
    *r = m_atan2(y, x);
    int e = errno;
    if (isnan(*r))
        e = (!isnan(x) && !isnan(y)) ? EDOM : 0;
    else if (isinf(*r))
        e = (isfinite(x) && isfinite(y)) ? ERANGE : 0;
    return e && raises(e, *r);
}

/* CPython's math_pow: IEEE specials decided in C, finite ** finite by the
 * C library, then its errno rules. */
static int
pow_one(double x, double y, double *out)
{
    double r = 0.;
    int e = 0;
    if (!isfinite(x) || !isfinite(y)) {
        if (isnan(x))
            r = y == 0. ? 1. : x;
        else if (isnan(y))
            r = x == 1. ? 1. : y;
        else if (isinf(x)) {
            int odd_y = isfinite(y) && fmod(fabs(y), 2.0) == 1.0;
            if (y > 0.)
                r = odd_y ? x : fabs(x);
            else if (y == 0.)
                r = 1.;
            else
                r = odd_y ? copysign(0., x) : 0.;
        }
        else {   /* y infinite */
            if (fabs(x) == 1.0)
                r = 1.;
            else if (y > 0. && fabs(x) > 1.0)
                r = y;
            else if (y < 0. && fabs(x) < 1.0)
                r = -y;
            else
                r = 0.;
        }
    }
    else {
        errno = 0;
        r = pow(x, y);
        e = errno;
        if (!isfinite(r)) {
            if (isnan(r))
                e = EDOM;
            else
                e = x == 0. ? EDOM : ERANGE;
        }
    }
    *out = r;
    return e && raises(e, r);
}

/* ---- buffers ------------------------------------------------------------ */

/* The element type of a buffer: 'f' (float32), 'd' (float64) or 0. */
static char
float_kind(const Py_buffer *v)
{
    const char *f = v->format ? v->format : "B";
    if (*f == '@' || *f == '=' || *f == '<')
        f++;
    if (f[0] == 'Z' && f[1] == 'f' && f[2] == '\0' && v->itemsize == 8)
        return 'F';   /* complex64 */
    if (f[0] == 'Z' && f[1] == 'd' && f[2] == '\0' && v->itemsize == 16)
        return 'D';   /* complex128 */
    if (f[1] != '\0')
        return 0;
    if (*f == 'f' && v->itemsize == 4)
        return 'f';
    if (*f == 'd' && v->itemsize == 8)
        return 'd';
    if (*f == 'e' && v->itemsize == 2)
        return 'e';
    if (*f == 'H' && v->itemsize == 2)
        return 'H';   /* bfloat16 bits (numpy cannot export ml_dtypes' bfloat16) */
    return 0;
}

static int
get_contiguous(PyObject *o, Py_buffer *v, int writable, char want, const char *what)
{
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(o, v, flags) < 0)
        return -1;
    char k = float_kind(v);
    if (k == 0 || (want && k != want)) {
        PyErr_Format(PyExc_TypeError, "%s: a contiguous %s buffer is needed, got format '%s'",
                     what, want == 'd' ? "float64" : "float (or bfloat16 bits)",
                     v->format ? v->format : "B");
        PyBuffer_Release(v);
        return -1;
    }
    return 0;
}

/* A strided buffer of ``ndim`` dims of element type ``kind``. */
static int
get_strided(PyObject *o, Py_buffer *v, int ndim, char kind, const char *what)
{
    if (PyObject_GetBuffer(o, v, PyBUF_RECORDS_RO) < 0)
        return -1;
    if (v->ndim != ndim || float_kind(v) != kind) {
        PyErr_Format(PyExc_ValueError, "%s: a %d-d %s buffer is needed, got %d-d format '%s'",
                     what, ndim, kind == 'f' ? "float32" : kind == 'd' ? "float64" :
                     kind == 'e' ? "float16" : kind == 'F' ? "complex64" :
                     kind == 'D' ? "complex128" : "bfloat16-bits (uint16)", v->ndim,
                     v->format ? v->format : "B");
        PyBuffer_Release(v);
        return -1;
    }
    return 0;
}

/* ---- unary / binary ----------------------------------------------------- */

PyDoc_STRVAR(unary_doc,
"unary(name, x, out, flag) -> int\n\n"
"out[i] = the C library's name(x[i]) as Python's math.name computes it\n"
"(name: exp, expm1, log, log1p, sin, cos, tan, tanh, cbrt); x, out:\n"
"contiguous float64 buffers of one length, flag: a writable byte buffer of\n"
"that length, set to 1 where math.name raises (overflow, a pole, a domain\n"
"error) and 0 elsewhere. Returns the number of flagged elements.");

static PyObject *
py_unary(PyObject *self, PyObject *args)
{
    const char *name;
    PyObject *ox, *oo, *of;
    if (!PyArg_ParseTuple(args, "sOOO:unary", &name, &ox, &oo, &of))
        return NULL;
    unary_fn fn = NULL;
    for (size_t i = 0; i < sizeof(UNARY) / sizeof(UNARY[0]); i++)
        if (strcmp(UNARY[i].name, name) == 0)
            fn = UNARY[i].fn;
    if (fn == NULL)
        return PyErr_Format(PyExc_ValueError, "unary: no C library function '%s'", name);
    Py_buffer x, o, f;
    if (get_contiguous(ox, &x, 0, 'd', "unary x") < 0)
        return NULL;
    if (get_contiguous(oo, &o, 1, 'd', "unary out") < 0) {
        PyBuffer_Release(&x);
        return NULL;
    }
    if (PyObject_GetBuffer(of, &f, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&x);
        PyBuffer_Release(&o);
        return NULL;
    }
    Py_ssize_t n = x.len / 8, bad = 0;
    if (o.len != x.len || f.len != n) {
        PyErr_Format(PyExc_ValueError, "unary: lengths differ (x %zd, out %zd, flag %zd bytes)",
                     x.len / 8, o.len / 8, f.len);
        bad = -1;
    }
    else {
        Py_BEGIN_ALLOW_THREADS
        bad = unary_loop(fn, (const double *)x.buf, (double *)o.buf, (unsigned char *)f.buf, n);
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&x);
    PyBuffer_Release(&o);
    PyBuffer_Release(&f);
    return bad < 0 ? NULL : PyLong_FromSsize_t(bad);
}

PyDoc_STRVAR(binary_doc,
"binary(name, x, y, out, flag) -> int\n\n"
"out[i] = math.name(x[i], y[i]) (name: atan2, pow) over contiguous float64\n"
"buffers of one length; flag as for unary.");

static PyObject *
py_binary(PyObject *self, PyObject *args)
{
    const char *name;
    PyObject *ox, *oy, *oo, *of;
    if (!PyArg_ParseTuple(args, "sOOOO:binary", &name, &ox, &oy, &oo, &of))
        return NULL;
    int which = strcmp(name, "atan2") == 0 ? 1 : strcmp(name, "pow") == 0 ? 2 : 0;
    if (which == 0)
        return PyErr_Format(PyExc_ValueError, "binary: no C library function '%s'", name);
    Py_buffer x, y, o, f;
    if (get_contiguous(ox, &x, 0, 'd', "binary x") < 0)
        return NULL;
    if (get_contiguous(oy, &y, 0, 'd', "binary y") < 0) {
        PyBuffer_Release(&x);
        return NULL;
    }
    if (get_contiguous(oo, &o, 1, 'd', "binary out") < 0) {
        PyBuffer_Release(&x);
        PyBuffer_Release(&y);
        return NULL;
    }
    if (PyObject_GetBuffer(of, &f, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&x);
        PyBuffer_Release(&y);
        PyBuffer_Release(&o);
        return NULL;
    }
    Py_ssize_t n = x.len / 8, bad = 0;
    if (y.len != x.len || o.len != x.len || f.len != n) {
        PyErr_Format(PyExc_ValueError,
                     "binary: lengths differ (x %zd, y %zd, out %zd, flag %zd bytes)",
                     x.len / 8, y.len / 8, o.len / 8, f.len);
        bad = -1;
    }
    else {
        const double *xs = (const double *)x.buf, *ys = (const double *)y.buf;
        double *os = (double *)o.buf;
        unsigned char *fs = (unsigned char *)f.buf;
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = 0; i < n; i++) {
            int r = which == 1 ? atan2_one(xs[i], ys[i], &os[i]) : pow_one(xs[i], ys[i], &os[i]);
            fs[i] = (unsigned char)r;
            bad += r;
        }
        errno = 0;
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&x);
    PyBuffer_Release(&y);
    PyBuffer_Release(&o);
    PyBuffer_Release(&f);
    return bad < 0 ? NULL : PyLong_FromSsize_t(bad);
}

/* ---- complex division ------------------------------------------------------ */

/* libgcc's __divdc3 as ops/c_complex.py spells it out (the C++ reference
 * divides complex<double> with it): Smith's algorithm, scaled near the ends
 * of the exponent range, then C99 Annex G's recovery of infinities and
 * zeros that came out NaN + NaN i. */
static void
divdc3_one(double a, double b, double c, double d, double *px, double *py)
{
    const double RBIG = DBL_MAX / 2.0, RMIN = DBL_MIN, RMIN2 = DBL_EPSILON;
    const double RMINSCAL = 1.0 / DBL_EPSILON, RMAX2 = RBIG * RMIN2;
    int dmajor = fabs(c) < fabs(d);
    double big = dmajor ? fabs(d) : fabs(c);
    double x, y;
    if (big >= RBIG) {
        a /= 2; b /= 2; c /= 2; d /= 2; big /= 2;
    }
    int small_num = (fabs(a) < RMIN && fabs(b) < RMAX2 && big < RMAX2) ||
                    (fabs(b) < RMIN && fabs(a) < RMAX2 && big < RMAX2);
    if (big < RMIN2 || small_num) {
        a *= RMINSCAL; b *= RMINSCAL; c *= RMINSCAL; d *= RMINSCAL;
    }
    if (dmajor) {
        double r = c / d, den = c * r + d;
        if (fabs(r) > RMIN) {
            x = (a * r + b) / den;
            y = (b * r - a) / den;
        }
        else {
            x = (c * (a / d) + b) / den;
            y = (c * (b / d) - a) / den;
        }
    }
    else {
        double r = d / c, den = d * r + c;
        if (fabs(r) > RMIN) {
            x = (b * r + a) / den;
            y = (b - a * r) / den;
        }
        else {
            x = (a + d * (b / c)) / den;
            y = (b - d * (a / c)) / den;
        }
    }
    if (isnan(x) && isnan(y)) {
        if (c == 0.0 && d == 0.0 && (!isnan(a) || !isnan(b))) {
            x = copysign(INFINITY, c) * a;
            y = copysign(INFINITY, c) * b;
        }
        else if ((isinf(a) || isinf(b)) && isfinite(c) && isfinite(d)) {
            double a2 = copysign(isinf(a) ? 1.0 : 0.0, a), b2 = copysign(isinf(b) ? 1.0 : 0.0, b);
            x = INFINITY * (a2 * c + b2 * d);
            y = INFINITY * (b2 * c - a2 * d);
        }
        else if ((isinf(c) || isinf(d)) && isfinite(a) && isfinite(b)) {
            double c3 = copysign(isinf(c) ? 1.0 : 0.0, c), d3 = copysign(isinf(d) ? 1.0 : 0.0, d);
            x = 0.0 * (a * c3 + b * d3);
            y = 0.0 * (b * c3 - a * d3);
        }
    }
    *px = x;
    *py = y;
}

PyDoc_STRVAR(cdiv_doc,
"cdiv(a, b, c, d, x, y)\n\n"
"x[i] + y[i] i = (a[i] + b[i] i) / (c[i] + d[i] i) as libgcc's __divdc3\n"
"computes it (ops/c_complex.py divdc3): contiguous float64 buffers of one\n"
"length, x and y writable.");

static PyObject *
py_cdiv(PyObject *self, PyObject *args)
{
    PyObject *o[6];
    if (!PyArg_ParseTuple(args, "OOOOOO:cdiv", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5]))
        return NULL;
    Py_buffer v[6];
    int got = 0, ok = 1;
    for (; got < 6; got++)
        if (get_contiguous(o[got], &v[got], got >= 4, 'd', "cdiv") < 0) {
            ok = 0;
            break;
        }
    for (int i = 1; ok && i < 6; i++)
        if (v[i].len != v[0].len) {
            PyErr_Format(PyExc_ValueError, "cdiv: lengths differ (%zd and %zd elements)",
                         v[0].len / 8, v[i].len / 8);
            ok = 0;
        }
    if (ok) {
        const double *a = v[0].buf, *b = v[1].buf, *c = v[2].buf, *d = v[3].buf;
        double *x = v[4].buf, *y = v[5].buf;
        Py_ssize_t n = v[0].len / 8;
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = 0; i < n; i++)
            divdc3_one(a[i], b[i], c[i], d[i], &x[i], &y[i]);
        Py_END_ALLOW_THREADS
    }
    for (int i = 0; i < got; i++)
        PyBuffer_Release(&v[i]);
    if (!ok)
        return NULL;
    Py_RETURN_NONE;
}

/* The instruction sets a call may use (the isa argument of fold and
 * contract): the tests run each level and compare the bits. A level the CPU
 * lacks falls to the next one down. */
enum {
    ISA_BEST = 0,       /* AVX512F/-BW/-FP16, AVX2, F16C: what the CPU has */
    ISA_PORTABLE = 1,   /* plain C loops, no register tiles */
    ISA_AVX2 = 2,       /* at most AVX2 and F16C */
    ISA_SSE2 = 3,       /* x86-64's baseline: 128-bit tiles, portable float16 */
};

/* ---- sequential folds ----------------------------------------------------- */

/* Outputs per group of independent chains in a strided fold, and per block
 * of a contiguous one. */
#define CHAINS 8
#define BLOCK 1024

#define ADD(a, b) ((a) + (b))
#define MUL(a, b) ((a) * (b))

/* G chains side by side over the outputs j0 .. end - 1 (at most G), the
 * missing chains repeating output end - 1. */
#define FOLD_GROUP(T, OP, G, end)                                                    \
    do {                                                                             \
        Py_ssize_t rem = (end) - j0, off[G];                                         \
        T r[G];                                                                      \
        for (int t = 0; t < G; t++) {                                                \
            Py_ssize_t j = t < rem ? j0 + t : (end) - 1;                             \
            off[t] = j * sk;                                                         \
            r[t] = acc[j];                                                           \
        }                                                                            \
        const char *p = src;                                                         \
        for (Py_ssize_t i = 0; i < n; i++, p += sn)                                  \
            for (int t = 0; t < G; t++)                                              \
                r[t] = OP(r[t], *(const T *)(p + off[t]));                           \
        for (Py_ssize_t t = 0; t < rem; t++)                                         \
            acc[j0 + t] = r[t];                                                      \
    } while (0)

/* acc[j] = (((acc[j] op x[0, j]) op x[1, j]) ...) op x[n - 1, j], where
 * x[i, j] is at src + i * sn + j * sk (byte strides). */
#define FOLD(NAME, T, OP)                                                            \
VECTOR_CLONES static void                                                            \
NAME(const char *src, Py_ssize_t n, Py_ssize_t kept, Py_ssize_t sn, Py_ssize_t sk,  \
     T *acc)                                                                         \
{                                                                                    \
    if (sk == (Py_ssize_t)sizeof(T) && kept >= 2 * CHAINS) {                         \
        /* Rows contiguous: a block of outputs, one row step at a time. */          \
        for (Py_ssize_t j0 = 0; j0 < kept; j0 += BLOCK) {                            \
            Py_ssize_t w = kept - j0 < BLOCK ? kept - j0 : BLOCK;                    \
            T *restrict a = acc + j0;                                                \
            for (Py_ssize_t i = 0; i < n; i++) {                                     \
                const T *restrict row = (const T *)(src + i * sn) + j0;              \
                for (Py_ssize_t j = 0; j < w; j++)                                   \
                    a[j] = OP(a[j], row[j]);                                         \
            }                                                                        \
        }                                                                            \
        return;                                                                      \
    }                                                                                \
    /* Otherwise CHAINS outputs at once: independent dependency chains. */          \
    Py_ssize_t j0 = 0;                                                               \
    for (; j0 + CHAINS <= kept; j0 += CHAINS) {                                      \
        T r[CHAINS];                                                                 \
        for (int t = 0; t < CHAINS; t++)                                             \
            r[t] = acc[j0 + t];                                                      \
        const char *p = src + j0 * sk;                                               \
        for (Py_ssize_t i = 0; i < n; i++, p += sn)                                  \
            for (int t = 0; t < CHAINS; t++)                                         \
                r[t] = OP(r[t], *(const T *)(p + t * sk));                           \
        for (int t = 0; t < CHAINS; t++)                                             \
            acc[j0 + t] = r[t];                                                      \
    }                                                                                \
    /* The outputs left, but a last one: groups of up to 4 chains (the       \
     * missing ones repeating the group's last output, their results          \
     * dropped), advancing side by side, not one after another. */             \
    for (; kept - j0 > 1; j0 += 4) {                                                 \
        Py_ssize_t end = kept - j0 < 4 ? kept : j0 + 4;                              \
        FOLD_GROUP(T, OP, 4, end);                                                   \
    }                                                                                \
    for (; j0 < kept; j0++) {                                                        \
        T r = acc[j0];                                                               \
        const char *p = src + j0 * sk;                                               \
        for (Py_ssize_t i = 0; i < n; i++, p += sn)                                  \
            r = OP(r, *(const T *)p);                                                \
        acc[j0] = r;                                                                 \
    }                                                                                \
}

FOLD(fold_add_f, float, ADD)
FOLD(fold_mul_f, float, MUL)
FOLD(fold_add_d, double, ADD)
FOLD(fold_mul_d, double, MUL)

/* float16 and bfloat16 steps: both operands widened to float32, the float32
 * result rounded to nearest even (the spec path does the same through
 * numpy's and ml_dtypes' conversions; float32 holds 2p+2 bits of either
 * type, so a sum or product rounds once as if exactly). */
static inline float
bf16_to_f(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t
f_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40u);   /* NaN stays NaN (quiet) */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline float
f16_to_f(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, u;
    if (e == 0) {
        float f = (float)m * 0x1p-24f;          /* zero or subnormal: exact */
        memcpy(&u, &f, 4);
        u |= sign;
    }
    else if (e == 31)
        u = sign | 0x7f800000u | (m << 13);
    else
        u = sign | ((e + 112u) << 23) | (m << 13);
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t
f_to_f16(float x)
{
    /* Round to nearest even (F. Giesen's float_to_half_fast3_rtne). */
    uint32_t f;
    memcpy(&f, &x, 4);
    const uint32_t f32infty = 255u << 23, f16max = (127u + 16u) << 23;
    const uint32_t denorm_magic = ((127u - 15u) + (23u - 10u) + 1u) << 23;
    uint32_t sign = f & 0x80000000u;
    uint16_t o;
    f ^= sign;
    if (f >= f16max)
        o = f > f32infty ? 0x7e00u : 0x7c00u;   /* NaN, or overflow to infinity */
    else if (f < (113u << 23)) {
        /* subnormal or zero: the float32 add of a magic number rounds */
        float ff, dm;
        memcpy(&ff, &f, 4);
        memcpy(&dm, &denorm_magic, 4);
        ff += dm;
        memcpy(&f, &ff, 4);
        o = (uint16_t)(f - denorm_magic);
    }
    else {
        uint32_t mant_odd = (f >> 13) & 1u;
        f += ((uint32_t)(15 - 127) << 23) + 0xfffu;
        f += mant_odd;
        o = (uint16_t)(f >> 13);
    }
    return (uint16_t)(o | (sign >> 16));
}

#define NARROW_FOLD(NAME, TO_F, FROM_F, OP, ATTR)                                    \
ATTR static void                                                                     \
NAME(const char *src, Py_ssize_t n, Py_ssize_t kept, Py_ssize_t sn, Py_ssize_t sk,  \
     uint16_t *acc)                                                                  \
{                                                                                    \
    Py_ssize_t j0 = 0;                                                               \
    for (; j0 + CHAINS <= kept; j0 += CHAINS) {                                      \
        uint16_t r[CHAINS];                                                          \
        for (int t = 0; t < CHAINS; t++)                                             \
            r[t] = acc[j0 + t];                                                      \
        const char *p = src + j0 * sk;                                               \
        for (Py_ssize_t i = 0; i < n; i++, p += sn)                                  \
            for (int t = 0; t < CHAINS; t++)                                         \
                r[t] = FROM_F(OP(TO_F(r[t]), TO_F(*(const uint16_t *)(p + t * sk)))); \
        for (int t = 0; t < CHAINS; t++)                                             \
            acc[j0 + t] = r[t];                                                      \
    }                                                                                \
    for (; j0 < kept; j0++) {                                                        \
        uint16_t r = acc[j0];                                                        \
        const char *p = src + j0 * sk;                                               \
        for (Py_ssize_t i = 0; i < n; i++, p += sn)                                  \
            r = FROM_F(OP(TO_F(r), TO_F(*(const uint16_t *)p)));                     \
        acc[j0] = r;                                                                 \
    }                                                                                \
}

NARROW_FOLD(fold_add_e, f16_to_f, f_to_f16, ADD, )
NARROW_FOLD(fold_mul_e, f16_to_f, f_to_f16, MUL, )
NARROW_FOLD(fold_add_b, bf16_to_f, f_to_bf16, ADD, )
NARROW_FOLD(fold_mul_b, bf16_to_f, f_to_bf16, MUL, )

#if defined(__SSE2__)
#include <emmintrin.h>
#define HAVE_CHAIN_B 1
/* One bfloat16 chain (a fold to one value, or the outputs the CHAINS
 * groups leave), the accumulator kept in an SSE register as the float32 bits
 * of a bfloat16 value: a float32 add or multiply, then the rounding to
 * nearest even of its top 16 bits by integer steps in the same register.
 * Each step depends on the previous one, so its latency is the loop's cost;
 * fold_*_b's f_to_bf16 moves the value to a general register and back (and
 * branches on NaN), about 1.6x slower. No NaN branch here: a sum or product
 * of bfloat16 values is a quiet NaN with 16 zero low bits (the payload of
 * an operand, quieted, or the default NaN), which the rounding leaves as it
 * is, and f_to_bf16 gives the same bits for it. ROUND(u): u rounded. */
#define CHAIN_B(NAME, ATTR, ROUND)                                                   \
ATTR static uint16_t                                                                 \
NAME(const char *p, Py_ssize_t n, Py_ssize_t sn, uint16_t r0, int add)               \
{                                                                                    \
    const __m128i half = _mm_set1_epi32(0x7fff), one = _mm_set1_epi32(1);            \
    const __m128i up = _mm_set1_epi32(0x8000);                                       \
    const __m128i top = _mm_set1_epi32((int)0xffff0000u);                            \
    __m128i r = _mm_cvtsi32_si128((int)((uint32_t)r0 << 16));                        \
    for (Py_ssize_t i = 0; i < n; i++, p += sn) {                                    \
        uint16_t h;                                                                  \
        memcpy(&h, p, 2);                                                            \
        __m128 x = _mm_castsi128_ps(_mm_cvtsi32_si128((int)((uint32_t)h << 16)));    \
        __m128 f = _mm_castsi128_ps(r);                                              \
        __m128i u = _mm_castps_si128(add ? _mm_add_ss(f, x) : _mm_mul_ss(f, x));     \
        r = ROUND(u);                                                                \
    }                                                                                \
    (void)one;                                                                       \
    (void)up;                                                                        \
    return (uint16_t)((uint32_t)_mm_cvtsi128_si32(r) >> 16);                         \
}

#define ROUND_SSE2(u)                                                                \
    _mm_and_si128(_mm_add_epi32(_mm_add_epi32(u, half),                              \
                                _mm_and_si128(_mm_srli_epi32(u, 16), one)), top)
CHAIN_B(chain_b, , ROUND_SSE2)

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#include <smmintrin.h>
#define HAVE_CHAIN_B41 1
/* The rounding as a select: (u + 0x7fff) & top or (u + 0x8000) & top by bit
 * 16 of u, both computed beside the select's mask (u << 15, its sign bit):
 * a step's chain is the add, one shift and one blend (SSE4.1's blendvps),
 * 5-13% faster than the SSE2 steps' shift, and, add and and. */
#define ROUND_SSE41(u)                                                               \
    _mm_castps_si128(_mm_blendv_ps(                                                  \
        _mm_castsi128_ps(_mm_and_si128(_mm_add_epi32(u, half), top)),                \
        _mm_castsi128_ps(_mm_and_si128(_mm_add_epi32(u, up), top)),                  \
        _mm_castsi128_ps(_mm_slli_epi32(u, 15))))
CHAIN_B(chain_b41, __attribute__((target("sse4.1"))), ROUND_SSE41)
#else
#define HAVE_CHAIN_B41 0
#endif

/* fold_add_b or fold_mul_b for the groups of CHAINS outputs, chain_b for
 * the outputs they leave. */
static void
fold_b_chained(const char *src, Py_ssize_t n, Py_ssize_t kept, Py_ssize_t sn, Py_ssize_t sk,
               uint16_t *acc, int add, int isa)
{
    Py_ssize_t grouped = kept - kept % CHAINS;
    (add ? fold_add_b : fold_mul_b)(src, n, grouped, sn, sk, acc);
#if HAVE_CHAIN_B41
    int blend = isa != ISA_SSE2 && __builtin_cpu_supports("sse4.1");
#else
    int blend = 0;
#endif
    for (Py_ssize_t j = grouped; j < kept; j++)
#if HAVE_CHAIN_B41
        if (blend)
            acc[j] = chain_b41(src + j * sk, n, sn, acc[j], add);
        else
#endif
            acc[j] = chain_b(src + j * sk, n, sn, acc[j], add);
    (void)blend;
}
#else
#define HAVE_CHAIN_B 0
#endif

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
/* float16 <-> float32 by the CPU's F16C instructions where it has them
 * (IEEE conversions, round to nearest even: the same values as the
 * functions above, in one instruction each). */
#include <immintrin.h>
#define HAVE_F16C 1
#define F16C __attribute__((target("f16c")))
F16C static inline float
f16_to_f_hw(uint16_t h)
{
    return _cvtsh_ss(h);
}

F16C static inline uint16_t
f_to_f16_hw(float f)
{
    return (uint16_t)_cvtss_sh(f, 0);   /* 0: round to nearest even */
}

NARROW_FOLD(fold_add_e_hw, f16_to_f_hw, f_to_f16_hw, ADD, F16C)
NARROW_FOLD(fold_mul_e_hw, f16_to_f_hw, f_to_f16_hw, MUL, F16C)
#define HAS_F16C() (__builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx"))

#if __GNUC__ >= 12
/* float16 arithmetic in float16 by the CPU's AVX512-FP16 instructions where
 * it has them (vaddsh, vmulsh and their vector forms): IEEE float16 add and
 * multiply, round to nearest even, subnormals kept (these instructions
 * ignore MXCSR's DAZ and FTZ). Float32 holds 2p+2 bits of float16, so
 * rounding the float32 result again gives the float16 one: the same bits as
 * the widen, operate, round steps above. A sequential fold is a chain of
 * dependent steps; here each is one 4-cycle instruction instead of a
 * conversion, an add and a conversion back. */
#define HAVE_FP16 1
#define FP16 __attribute__((target("avx512fp16,avx512vl,avx512bw,avx512f")))

FP16 static inline __m128h
h_load(const char *p)
{
    uint16_t u;
    memcpy(&u, p, 2);
    return _mm_castsi128_ph(_mm_cvtsi32_si128(u));
}

FP16 static inline uint16_t
h_bits(__m128h v)
{
    return (uint16_t)_mm_cvtsi128_si32(_mm_castph_si128(v));
}

#define FP16_FOLD(NAME, OP, VOP)                                                     \
FP16 static void                                                                     \
NAME(const char *src, Py_ssize_t n, Py_ssize_t kept, Py_ssize_t sn, Py_ssize_t sk,  \
     uint16_t *acc)                                                                  \
{                                                                                    \
    Py_ssize_t j0 = 0;                                                               \
    if (sk == 2 && kept >= 32) {                                                     \
        /* Rows contiguous: 32 outputs per vector, one row step at a time. */       \
        for (; j0 + 32 <= kept; j0 += 32) {                                          \
            __m512h r = _mm512_castsi512_ph(_mm512_loadu_si512(acc + j0));            \
            const char *p = src + 2 * j0;                                            \
            for (Py_ssize_t i = 0; i < n; i++, p += sn)                              \
                r = VOP(r, _mm512_castsi512_ph(_mm512_loadu_si512(p)));              \
            _mm512_storeu_si512(acc + j0, _mm512_castph_si512(r));                   \
        }                                                                            \
    }                                                                                \
    for (; j0 + CHAINS <= kept; j0 += CHAINS) {                                      \
        __m128h r[CHAINS];                                                           \
        for (int t = 0; t < CHAINS; t++)                                             \
            r[t] = h_load((const char *)(acc + j0 + t));                             \
        const char *p = src + j0 * sk;                                               \
        for (Py_ssize_t i = 0; i < n; i++, p += sn)                                  \
            for (int t = 0; t < CHAINS; t++)                                         \
                r[t] = OP(r[t], h_load(p + t * sk));                                 \
        for (int t = 0; t < CHAINS; t++)                                             \
            acc[j0 + t] = h_bits(r[t]);                                              \
    }                                                                                \
    for (; j0 < kept; j0++) {                                                        \
        __m128h r = h_load((const char *)(acc + j0));                                \
        const char *p = src + j0 * sk;                                               \
        for (Py_ssize_t i = 0; i < n; i++, p += sn)                                  \
            r = OP(r, h_load(p));                                                    \
        acc[j0] = h_bits(r);                                                         \
    }                                                                                \
}

FP16_FOLD(fold_add_e_fp16, _mm_add_sh, _mm512_add_ph)
FP16_FOLD(fold_mul_e_fp16, _mm_mul_sh, _mm512_mul_ph)
#define HAS_FP16() (__builtin_cpu_supports("avx512fp16") && __builtin_cpu_supports("avx512vl") \
                    && __builtin_cpu_supports("avx512bw"))
#else
#define HAVE_FP16 0
#define HAS_FP16() 0
#endif
#else
#define HAVE_F16C 0
#define HAS_F16C() 0
#define HAVE_FP16 0
#define HAS_FP16() 0
#endif

PyDoc_STRVAR(fold_doc,
"fold(kind, x, acc, isa=0)\n\n"
"The left fold of the rows of the 2-d float32/float64 buffer x (any\n"
"strides) into acc, a contiguous buffer of x's type and row length:\n"
"acc[j] = (((acc[j] op x[0, j]) op x[1, j]) ...) op x[n-1, j], each step\n"
"rounded to the element type; kind: 'add' or 'multiply'. float16 buffers\n"
"(format 'e') fold in float16; uint16 buffers (format 'H') hold bfloat16\n"
"bits and fold in bfloat16. isa: the instructions it may use, 0 the best\n"
"the CPU has (float16 steps by AVX512-FP16 arithmetic, else F16C\n"
"conversions), 1 (True) portable C, 2 at most AVX2 and F16C, 3 x86-64's\n"
"baseline; every level gives the same bits (the tests compare them).");

static PyObject *
py_fold(PyObject *self, PyObject *args)
{
    const char *kind;
    PyObject *ox, *oa;
    int isa = ISA_BEST;
    if (!PyArg_ParseTuple(args, "sOO|i:fold", &kind, &ox, &oa, &isa))
        return NULL;
    if (isa < ISA_BEST || isa > ISA_SSE2)
        return PyErr_Format(PyExc_ValueError, "fold: isa must be 0 to 3, not %d", isa);
    int hw = (isa == ISA_BEST || isa == ISA_AVX2) && HAS_F16C();
    int fp16 = isa == ISA_BEST && HAS_FP16();
    int add = strcmp(kind, "add") == 0;
    if (!add && strcmp(kind, "multiply") != 0)
        return PyErr_Format(PyExc_ValueError, "fold: kind must be 'add' or 'multiply', not '%s'",
                            kind);
    Py_buffer a, x;
    if (get_contiguous(oa, &a, 1, 0, "fold acc") < 0)
        return NULL;
    char k = float_kind(&a);
    if (k == 'F' || k == 'D') {
        PyBuffer_Release(&a);
        return PyErr_Format(PyExc_TypeError,
                            "fold: complex buffers fold as their real and imaginary parts");
    }
    if (get_strided(ox, &x, 2, k, "fold x") < 0) {
        PyBuffer_Release(&a);
        return NULL;
    }
    Py_ssize_t n = x.shape[0], kept = x.shape[1];
    int ok = a.len == kept * a.itemsize;
    if (!ok)
        PyErr_Format(PyExc_ValueError, "fold: acc has %zd elements, x rows %zd",
                     a.len / a.itemsize, kept);
    else if (n > 0 && kept > 0) {
        const char *src = (const char *)x.buf;
        Py_ssize_t sn = x.strides[0], sk = x.strides[1];
        Py_BEGIN_ALLOW_THREADS
        if (k == 'f')
            (add ? fold_add_f : fold_mul_f)(src, n, kept, sn, sk, (float *)a.buf);
        else if (k == 'd')
            (add ? fold_add_d : fold_mul_d)(src, n, kept, sn, sk, (double *)a.buf);
#if HAVE_FP16
        else if (k == 'e' && fp16)
            (add ? fold_add_e_fp16 : fold_mul_e_fp16)(src, n, kept, sn, sk, (uint16_t *)a.buf);
#endif
#if HAVE_F16C
        else if (k == 'e' && hw)
            (add ? fold_add_e_hw : fold_mul_e_hw)(src, n, kept, sn, sk, (uint16_t *)a.buf);
#endif
        else if (k == 'e')
            (add ? fold_add_e : fold_mul_e)(src, n, kept, sn, sk, (uint16_t *)a.buf);
#if HAVE_CHAIN_B
        else if (isa != ISA_PORTABLE)
            fold_b_chained(src, n, kept, sn, sk, (uint16_t *)a.buf, add, isa);
#endif
        else
            (add ? fold_add_b : fold_mul_b)(src, n, kept, sn, sk, (uint16_t *)a.buf);
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&x);
    PyBuffer_Release(&a);
    if (!ok)
        return NULL;
    Py_RETURN_NONE;
}

/* ---- contraction ------------------------------------------------------------ */

/* Outputs per block of a row of the result (kept in L1 across k). */
#define NBLOCK 512


/* ---- register tiles ----
 * Where w's rows are contiguous, the result is computed in tiles of MR rows
 * by NR vectors of outputs held in registers while k runs over a chunk of
 * KC contracted indices: per k, NR vectors of w are loaded once for MR rows
 * and each output takes one rounded product and one rounded sum, k after k,
 * exactly as in the row loop below (the order within an output is the
 * contract; outputs advancing side by side in SIMD lanes and chunks of k
 * changing nothing in it). The tile function fills [0, Mt) x [0, Nt) and
 * returns those bounds; the row loop does the rest. */
#define KC 256

#define TILE(T, V, MR, NR)                                                           \
    do {                                                                             \
        V c[MR][NR];                                                                 \
        T *crow = acc + (b * M + m0) * N + n0;                                       \
        for (int r = 0; r < MR; r++)                                                 \
            for (int v = 0; v < NR; v++)                                             \
                memcpy(&c[r][v], crow + r * N + v * L, sizeof(V));                   \
        const char *ap = abase + m0 * sa[1] + k0 * sa[2];                            \
        const char *wp = wbase + k0 * sw[1] + n0 * (Py_ssize_t)sizeof(T);            \
        for (Py_ssize_t k = k0; k < k1; k++, ap += sa[2], wp += sw[1]) {             \
            V w[NR];                                                                 \
            for (int v = 0; v < NR; v++)                                             \
                memcpy(&w[v], wp + v * sizeof(V), sizeof(V));                        \
            for (int r = 0; r < MR; r++) {                                           \
                const T s = *(const T *)(ap + r * sa[1]);                            \
                for (int v = 0; v < NR; v++) {                                       \
                    V p = w[v] * s;                                                  \
                    c[r][v] = c[r][v] + p;                                           \
                }                                                                    \
            }                                                                        \
        }                                                                            \
        for (int r = 0; r < MR; r++)                                                 \
            for (int v = 0; v < NR; v++)                                             \
                memcpy(crow + r * N + v * L, &c[r][v], sizeof(V));                   \
    } while (0)

/* 4 rows x 2 vectors where a row has two vectors of outputs, else 8 rows x
 * 1 vector: 8 independent accumulators either way (an add's latency times
 * the adds per cycle). */
#define TILED(NAME, T, VB, ATTR)                                                     \
ATTR static void                                                                     \
NAME(const Py_buffer *A, const Py_buffer *W, T *acc, Py_ssize_t *pMt, Py_ssize_t *pNt) \
{                                                                                    \
    typedef T V __attribute__((vector_size(VB)));                                    \
    enum { L = VB / sizeof(T) };                                                     \
    Py_ssize_t B = A->shape[0], M = A->shape[1], K = A->shape[2], N = W->shape[2];   \
    const Py_ssize_t *sa = A->strides, *sw = W->strides;                             \
    int wide = N >= 2 * L;                                                           \
    Py_ssize_t Mt = wide ? M - M % 4 : M - M % 8;                                    \
    Py_ssize_t Nt = wide ? N - N % (2 * L) : N - N % L;                              \
    *pMt = Mt;                                                                       \
    *pNt = Nt;                                                                       \
    for (Py_ssize_t b = 0; b < B; b++) {                                             \
        const char *abase = (const char *)A->buf + b * sa[0];                        \
        const char *wbase = (const char *)W->buf + b * sw[0];                        \
        for (Py_ssize_t k0 = 0; k0 < K; k0 += KC) {                                  \
            Py_ssize_t k1 = K - k0 < KC ? K : k0 + KC;                               \
            for (Py_ssize_t n0 = 0; n0 < Nt; n0 += wide ? 2 * L : L)                 \
                for (Py_ssize_t m0 = 0; m0 < Mt; m0 += wide ? 4 : 8) {               \
                    if (wide)                                                        \
                        TILE(T, V, 4, 2);                                            \
                    else                                                             \
                        TILE(T, V, 8, 1);                                            \
                }                                                                    \
        }                                                                            \
    }                                                                                \
}

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
/* AVX512F and AVX2 hold more lanes; neither instruction set changes an
 * IEEE add or multiply (fused multiply-adds are off, see the top). */
TILED(tile_f_512, float, 64, __attribute__((target("avx512f"))))
TILED(tile_d_512, double, 64, __attribute__((target("avx512f"))))
TILED(tile_f_256, float, 32, __attribute__((target("avx2"))))
TILED(tile_d_256, double, 32, __attribute__((target("avx2"))))
#define WIDE_TILES(T, A, W, acc, Mt, Nt)                                             \
    if (isa == ISA_BEST && __builtin_cpu_supports("avx512f")) {                      \
        tile_##T##_512(A, W, acc, Mt, Nt);                                           \
        return;                                                                      \
    }                                                                                \
    if (isa != ISA_SSE2 && __builtin_cpu_supports("avx2")) {                         \
        tile_##T##_256(A, W, acc, Mt, Nt);                                           \
        return;                                                                      \
    }
#else
#define WIDE_TILES(T, A, W, acc, Mt, Nt)
#endif
TILED(tile_f_128, float, 16, )
TILED(tile_d_128, double, 16, )

static void
tile_f(const Py_buffer *A, const Py_buffer *W, float *acc, Py_ssize_t *Mt, Py_ssize_t *Nt,
       int isa)
{
    WIDE_TILES(f, A, W, acc, Mt, Nt)
    tile_f_128(A, W, acc, Mt, Nt);
}

static void
tile_d(const Py_buffer *A, const Py_buffer *W, double *acc, Py_ssize_t *Mt, Py_ssize_t *Nt,
       int isa)
{
    WIDE_TILES(d, A, W, acc, Mt, Nt)
    tile_d_128(A, W, acc, Mt, Nt);
}

/* acc[b, m, n] = (((acc[b, m, n] + a[b, m, 0] * w[b, 0, n]) + a[b, m, 1] *
 * w[b, 1, n]) ...), each product and each sum rounded to T. */
#define CONTRACT(NAME, T, TILES)                                                     \
VECTOR_CLONES static void                                                            \
NAME##_rows(const Py_buffer *A, const Py_buffer *W, T *acc, Py_ssize_t m_lo,         \
            Py_ssize_t m_hi, Py_ssize_t n_lo, Py_ssize_t n_hi)                       \
{                                                                                    \
    /* rows m_lo..m_hi, columns n_lo..n_hi: per row, k after k, a block of        \
     * outputs advancing together */                                                \
    Py_ssize_t B = A->shape[0], M = A->shape[1], K = A->shape[2], N = W->shape[2];   \
    const Py_ssize_t *sa = A->strides, *sw = W->strides;                             \
    for (Py_ssize_t b = 0; b < B; b++)                                               \
        for (Py_ssize_t m = m_lo; m < m_hi; m++) {                                   \
            const char *arow = (const char *)A->buf + b * sa[0] + m * sa[1];         \
            for (Py_ssize_t n0 = n_lo; n0 < n_hi; n0 += NBLOCK) {                    \
                Py_ssize_t w = n_hi - n0 < NBLOCK ? n_hi - n0 : NBLOCK;              \
                T *restrict c = acc + (b * M + m) * N + n0;                          \
                const char *wk = (const char *)W->buf + b * sw[0] + n0 * sw[2];      \
                for (Py_ssize_t k = 0; k < K; k++, wk += sw[1]) {                    \
                    const T av = *(const T *)(arow + k * sa[2]);                     \
                    if (sw[2] == (Py_ssize_t)sizeof(T)) {                            \
                        const T *restrict wr = (const T *)wk;                        \
                        for (Py_ssize_t j = 0; j < w; j++) {                         \
                            T p = av * wr[j];                                        \
                            c[j] = c[j] + p;                                         \
                        }                                                            \
                    }                                                                \
                    else                                                             \
                        for (Py_ssize_t j = 0; j < w; j++) {                         \
                            T p = av * *(const T *)(wk + j * sw[2]);                 \
                            c[j] = c[j] + p;                                         \
                        }                                                            \
                }                                                                    \
            }                                                                        \
        }                                                                            \
}                                                                                    \
                                                                                     \
VECTOR_CLONES static void                                                            \
NAME##_narrow(const Py_buffer *A, const Py_buffer *W, T *acc)                        \
{                                                                                    \
    /* Narrow rows (a matrix-vector product): CHAINS rows of a at once,             \
     * independent chains over k. */                                                \
    Py_ssize_t B = A->shape[0], M = A->shape[1], K = A->shape[2], N = W->shape[2];   \
    const Py_ssize_t *sa = A->strides, *sw = W->strides;                             \
    for (Py_ssize_t b = 0; b < B; b++)                                               \
        for (Py_ssize_t n = 0; n < N; n++) {                                         \
            const char *wn = (const char *)W->buf + b * sw[0] + n * sw[2];           \
            Py_ssize_t m0 = 0;                                                       \
            for (; m0 + CHAINS <= M; m0 += CHAINS) {                                 \
                T r[CHAINS];                                                         \
                const char *am = (const char *)A->buf + b * sa[0] + m0 * sa[1];      \
                for (int t = 0; t < CHAINS; t++)                                     \
                    r[t] = acc[(b * M + m0 + t) * N + n];                            \
                for (Py_ssize_t k = 0; k < K; k++) {                                 \
                    const T wv = *(const T *)(wn + k * sw[1]);                       \
                    for (int t = 0; t < CHAINS; t++) {                               \
                        T p = *(const T *)(am + t * sa[1] + k * sa[2]) * wv;         \
                        r[t] = r[t] + p;                                             \
                    }                                                                \
                }                                                                    \
                for (int t = 0; t < CHAINS; t++)                                     \
                    acc[(b * M + m0 + t) * N + n] = r[t];                            \
            }                                                                        \
            for (; m0 < M; m0++) {                                                   \
                T r = acc[(b * M + m0) * N + n];                                     \
                const char *am = (const char *)A->buf + b * sa[0] + m0 * sa[1];      \
                for (Py_ssize_t k = 0; k < K; k++) {                                 \
                    T p = *(const T *)(am + k * sa[2]) * *(const T *)(wn + k * sw[1]); \
                    r = r + p;                                                       \
                }                                                                    \
                acc[(b * M + m0) * N + n] = r;                                       \
            }                                                                        \
        }                                                                            \
}                                                                                    \
                                                                                     \
static void                                                                          \
NAME(const Py_buffer *A, const Py_buffer *W, T *acc, int isa)                        \
{                                                                                    \
    Py_ssize_t M = A->shape[1], N = W->shape[2], Mt = 0, Nt = 0;                     \
    if (N < 2 * CHAINS && M >= CHAINS) {                                             \
        NAME##_narrow(A, W, acc);                                                    \
        return;                                                                      \
    }                                                                                \
    if (isa != ISA_PORTABLE && W->strides[2] == (Py_ssize_t)sizeof(T))               \
        TILES(A, W, acc, &Mt, &Nt, isa);                                             \
    NAME##_rows(A, W, acc, 0, M, Nt, N);                                             \
    NAME##_rows(A, W, acc, Mt, M, 0, Nt);                                            \
}

CONTRACT(contract_f, float, tile_f)
CONTRACT(contract_d, double, tile_d)

/* float16/bfloat16: each product rounded to the type, then each sum. */
/* One step of a float16/bfloat16 contraction over a row of N outputs:
 * c[j] = round(c[j] + round(av * w[j])), c the row's accumulators as
 * float32 (each exactly a value of the type). */
static inline float
round_bf16(float f)
{
    /* bf16_to_f(f_to_bf16(f)) without a branch, so that it vectorizes */
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t nearest = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    uint32_t nan = (u | 0x00400000u) & 0xffff0000u;
    u = (u & 0x7fffffffu) > 0x7f800000u ? nan : nearest;
    memcpy(&f, &u, 4);
    return f;
}

VECTOR_CLONES static void
row_b(float *restrict c, const char *w, Py_ssize_t sw, float av, Py_ssize_t n)
{
    if (sw == 2) {
        const uint16_t *restrict wr = (const uint16_t *)w;
        for (Py_ssize_t j = 0; j < n; j++) {
            float p = round_bf16(av * bf16_to_f(wr[j]));
            c[j] = round_bf16(c[j] + p);
        }
    }
    else
        for (Py_ssize_t j = 0; j < n; j++) {
            float p = round_bf16(av * bf16_to_f(*(const uint16_t *)(w + j * sw)));
            c[j] = round_bf16(c[j] + p);
        }
}

static void
row_e(float *restrict c, const char *w, Py_ssize_t sw, float av, Py_ssize_t n)
{
    for (Py_ssize_t j = 0; j < n; j++) {
        float p = f16_to_f(f_to_f16(av * f16_to_f(*(const uint16_t *)(w + j * sw))));
        c[j] = f16_to_f(f_to_f16(c[j] + p));
    }
}

#if HAVE_F16C
__attribute__((target("avx,f16c"))) static void
row_e_hw(float *restrict c, const char *w, Py_ssize_t sw, float av, Py_ssize_t n)
{
    Py_ssize_t j = 0;
    if (sw == 2) {
        const __m256 a = _mm256_set1_ps(av);
        for (; j + 8 <= n; j += 8) {
            __m256 wv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + 2 * j)));
            __m256 p = _mm256_mul_ps(a, wv);
            p = _mm256_cvtph_ps(_mm256_cvtps_ph(p, 0));
            __m256 s = _mm256_add_ps(_mm256_loadu_ps(c + j), p);
            _mm256_storeu_ps(c + j, _mm256_cvtph_ps(_mm256_cvtps_ph(s, 0)));
        }
    }
    for (; j < n; j++) {
        float p = f16_to_f_hw(f_to_f16_hw(av * f16_to_f_hw(*(const uint16_t *)(w + j * sw))));
        c[j] = f16_to_f_hw(f_to_f16_hw(c[j] + p));
    }
}
#endif

#define NARROW_CONTRACT(NAME, TO_F, FROM_F, ROW)                                     \
static void                                                                          \
NAME##_range(const Py_buffer *A, const Py_buffer *W, uint16_t *acc, float *c,        \
             Py_ssize_t m_lo, Py_ssize_t m_hi, Py_ssize_t n_lo, Py_ssize_t n_hi)     \
{                                                                                    \
    /* c: n_hi - n_lo floats of scratch, one accumulator row */                     \
    Py_ssize_t B = A->shape[0], M = A->shape[1], K = A->shape[2], N = W->shape[2];   \
    Py_ssize_t nn = n_hi - n_lo;                                                     \
    const Py_ssize_t *sa = A->strides, *sw = W->strides;                             \
    for (Py_ssize_t b = 0; b < B; b++)                                               \
        for (Py_ssize_t m = m_lo; m < m_hi; m++) {                                   \
            const char *arow = (const char *)A->buf + b * sa[0] + m * sa[1];         \
            uint16_t *out = acc + (b * M + m) * N + n_lo;                            \
            for (Py_ssize_t j = 0; j < nn; j++)                                      \
                c[j] = TO_F(out[j]);                                                 \
            const char *wk = (const char *)W->buf + b * sw[0] + n_lo * sw[2];        \
            for (Py_ssize_t k = 0; k < K; k++, wk += sw[1])                          \
                ROW(c, wk, sw[2], TO_F(*(const uint16_t *)(arow + k * sa[2])), nn);  \
            for (Py_ssize_t j = 0; j < nn; j++)                                      \
                out[j] = FROM_F(c[j]);                                               \
        }                                                                            \
}                                                                                    \
                                                                                     \
static void                                                                          \
NAME(const Py_buffer *A, const Py_buffer *W, uint16_t *acc, float *c)                \
{                                                                                    \
    NAME##_range(A, W, acc, c, 0, A->shape[1], 0, W->shape[2]);                      \
}

NARROW_CONTRACT(contract_e, f16_to_f, f_to_f16, row_e)
NARROW_CONTRACT(contract_b, bf16_to_f, f_to_bf16, row_b)

/* bfloat16 contractions in register tiles: float32 accumulators holding
 * bfloat16 values, each product and each sum rounded to bfloat16 by integer
 * steps on the float32 bits (round_bf16 without its NaN branch: the NaNs a
 * product or sum of bfloat16 values makes are quiet with 16 zero low bits,
 * which the rounding leaves as they are). */
#define BF_ROUND(U, x)                                                               \
    ({                                                                               \
        U u_ = (U)(x);                                                               \
        u_ = (u_ + 0x7fffu + ((u_ >> 16) & 1u)) & 0xffff0000u;                       \
        (__typeof__(x))u_;                                                           \
    })

/* Panels of a and w as float32, converted once per block (the tiles then
 * load w's vectors and broadcast a's values straight from memory, with no
 * conversion per use): a's panel is BM rows by the k chunk, w's the k chunk
 * by BN outputs. */
#define BM 64
#define BN 512

#define TILE_B(MR, NR, RND)                                                          \
    do {                                                                             \
        V c[MR][NR];                                                                 \
        uint16_t *crow = acc + (b * M + m0) * N + n0;                                \
        for (int r = 0; r < MR; r++)                                                 \
            for (int v = 0; v < NR; v++) {                                           \
                H h;                                                                 \
                memcpy(&h, crow + r * N + v * L, sizeof(H));                         \
                c[r][v] = (V)(__builtin_convertvector(h, U) << 16);                  \
            }                                                                        \
        const float *ap = fa + (m0 - mb) * KC;                                       \
        const float *wp = fw + (n0 - nb);                                            \
        for (Py_ssize_t k = 0; k < kn; k++, ap++, wp += BN) {                        \
            V w[NR];                                                                 \
            for (int v = 0; v < NR; v++)                                             \
                memcpy(&w[v], wp + v * L, sizeof(V));                                \
            for (int r = 0; r < MR; r++) {                                           \
                const float s = ap[r * KC];                                          \
                for (int v = 0; v < NR; v++) {                                       \
                    V p = RND(U, w[v] * s);                                          \
                    c[r][v] = RND(U, c[r][v] + p);                                   \
                }                                                                    \
            }                                                                        \
        }                                                                            \
        for (int r = 0; r < MR; r++)                                                 \
            for (int v = 0; v < NR; v++) {                                           \
                H h = __builtin_convertvector((U)c[r][v] >> 16, H);                  \
                memcpy(crow + r * N + v * L, &h, sizeof(H));                         \
            }                                                                        \
    } while (0)

/* fa (BM x KC floats) and fw (KC x BN floats): scratch for the panels. */
#define TILED_B(NAME, VB, ATTR, RND)                                                 \
ATTR static void                                                                     \
NAME(const Py_buffer *A, const Py_buffer *W, uint16_t *acc, Py_ssize_t *pMt,         \
     Py_ssize_t *pNt, float *fa, float *fw)                                          \
{                                                                                    \
    typedef float V __attribute__((vector_size(VB)));                                \
    typedef uint32_t U __attribute__((vector_size(VB)));                             \
    typedef uint16_t H __attribute__((vector_size(VB / 2)));                         \
    enum { L = VB / 4 };                                                             \
    Py_ssize_t B = A->shape[0], M = A->shape[1], K = A->shape[2], N = W->shape[2];   \
    const Py_ssize_t *sa = A->strides, *sw = W->strides;                             \
    int wide = N >= 2 * L;                                                           \
    Py_ssize_t Mt = wide ? M - M % 4 : M - M % 8;                                    \
    Py_ssize_t Nt = wide ? N - N % (2 * L) : N - N % L;                              \
    *pMt = Mt;                                                                       \
    *pNt = Nt;                                                                       \
    for (Py_ssize_t b = 0; b < B; b++) {                                             \
        const char *abase = (const char *)A->buf + b * sa[0];                        \
        const char *wbase = (const char *)W->buf + b * sw[0];                        \
        for (Py_ssize_t k0 = 0; k0 < K; k0 += KC) {                                  \
            Py_ssize_t kn = K - k0 < KC ? K - k0 : KC;                               \
            for (Py_ssize_t nb = 0; nb < Nt; nb += BN) {                             \
                Py_ssize_t ne = Nt - nb < BN ? Nt : nb + BN;                         \
                for (Py_ssize_t k = 0; k < kn; k++) {                                \
                    const uint16_t *wr = (const uint16_t *)(wbase + (k0 + k) * sw[1]); \
                    for (Py_ssize_t j = nb; j < ne; j++)                             \
                        fw[k * BN + j - nb] = bf16_to_f(wr[j]);                      \
                }                                                                    \
                for (Py_ssize_t mb = 0; mb < Mt; mb += BM) {                         \
                    Py_ssize_t me = Mt - mb < BM ? Mt : mb + BM;                     \
                    for (Py_ssize_t m = mb; m < me; m++)                             \
                        for (Py_ssize_t k = 0; k < kn; k++)                          \
                            fa[(m - mb) * KC + k] = bf16_to_f(                       \
                                *(const uint16_t *)(abase + m * sa[1] + (k0 + k) * sa[2])); \
                    for (Py_ssize_t n0 = nb; n0 < ne; n0 += wide ? 2 * L : L)        \
                        for (Py_ssize_t m0 = mb; m0 < me; m0 += wide ? 4 : 8) {      \
                            if (wide)                                                \
                                TILE_B(4, 2, RND);                                   \
                            else                                                     \
                                TILE_B(8, 1, RND);                                   \
                        }                                                            \
                }                                                                    \
            }                                                                        \
        }                                                                            \
    }                                                                                \
}

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define AVX512_BW __attribute__((target("avx512f,avx512bw")))
/* BF_ROUND in 4 instructions: a test of bit 16 into a mask register picks
 * u + 0x8000 over u + 0x7fff (a masked add), then the mask of the top half. */
AVX512_BW static inline __m512
bf_round_512(__m512 x)
{
    __m512i u = _mm512_castps_si512(x);
    __mmask16 odd = _mm512_test_epi32_mask(u, _mm512_set1_epi32(0x10000));
    __m512i t = _mm512_mask_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), odd, u,
                                      _mm512_set1_epi32(0x8000));
    return _mm512_castsi512_ps(_mm512_and_si512(t, _mm512_set1_epi32((int)0xffff0000u)));
}
#define BF_ROUND_512(U, x) ((__typeof__(x))bf_round_512((__m512)(x)))
TILED_B(tile_b_512, 64, AVX512_BW, BF_ROUND_512)
TILED_B(tile_b_256, 32, __attribute__((target("avx2"))), BF_ROUND)
#define WIDE_TILES_B(A, W, acc, Mt, Nt, fa, fw)                                      \
    if (isa == ISA_BEST && __builtin_cpu_supports("avx512f") &&                      \
        __builtin_cpu_supports("avx512bw")) {                                        \
        tile_b_512(A, W, acc, Mt, Nt, fa, fw);                                       \
        return;                                                                      \
    }                                                                                \
    if (isa != ISA_SSE2 && __builtin_cpu_supports("avx2")) {                         \
        tile_b_256(A, W, acc, Mt, Nt, fa, fw);                                       \
        return;                                                                      \
    }
#else
#define WIDE_TILES_B(A, W, acc, Mt, Nt, fa, fw)
#endif
TILED_B(tile_b_128, 16, , BF_ROUND)

static void
tile_b(const Py_buffer *A, const Py_buffer *W, uint16_t *acc, Py_ssize_t *Mt, Py_ssize_t *Nt,
       float *fa, float *fw, int isa)
{
    WIDE_TILES_B(A, W, acc, Mt, Nt, fa, fw)
    tile_b_128(A, W, acc, Mt, Nt, fa, fw);
}

/* c: a row of scratch (N floats); panels: BM * KC + KC * BN floats. */
static void
contract_b_tiled(const Py_buffer *A, const Py_buffer *W, uint16_t *acc, float *c,
                 float *panels, int isa)
{
    Py_ssize_t M = A->shape[1], N = W->shape[2], Mt, Nt;
    tile_b(A, W, acc, &Mt, &Nt, panels, panels + BM * KC, isa);
    contract_b_range(A, W, acc, c, 0, M, Nt, N);
    contract_b_range(A, W, acc, c, Mt, M, 0, Nt);
}
#if HAVE_F16C
NARROW_CONTRACT(contract_e_hw, f16_to_f, f_to_f16, row_e_hw)
#endif

#if HAVE_FP16
/* float16 contractions in float16 arithmetic (AVX512-FP16): register tiles
 * of 32 outputs a vector, each product and each sum one float16 rounding
 * (the same bits as float32 steps rounded, see HAVE_FP16); the outputs the
 * tiles leave, one chain each. */
TILED(tile_e_fp16, _Float16, 64, FP16)

FP16 static void
rows_e_fp16(const Py_buffer *A, const Py_buffer *W, uint16_t *acc, Py_ssize_t m_lo,
            Py_ssize_t m_hi, Py_ssize_t n_lo, Py_ssize_t n_hi)
{
    Py_ssize_t B = A->shape[0], M = A->shape[1], K = A->shape[2], N = W->shape[2];
    const Py_ssize_t *sa = A->strides, *sw = W->strides;
    for (Py_ssize_t b = 0; b < B; b++)
        for (Py_ssize_t m = m_lo; m < m_hi; m++)
            for (Py_ssize_t n = n_lo; n < n_hi; n++) {
                const char *ap = (const char *)A->buf + b * sa[0] + m * sa[1];
                const char *wp = (const char *)W->buf + b * sw[0] + n * sw[2];
                uint16_t *c = acc + (b * M + m) * N + n;
                __m128h r = h_load((const char *)c);
                for (Py_ssize_t k = 0; k < K; k++, ap += sa[2], wp += sw[1])
                    r = _mm_add_sh(r, _mm_mul_sh(h_load(ap), h_load(wp)));
                *c = h_bits(r);
            }
}

static void
contract_e_fp16(const Py_buffer *A, const Py_buffer *W, uint16_t *acc)
{
    Py_ssize_t M = A->shape[1], N = W->shape[2], Mt, Nt;
    tile_e_fp16(A, W, (_Float16 *)acc, &Mt, &Nt);
    rows_e_fp16(A, W, acc, 0, M, Nt, N);
    rows_e_fp16(A, W, acc, Mt, M, 0, Nt);
}
#endif

/* complex: each product by the textbook formula, every product and sum
 * rounded to the part type (Element.cpp operator*), added componentwise. */
#define COMPLEX_CONTRACT(NAME, T)                                                    \
VECTOR_CLONES static void                                                            \
NAME(const Py_buffer *A, const Py_buffer *W, T *acc)                                 \
{                                                                                    \
    Py_ssize_t B = A->shape[0], M = A->shape[1], K = A->shape[2], N = W->shape[2];   \
    const Py_ssize_t *sa = A->strides, *sw = W->strides;                             \
    for (Py_ssize_t b = 0; b < B; b++)                                               \
        for (Py_ssize_t m = 0; m < M; m++) {                                         \
            const char *arow = (const char *)A->buf + b * sa[0] + m * sa[1];         \
            T *restrict c = acc + 2 * (b * M + m) * N;                               \
            const char *wk = (const char *)W->buf + b * sw[0];                       \
            for (Py_ssize_t k = 0; k < K; k++, wk += sw[1]) {                        \
                const T *ap = (const T *)(arow + k * sa[2]);                         \
                const T ar = ap[0], ai = ap[1];                                      \
                for (Py_ssize_t j = 0; j < N; j++) {                                 \
                    const T *wp = (const T *)(wk + j * sw[2]);                       \
                    T rr = ar * wp[0], ii = ai * wp[1], ri = ar * wp[1], ir = ai * wp[0]; \
                    T pr = rr - ii, pi = ri + ir;                                    \
                    c[2 * j] = c[2 * j] + pr;                                        \
                    c[2 * j + 1] = c[2 * j + 1] + pi;                                \
                }                                                                    \
            }                                                                        \
        }                                                                            \
}

COMPLEX_CONTRACT(contract_F, float)
COMPLEX_CONTRACT(contract_D, double)

PyDoc_STRVAR(contract_doc,
"contract(a, w, acc, isa=0)\n\n"
"acc[b, m, n] += a[b, m, k] * w[b, k, n] for k = 0, 1, ... in order, each\n"
"product and each sum rounded to the element type (float32, float64,\n"
"float16, bfloat16 given as its uint16 bits, complex64, complex128; a\n"
"complex product by the textbook formula, each step rounded):\n"
"a (B, M, K) and w (B, K, N) of any strides, acc (B, M, N) contiguous;\n"
"isa as for fold.");

static PyObject *
py_contract(PyObject *self, PyObject *args)
{
    PyObject *oa, *ow, *oc;
    int isa = ISA_BEST;
    if (!PyArg_ParseTuple(args, "OOO|i:contract", &oa, &ow, &oc, &isa))
        return NULL;
    if (isa < ISA_BEST || isa > ISA_SSE2)
        return PyErr_Format(PyExc_ValueError, "contract: isa must be 0 to 3, not %d", isa);
    int hw = (isa == ISA_BEST || isa == ISA_AVX2) && HAS_F16C();
    int fp16 = isa == ISA_BEST && HAS_FP16();
    Py_buffer c, a, w;
    if (get_contiguous(oc, &c, 1, 0, "contract acc") < 0)
        return NULL;
    char k = float_kind(&c);
    if (get_strided(oa, &a, 3, k, "contract a") < 0) {
        PyBuffer_Release(&c);
        return NULL;
    }
    if (get_strided(ow, &w, 3, k, "contract w") < 0) {
        PyBuffer_Release(&c);
        PyBuffer_Release(&a);
        return NULL;
    }
    int ok = a.shape[0] == w.shape[0] && a.shape[2] == w.shape[1] &&
             c.len == a.shape[0] * a.shape[1] * w.shape[2] * c.itemsize;
    if (!ok)
        PyErr_Format(PyExc_ValueError,
                     "contract: shapes do not match: a (%zd, %zd, %zd), w (%zd, %zd, %zd), "
                     "acc of %zd elements", a.shape[0], a.shape[1], a.shape[2], w.shape[0],
                     w.shape[1], w.shape[2], c.len / c.itemsize);
    else {
        float *row = NULL, *panels = NULL;
        int tiled_b = k == 'H' && w.strides[2] == 2 && isa != ISA_PORTABLE;
        if (k == 'e' || k == 'H') {
            row = PyMem_Malloc((size_t)(w.shape[2] > 0 ? w.shape[2] : 1) * sizeof(float));
            if (tiled_b)
                panels = PyMem_Malloc((size_t)(BM * KC + KC * BN) * sizeof(float));
            if (row == NULL || (tiled_b && panels == NULL)) {
                PyErr_NoMemory();
                ok = 0;
            }
        }
        if (ok) {
            Py_BEGIN_ALLOW_THREADS
            if (k == 'f')
                contract_f(&a, &w, (float *)c.buf, isa);
            else if (k == 'd')
                contract_d(&a, &w, (double *)c.buf, isa);
            else if (k == 'F')
                contract_F(&a, &w, (float *)c.buf);
            else if (k == 'D')
                contract_D(&a, &w, (double *)c.buf);
#if HAVE_FP16
            else if (k == 'e' && fp16 && w.strides[2] == 2 && w.shape[2] >= 32 && a.shape[1] >= 8)
                contract_e_fp16(&a, &w, (uint16_t *)c.buf);
#endif
#if HAVE_F16C
            else if (k == 'e' && hw)
                contract_e_hw(&a, &w, (uint16_t *)c.buf, row);
#endif
            else if (k == 'e')
                contract_e(&a, &w, (uint16_t *)c.buf, row);
            else if (tiled_b)
                contract_b_tiled(&a, &w, (uint16_t *)c.buf, row, panels, isa);
            else
                contract_b(&a, &w, (uint16_t *)c.buf, row);
            Py_END_ALLOW_THREADS
        }
        PyMem_Free(row);
        PyMem_Free(panels);
    }
    PyBuffer_Release(&c);
    PyBuffer_Release(&a);
    PyBuffer_Release(&w);
    if (!ok)
        return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"unary", py_unary, METH_VARARGS, unary_doc},
    {"binary", py_binary, METH_VARARGS, binary_doc},
    {"fold", py_fold, METH_VARARGS, fold_doc},
    {"contract", py_contract, METH_VARARGS, contract_doc},
    {"cdiv", py_cdiv, METH_VARARGS, cdiv_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_libm_loops",
    "Spec mode's C library calls and sequential folds as C loops (see _libm_loops.c).",
    0, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__libm_loops(void)
{
#if FLT_EVAL_METHOD != 0
    /* Excess precision (x87) would round differently: the numpy path is used. */
    PyErr_SetString(PyExc_ImportError, "_libm_loops: FLT_EVAL_METHOD is not 0");
    return NULL;
#else
    return PyModule_Create(&module);
#endif
}
