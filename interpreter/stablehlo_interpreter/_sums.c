/* stablehlo_interpreter._sums: float32 sums accumulated in float64, in a fixed order, at
 * memory speed; float32 cumulative sums, row max/min and row-broadcast arithmetic, the same way.
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
 *     scan_f32(x, lead, n, inner, init, out)
 * x: a C-contiguous float32 buffer of lead * n * inner elements (a prefix
 * scan along the middle axis of (lead, n, inner)); out: a writable
 * C-contiguous float32 buffer of as many elements, not overlapping x.
 * out[a, i, j] = float32(init + s) with s = x[a, 0, j] + x[a, 1, j] + ... +
 * x[a, i, j] added in float64 in order starting from x[a, 0, j] (not from
 * +0): what numpy's add.accumulate(x, axis=1, dtype=float64) computes, then
 * init added and the result rounded once to float32 (reducers.py's
 * Reducer.accumulate). Returns True when a sum became NaN: which NaN an
 * addition returns depends on the order of its operands in the machine
 * code, so the caller recomputes that case with numpy for numpy's NaN bits.
 * numpy's casting accumulate converts buffer by buffer
 * along the scanned axis (8 ms for a (1000, 1000) cumsum over axis 0); the
 * loop keeps a float64 row of running sums and streams x once.
 *
 *     row_max_f32(x, rows, n, out, nan)  /  row_min_f32(...)
 * x: a C-contiguous float32 buffer of rows * n elements (n > 0); out: a
 * writable float32 buffer of rows elements; nan: a writable uint8 buffer of
 * rows elements. For a row without NaN, out[r] is its largest (smallest)
 * value, up to the sign of a zero result (the caller sets zero signs as the
 * spec wants, reducers._fix_zero_sign); nan[r] = 1 and out[r] unspecified
 * for a row holding a NaN (the caller recomputes those rows with numpy, so
 * the NaN's bits are numpy's). Returns the number of rows holding a NaN.
 * numpy's maximum.reduce of float32 takes about 0.2 ns per element (its
 * NaN-propagating loop); lanes of compare-and-select with a separate NaN
 * flag vectorize to max/min instructions at memory speed.
 *
 *     row_op(x, r, out, rows, n, op)
 * x: a C-contiguous float32 or float64 buffer of rows * n elements (rows of
 * n); r: a buffer of rows elements of the same type; out: a writable buffer
 * like x, either x itself or sharing no byte with x or r. Row i of out is
 * row i of x combined with r[i] by one IEEE operation: op 0 x + r, 1 x - r,
 * 2 r - x, 3 x * r, 4 x / r, 5 r / x. This is what numpy's add, subtract,
 * multiply and divide compute with r broadcast over the rows (a reduce's
 * results broadcast back: softmax's x - max and e / sum, layer norm's
 * (x - mean) * rsqrt(var + eps)), bit for bit -- but for which operand's
 * payload a NaN result carries when both operands are NaN, which IEEE 754
 * leaves open and the compiler may choose by commuting + and *. numpy's
 * loop over a broadcast operand takes 0.6 ns per float32 element in cache
 * on the 2-core machine (its contiguous loop 0.45); this loop, vectorized
 * like the sums, 0.2.
 *
 * All release the GIL while working and keep no state between calls; a
 * buffer of the wrong type or length raises TypeError or ValueError.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "_buffers.h"
#include <math.h>
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

/* Returns whether a running sum became NaN (it stays NaN, so the sums at
 * the end of each scan tell). */
SUM_CLONES
static int scan_loop(const float *restrict x, Py_ssize_t lead, Py_ssize_t n, Py_ssize_t inner,
                     double init, double *restrict acc, float *restrict out)
{
    int nan = 0;
    for (Py_ssize_t a = 0; a < lead; a++) {
        const float *p = x + a * n * inner;
        float *q = out + a * n * inner;
        for (Py_ssize_t j = 0; j < inner; j++) {
            acc[j] = (double)p[j];
            q[j] = (float)(init + acc[j]);
        }
        for (Py_ssize_t i = 1; i < n; i++) {
            const float *pi = p + i * inner;
            float *qi = q + i * inner;
            for (Py_ssize_t j = 0; j < inner; j++) {
                acc[j] += (double)pi[j];
                qi[j] = (float)(init + acc[j]);
            }
        }
        for (Py_ssize_t j = 0; j < inner; j++)
            nan |= acc[j] != acc[j];
    }
    return nan;
}

/* Lanes of the extrema loops: 32 floats are 4 AVX2 or 2 AVX-512 registers
 * of candidates and as many of NaN flags. */
#define XLANES 32

/* m = v > m ? v : m is the max instruction's own rule; NaN never wins it,
 * so NaN is flagged apart (v != v). */
#define EXTREMA_LOOP(NAME, BETTER, START)                                                   \
    SUM_CLONES                                                                              \
    static Py_ssize_t NAME(const float *restrict x, Py_ssize_t rows, Py_ssize_t n,          \
                           float *restrict out, unsigned char *restrict nan)                \
    {                                                                                       \
        Py_ssize_t bad_rows = 0;                                                            \
        for (Py_ssize_t r = 0; r < rows; r++) {                                             \
            const float *p = x + r * n;                                                     \
            float m[XLANES];                                                                \
            int bad[XLANES];                                                                \
            for (int l = 0; l < XLANES; l++) {                                              \
                m[l] = START;                                                               \
                bad[l] = 0;                                                                 \
            }                                                                               \
            Py_ssize_t i = 0;                                                               \
            for (; i + XLANES <= n; i += XLANES)                                            \
                for (int l = 0; l < XLANES; l++) {                                          \
                    float v = p[i + l];                                                     \
                    m[l] = BETTER(v, m[l]) ? v : m[l];                                      \
                    bad[l] |= v != v;                                                       \
                }                                                                           \
            for (int l = 0; i + l < n; l++) {                                               \
                float v = p[i + l];                                                         \
                m[l] = BETTER(v, m[l]) ? v : m[l];                                          \
                bad[l] |= v != v;                                                           \
            }                                                                               \
            float best = m[0];                                                              \
            int any = bad[0];                                                               \
            for (int l = 1; l < XLANES; l++) {                                              \
                best = BETTER(m[l], best) ? m[l] : best;                                    \
                any |= bad[l];                                                              \
            }                                                                               \
            out[r] = best;                                                                  \
            nan[r] = (unsigned char)(any != 0);                                             \
            bad_rows += any != 0;                                                           \
        }                                                                                   \
        return bad_rows;                                                                    \
    }

#define GREATER(a, b) ((a) > (b))
#define LESS(a, b) ((a) < (b))
EXTREMA_LOOP(row_max_loop, GREATER, -HUGE_VALF)
EXTREMA_LOOP(row_min_loop, LESS, HUGE_VALF)

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
    if (bx.itemsize != 4 || !buffer_format_is(&bx, 'f')) {
        PyErr_Format(PyExc_TypeError, "_sums.%s: x must be a float32 buffer", name);
    } else if (bo.itemsize != 8 || !buffer_format_is(&bo, 'd')) {
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

/* Gets obj's C-contiguous buffer into b: elements of struct code `code` and
 * size `size`, `want` of them, writable if asked; else raises (naming the
 * function and the argument) and returns -1 with nothing held. */
static int get_buffer(PyObject *obj, Py_buffer *b, char code, Py_ssize_t size, int writable,
                      Py_ssize_t want, const char *name, const char *arg, const char *type)
{
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, b, flags) < 0)
        return -1;
    if (b->itemsize != size || !buffer_format_is(b, code)) {
        PyErr_Format(PyExc_TypeError, "_sums.%s: %s must be a %s buffer", name, arg, type);
    } else if (b->len / size != want) {
        PyErr_Format(PyExc_ValueError, "_sums.%s: %s has %zd elements (want %zd)", name, arg,
                     b->len / size, want);
    } else {
        return 0;
    }
    PyBuffer_Release(b);
    return -1;
}

static PyObject *scan_f32(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *ox, *oout;
    Py_ssize_t lead, n, inner;
    double init;
    if (!PyArg_ParseTuple(args, "OnnndO", &ox, &lead, &n, &inner, &init, &oout))
        return NULL;
    if (lead < 0 || n < 0 || inner < 0 || (n > 0 && inner > 0 && lead > 0
            && (n > PY_SSIZE_T_MAX / 8 / inner || lead > PY_SSIZE_T_MAX / 8 / (n * inner)))) {
        PyErr_Format(PyExc_ValueError, "_sums.scan_f32: bad shape (%zd, %zd, %zd)",
                     lead, n, inner);
        return NULL;
    }
    Py_ssize_t size = lead * n * inner;
    Py_buffer bx, bo;
    if (get_buffer(ox, &bx, 'f', 4, 0, size, "scan_f32", "x", "float32") < 0)
        return NULL;
    if (get_buffer(oout, &bo, 'f', 4, 1, size, "scan_f32", "out", "float32") < 0) {
        PyBuffer_Release(&bx);
        return NULL;
    }
    PyObject *res = NULL;
    double *acc = NULL;
    if (size && buffers_overlap(&bx, &bo)) {
        PyErr_SetString(PyExc_ValueError, "_sums.scan_f32: out overlaps x");
    } else if (size && (acc = PyMem_Malloc((size_t)inner * sizeof(double))) == NULL) {
        PyErr_NoMemory();
    } else {
        int nan = 0;
        if (size) {
            Py_BEGIN_ALLOW_THREADS
            nan = scan_loop((const float *)bx.buf, lead, n, inner, init, acc, (float *)bo.buf);
            Py_END_ALLOW_THREADS
        }
        PyMem_Free(acc);
        res = PyBool_FromLong(nan);
    }
    PyBuffer_Release(&bx);
    PyBuffer_Release(&bo);
    return res;
}

typedef Py_ssize_t (*extrema_fn)(const float *, Py_ssize_t, Py_ssize_t, float *, unsigned char *);

static PyObject *run_extrema(PyObject *args, const char *name, extrema_fn loop)
{
    PyObject *ox, *oout, *onan;
    Py_ssize_t rows, n;
    if (!PyArg_ParseTuple(args, "OnnOO", &ox, &rows, &n, &oout, &onan))
        return NULL;
    if (rows < 0 || n < 1 || rows > PY_SSIZE_T_MAX / 8 / n) {
        PyErr_Format(PyExc_ValueError, "_sums.%s: bad shape (%zd, %zd)", name, rows, n);
        return NULL;
    }
    Py_buffer bx, bo, bn;
    if (get_buffer(ox, &bx, 'f', 4, 0, rows * n, name, "x", "float32") < 0)
        return NULL;
    if (get_buffer(oout, &bo, 'f', 4, 1, rows, name, "out", "float32") < 0) {
        PyBuffer_Release(&bx);
        return NULL;
    }
    if (get_buffer(onan, &bn, 'B', 1, 1, rows, name, "nan", "uint8") < 0) {
        PyBuffer_Release(&bx);
        PyBuffer_Release(&bo);
        return NULL;
    }
    PyObject *res = NULL;
    if (rows && (buffers_overlap(&bx, &bo) || buffers_overlap(&bx, &bn)
                 || buffers_overlap(&bo, &bn))) {
        PyErr_Format(PyExc_ValueError, "_sums.%s: x, out and nan overlap", name);
    } else {
        Py_ssize_t bad;
        Py_BEGIN_ALLOW_THREADS
        bad = loop((const float *)bx.buf, rows, n, (float *)bo.buf, (unsigned char *)bn.buf);
        Py_END_ALLOW_THREADS
        res = PyLong_FromSsize_t(bad);
    }
    PyBuffer_Release(&bx);
    PyBuffer_Release(&bo);
    PyBuffer_Release(&bn);
    return res;
}

static PyObject *row_max_f32(PyObject *self, PyObject *args)
{
    (void)self;
    return run_extrema(args, "row_max_f32", row_max_loop);
}

static PyObject *row_min_f32(PyObject *self, PyObject *args)
{
    (void)self;
    return run_extrema(args, "row_min_f32", row_min_loop);
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

/* One loop per operation and type, the operation outside the loops so
 * that each vectorizes. */
#define ROW_OP_LOOP(NAME, T)                                                              \
    SUM_CLONES                                                                            \
    static void NAME(const T *x, const T *r, T *out, Py_ssize_t rows, Py_ssize_t n, int op) \
    {                                                                                     \
        for (Py_ssize_t i = 0; i < rows; i++) {                                           \
            const T *xi = x + i * n;                                                      \
            T *oi = out + i * n;                                                          \
            const T b = r[i];                                                             \
            Py_ssize_t j;                                                                 \
            switch (op) {                                                                 \
            case 0: for (j = 0; j < n; j++) oi[j] = xi[j] + b; break;                     \
            case 1: for (j = 0; j < n; j++) oi[j] = xi[j] - b; break;                     \
            case 2: for (j = 0; j < n; j++) oi[j] = b - xi[j]; break;                     \
            case 3: for (j = 0; j < n; j++) oi[j] = xi[j] * b; break;                     \
            case 4: for (j = 0; j < n; j++) oi[j] = xi[j] / b; break;                     \
            default: for (j = 0; j < n; j++) oi[j] = b / xi[j]; break;                    \
            }                                                                             \
        }                                                                                 \
    }

ROW_OP_LOOP(row_op_f32, float)
ROW_OP_LOOP(row_op_f64, double)

static PyObject *row_op(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *ox, *or_, *oout;
    Py_ssize_t rows, n;
    int op;
    if (!PyArg_ParseTuple(args, "OOOnni", &ox, &or_, &oout, &rows, &n, &op))
        return NULL;
    if (rows < 0 || n < 0 || (n > 0 && rows > PY_SSIZE_T_MAX / 8 / n) || op < 0 || op > 5) {
        PyErr_Format(PyExc_ValueError, "_sums.row_op: bad shape (%zd, %zd) or op %d",
                     rows, n, op);
        return NULL;
    }
    Py_buffer bx, br, bo;
    if (PyObject_GetBuffer(ox, &bx, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        return NULL;
    if (PyObject_GetBuffer(or_, &br, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        PyBuffer_Release(&bx);
        return NULL;
    }
    if (PyObject_GetBuffer(oout, &bo, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&bx);
        PyBuffer_Release(&br);
        return NULL;
    }
    PyObject *res = NULL;
    int f32 = bx.itemsize == 4 && buffer_format_is(&bx, 'f');
    int f64 = bx.itemsize == 8 && buffer_format_is(&bx, 'd');
    char code = f32 ? 'f' : 'd';
    if (!f32 && !f64) {
        PyErr_SetString(PyExc_TypeError, "_sums.row_op: x must be a float32 or float64 buffer");
    } else if (br.itemsize != bx.itemsize || !buffer_format_is(&br, code)
               || bo.itemsize != bx.itemsize || !buffer_format_is(&bo, code)) {
        PyErr_SetString(PyExc_TypeError, "_sums.row_op: r and out must have x's type");
    } else if (bx.len / bx.itemsize != rows * n || br.len / br.itemsize != rows
               || bo.len != bx.len) {
        PyErr_Format(PyExc_ValueError,
                     "_sums.row_op: x, r and out have %zd, %zd and %zd elements (want %zd, "
                     "%zd and %zd)", bx.len / bx.itemsize, br.len / br.itemsize,
                     bo.len / bx.itemsize, rows * n, rows, rows * n);
    } else if ((bo.buf != bx.buf && buffers_overlap(&bo, &bx)) || buffers_overlap(&bo, &br)) {
        PyErr_SetString(PyExc_ValueError,
                        "_sums.row_op: out must be x itself or overlap neither x nor r");
    } else {
        Py_BEGIN_ALLOW_THREADS
        if (f32)
            row_op_f32((const float *)bx.buf, (const float *)br.buf, (float *)bo.buf, rows, n, op);
        else
            row_op_f64((const double *)bx.buf, (const double *)br.buf, (double *)bo.buf, rows, n,
                       op);
        Py_END_ALLOW_THREADS
        res = Py_NewRef(Py_None);
    }
    PyBuffer_Release(&bx);
    PyBuffer_Release(&br);
    PyBuffer_Release(&bo);
    return res;
}

static PyMethodDef methods[] = {
    {"row_sums_f32", row_sums_f32, METH_VARARGS,
     "row_sums_f32(x, rows, n, out): the float64 sums of the BLOCK-element blocks of each "
     "row of float32 x (lanes, then a tree; see the C source) into out (rows * nb)."},
    {"lead_sums_f32", lead_sums_f32, METH_VARARGS,
     "lead_sums_f32(x, rows, width, out): out[j] = +0.0 + x[0, j] + x[1, j] + ... in "
     "float64, in order, of float32 x (rows of width)."},
    {"scan_f32", scan_f32, METH_VARARGS,
     "scan_f32(x, lead, n, inner, init, out): out = float32(init + the float64 prefix sums "
     "of float32 x along the middle axis of (lead, n, inner)), in order (see the C source); "
     "True when a sum became NaN."},
    {"row_max_f32", row_max_f32, METH_VARARGS,
     "row_max_f32(x, rows, n, out, nan): out[r] = the largest value of row r of float32 x "
     "(zero signs unspecified); nan[r] = 1 for rows holding a NaN (out[r] unspecified "
     "there). Returns the number of those rows."},
    {"row_min_f32", row_min_f32, METH_VARARGS,
     "row_min_f32(x, rows, n, out, nan): row_max_f32 with the smallest value."},
    {"row_op", row_op, METH_VARARGS,
     "row_op(x, r, out, rows, n, op): out = x op r[:, None] over rows of n of float32 or "
     "float64 x (op 0 +, 1 -, 2 reversed -, 3 *, 4 /, 5 reversed /; see the C source)."},
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
    "float32 sums in float64 in a fixed order, cumulative sums and row max/min, vectorized (see the C source's header comment).",
    0, methods, slots, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__sums(void) { return PyModuleDef_Init(&module); }
