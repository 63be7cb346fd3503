/* stablehlo_interpreter._sums: float32 sums accumulated in float64, in a
 * fixed order, at memory speed.
 *
 * Why hand-written C: accurate numerics add float32 values in float64
 * (reducers.py). numpy can only do that with a casting reduction
 * (ufunc.reduce(x, dtype=float64)), which converts buffer by buffer and then
 * sums each buffer with its scalar pairwise loop: about 0.45 ns per element
 * in cache, twice what numpy's float32 sum takes and four to five times what
 * a vectorized conversion and add take. Sums fed by elementwise chains
 * (logsumexp, layer norm, batch-norm statistics) and plain jnp.sum spend
 * most of their reduction time there. A loop that converts and adds in
 * registers, with independent accumulators the compiler vectorizes (4 or 8
 * lanes, picked at load time by target_clones), runs at 0.05-0.1 ns.
 *
 * Exactness. Each function's order of additions is fixed (below) and each
 * addition is one IEEE float64 addition, so every host computes the same
 * bits whatever its vector width; reducers.py computes the same order with
 * numpy where the module is not built (tests/test_sums.py compares the two
 * bit for bit). No fused multiply-add is involved (there are no products).
 *
 * API:
 *     row_sums_f32(x, rows, n, out)
 * x: a C-contiguous float32 buffer of rows * n elements (rows of n); out: a
 * writable C-contiguous float64 buffer of rows * nb elements, nb =
 * ceil(n / BLOCK). out[r * nb + b] is the sum of block b of row r (elements
 * b * BLOCK up to (b + 1) * BLOCK): element i of the block goes to lane
 * i % LANES, each lane adds its elements in order starting from +0.0, and
 * the lanes are combined as a tree: lane l += lane l + w for w = LANES / 2,
 * ..., 2, 1; the result is lane 0.
 *
 *     lead_sums_f32(x, rows, width, out)
 * x: a C-contiguous float32 buffer of rows * width elements; out: a
 * writable C-contiguous float64 buffer of width elements. out[j] = +0.0
 * + x[0, j] + x[1, j] + ... in order (what numpy's
 * add.reduce(x, axis=0, dtype=float64) computes).
 *
 * Both release the GIL while adding and keep no state between calls; a
 * buffer of the wrong type or length raises TypeError or ValueError.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

/* target_clones needs glibc's ifunc (musl's GCC refuses it). */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__) \
    && defined(__GLIBC__)
#define SUM_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define SUM_CLONES
#endif

/* Lanes of a block: 32 float64 accumulators are 8 AVX2 or 4 AVX-512
 * registers, enough independent additions to hide the add latency. */
#define LANES 32
/* Elements per block: 128 additions per lane, then the partial sums of the
 * blocks are added pairwise by the caller (error ~(128 + 5 + log2(n/BLOCK))
 * float64 units of the sum of the absolute values). */
#define BLOCK 4096

SUM_CLONES
static void row_sums_loop(const float *restrict x, Py_ssize_t rows, Py_ssize_t n, double *restrict out)
{
    Py_ssize_t nb = (n + BLOCK - 1) / BLOCK;
    for (Py_ssize_t r = 0; r < rows; r++) {
        const float *row = x + r * n;
        for (Py_ssize_t b = 0; b < nb; b++) {
            const float *p = row + b * BLOCK;
            Py_ssize_t len = n - b * BLOCK < BLOCK ? n - b * BLOCK : BLOCK;
            double acc[LANES];
            for (int l = 0; l < LANES; l++)
                acc[l] = 0.0;
            Py_ssize_t i = 0;
            for (; i + LANES <= len; i += LANES)
                for (int l = 0; l < LANES; l++)
                    acc[l] += (double)p[i + l];
            for (int l = 0; i + l < len; l++)
                acc[l] += (double)p[i + l];
            for (int w = LANES / 2; w >= 1; w /= 2)
                for (int l = 0; l < w; l++)
                    acc[l] += acc[l + w];
            out[r * nb + b] = acc[0];
        }
    }
}

SUM_CLONES
static void lead_sums_loop(const float *restrict x, Py_ssize_t rows, Py_ssize_t width,
                           double *restrict out)
{
    for (Py_ssize_t j = 0; j < width; j++)
        out[j] = 0.0;
    for (Py_ssize_t i = 0; i < rows; i++) {
        const float *p = x + i * width;
        for (Py_ssize_t j = 0; j < width; j++)
            out[j] += (double)p[j];
    }
}

/* The buffer's struct format is the one-letter code (native order). */
static int format_is(const Py_buffer *b, char code)
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

typedef void (*sum_fn)(const float *, Py_ssize_t, Py_ssize_t, double *);

/* Parses (x, rows, n, out), checks the buffers (out_len(rows, n) float64
 * elements wanted in out) and runs loop without the GIL. */
static PyObject *run(PyObject *args, const char *name, sum_fn loop,
                     Py_ssize_t (*out_len)(Py_ssize_t, Py_ssize_t))
{
    PyObject *ox, *oout;
    Py_ssize_t rows, n;
    if (!PyArg_ParseTuple(args, "OnnO", &ox, &rows, &n, &oout))
        return NULL;
    if (rows < 0 || n < 0 || (n > 0 && rows > PY_SSIZE_T_MAX / 8 / n)) {
        PyErr_Format(PyExc_ValueError, "_sums.%s: bad shape (%zd, %zd)", name, rows, n);
        return NULL;
    }
    Py_buffer bx, bo;
    if (PyObject_GetBuffer(ox, &bx, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        return NULL;
    if (PyObject_GetBuffer(oout, &bo, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&bx);
        return NULL;
    }
    PyObject *res = NULL;
    Py_ssize_t want = out_len(rows, n);
    const char *xb = bx.buf, *ob = bo.buf;
    if (bx.itemsize != 4 || !format_is(&bx, 'f')) {
        PyErr_Format(PyExc_TypeError, "_sums.%s: x must be a float32 buffer", name);
    } else if (bo.itemsize != 8 || !format_is(&bo, 'd')) {
        PyErr_Format(PyExc_TypeError, "_sums.%s: out must be a float64 buffer", name);
    } else if (bx.len / 4 != rows * n || bo.len / 8 != want) {
        PyErr_Format(PyExc_ValueError,
                     "_sums.%s: x has %zd elements and out %zd (want %zd and %zd)",
                     name, bx.len / 4, bo.len / 8, rows * n, want);
    } else if (xb < ob + bo.len && ob < xb + bx.len) {
        PyErr_Format(PyExc_ValueError, "_sums.%s: out overlaps x", name);
    } else {
        Py_BEGIN_ALLOW_THREADS
        loop((const float *)bx.buf, rows, n, (double *)bo.buf);
        Py_END_ALLOW_THREADS
        res = Py_NewRef(Py_None);
    }
    PyBuffer_Release(&bx);
    PyBuffer_Release(&bo);
    return res;
}

static Py_ssize_t row_sums_len(Py_ssize_t rows, Py_ssize_t n)
{
    return rows * ((n + BLOCK - 1) / BLOCK);
}

static Py_ssize_t lead_sums_len(Py_ssize_t rows, Py_ssize_t width)
{
    (void)rows;
    return width;
}

static PyObject *row_sums_f32(PyObject *self, PyObject *args)
{
    (void)self;
    return run(args, "row_sums_f32", row_sums_loop, row_sums_len);
}

static PyObject *lead_sums_f32(PyObject *self, PyObject *args)
{
    (void)self;
    return run(args, "lead_sums_f32", lead_sums_loop, lead_sums_len);
}

static PyMethodDef methods[] = {
    {"row_sums_f32", row_sums_f32, METH_VARARGS,
     "row_sums_f32(x, rows, n, out): the float64 sums of the BLOCK-element blocks of each "
     "row of float32 x (lanes, then a tree; see the C source) into out (rows * nb)."},
    {"lead_sums_f32", lead_sums_f32, METH_VARARGS,
     "lead_sums_f32(x, rows, width, out): out[j] = +0.0 + x[0, j] + x[1, j] + ... in "
     "float64, in order, of float32 x (rows of width)."},
    {NULL, NULL, 0, NULL},
};

static int exec_module(PyObject *m)
{
    if (PyModule_AddIntConstant(m, "LANES", LANES) < 0)
        return -1;
    return PyModule_AddIntConstant(m, "BLOCK", BLOCK);
}

static struct PyModuleDef_Slot slots[] = {
    {Py_mod_exec, exec_module},
#ifdef Py_mod_multiple_interpreters
    {Py_mod_multiple_interpreters, Py_MOD_PER_INTERPRETER_GIL_SUPPORTED},
#endif
    {0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_sums",
    "float32 sums in float64 in a fixed order, vectorized (see the C source's header comment).",
    0, methods, slots, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__sums(void) { return PyModuleDef_Init(&module); }
