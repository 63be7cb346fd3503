/* stablehlo_interpreter._chains: a block machine running fused chains of
 * exact elementwise ops (integer, bit, compare, select, convert and IEEE
 * basic float arithmetic) with their intermediate values in L1-sized blocks.
 *
 * Why hand-written C: a fused step (fusion.py) runs each member op as one
 * numpy ufunc call per 128K-element chunk, so every intermediate value goes
 * through the L2 cache once written and once read: ~0.1 ns per op per
 * element. jax.random's threefry is one chain of ~129 uint32 ops; at that
 * rate it costs ~12 ms per 1e6 values where XLA keeps the values in
 * registers. numexpr, the library made for evaluating array expressions in
 * blocks, does not fit: its integer ops are int32/int64 only (unsigned
 * arrays are cast to a wider signed type, so uint32 arithmetic does not
 * wrap and threefry's values change type), it has no bitcast, its shifts
 * are C's (undefined from the bit width on, not StableHLO's 0 / sign fill),
 * it evaluates one expression per output (a chain's values that are stored
 * or read by several later ops would be computed again per output), and its
 * transcendentals are the C library's or VML's, not the interpreter's
 * correctly rounded kernels (float32 ones run here as _fastmath's loops,
 * the FM instruction; the others stay numpy kernels between the machine's
 * runs). This module is the small part numexpr would do: ~20 op
 * codes, each a loop over one block.
 *
 * Exactness. Every op computes the bits of the interpreter's numpy kernel
 * for that op and types (ops/elementwise*.py): integer arithmetic wraps
 * (computed unsigned), shifts by amounts >= the bit width give 0 (left,
 * logical) or the sign fill (arithmetic), float add/sub/mul/div are single
 * IEEE operations (compiled with -ffp-contract=off: no fused multiply-add;
 * no -ffast-math), maximum/minimum are numpy's (NaN propagates, the first
 * operand's NaN when both are) with -0 < +0, compares are IEEE's quiet ones
 * or totalOrder on the sign-folded bits, converts are C casts (the casts
 * numpy's astype makes; float -> int is not an op here). tests/test_chainvm.py
 * compares every op with its numpy kernel bit for bit over edge values.
 *
 * API:
 *     run(program, n, inputs, outputs, flags=None) -> n_flagged
 * program: bytes made by chainvm.py (int32 words, layout below); n: the
 * element count; inputs: a sequence of buffers, each n elements of its
 * value's type or one element (the same for every element); outputs: a
 * sequence of writable buffers of n elements. The program is checked
 * before anything runs (a bad one raises ValueError), every buffer's length
 * and alignment too, and outputs may not overlap inputs or each other. The
 * GIL is released while the blocks run; nothing is kept between calls.
 * A program with FM instructions (float32 transcendentals: _fastmath's
 * loops) needs flags, a writable int64 buffer of n entries per FM
 * instruction overlapping no input or output: the indices of the elements
 * some FM instruction flagged (whose value that loop did not round surely
 * right; one index per instruction that flagged it) go to flags[:n_flagged],
 * in no particular order, and the caller recomputes those elements' outputs
 * (chainvm.py). Returns n_flagged (0 without FM instructions).
 *
 *     LoopCode(program, init=None, inputs=(), outputs=(), kinds=None)
 *     code.start(values) -> bytearray state (or None)
 *     run_loop(code, state, arrays, max_steps) -> bool
 *     code.finish(state, outputs)
 * A scalar while loop (loopvm.py; program layout above LoopCode). LoopCode
 * checks the program once (a bad one raises ValueError) and keeps it
 * decoded, read-only: one serves every call and thread. The registers are
 * 8-byte slots of a writable buffer, the state: start() makes one from the
 * initial bytes (the constants) with each carry and capture written to its
 * register (None when a value is not of its kind: the caller falls back);
 * finish() copies the result registers into the caller's arrays. arrays
 * are the 1-D buffers the LOAD/STORE instructions index (writable where
 * written; a written one overlaps no other). run_loop runs the cond's and
 * the body's instructions, the same ops on one element, the common ones
 * (32/64-bit integer and f32/f64 ops, compares, select, copies, a few
 * converts) inline with the block ops' expressions, the rest through the
 * block ops themselves; with GCC (or clang) the body's common steps run as
 * threaded code (labels as values), each handler jumping straight to the
 * next. Returns True when the cond is false, False after
 * max_steps iterations (the caller calls again: between calls its Python
 * sees the execute deadline). GIL released; signals checked before it
 * returns (Ctrl-C). It also takes the program's bytes instead of a
 * LoopCode (decoded for that call). Why C: loopgen's generated Python costs
 * ~0.1 us per op, 10-30x XLA's whole step; and a call's fixed cost is what
 * a short loop costs, so nothing is checked or decoded twice. Loop programs
 * also have OP_MATH (float functions: the C library's value where it gives
 * the kernel's bits) and OP_FTOI (float -> integer converts); an OP_MATH
 * whose value the library cannot give also returns False, before running
 * it, with its index + 1 in the program's pause register: the caller writes
 * its result register and calls again, which goes on from the next
 * instruction (see "loop programs: float functions" below).
 *
 * Program words: header MAGIC, n_values, n_inputs, n_outputs, n_slots,
 * n_instr, block; then per value (type, kind, index) -- kind IN (index: an
 * input), OUT (an output; the op making it writes there) or TMP (index: a
 * scratch slot of block elements, reused by values whose lives do not
 * overlap); then per instruction (op, type, sub, dst, a, b, c).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "_buffers.h"
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* target_clones needs glibc's ifunc (musl's GCC refuses it). */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__) \
    && defined(__GLIBC__)
#define VM_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define VM_CLONES
#endif

#define MAGIC 0x314e4843 /* "CHN1" */
#define HEADER 7
#define VWORDS 3
#define IWORDS 8
#define MAX_BLOCK 65536

enum { T_BOOL, T_I8, T_I16, T_I32, T_I64, T_U8, T_U16, T_U32, T_U64, T_F32, T_F64, N_TYPES };
enum { K_IN, K_OUT, K_TMP };
enum {
    OP_ADD = 1, OP_SUB, OP_MUL, OP_DIV, OP_NEG, OP_ABS, OP_AND, OP_OR, OP_XOR, OP_NOT,
    OP_SHL, OP_SHRL, OP_SHRA, OP_MAX, OP_MIN, OP_CMP, OP_SELECT, OP_COPY, OP_CVT, OP_SHLOR, OP_SHLORXOR, N_OPS
};
enum { D_EQ, D_NE, D_LT, D_LE, D_GT, D_GE };
/* Block programs only: dst (float32) = _fastmath loop `sub` of a (float32),
 * the loop's flagged elements' indices appended to the run's flags (see
 * "API"). The loops come from _fastmath's capsule (_buffers.h), imported
 * when a program first has this instruction. */
#define OP_FM 104
#define TOTALORDER 8

static const int SIZE[N_TYPES] = {1, 1, 2, 4, 8, 1, 2, 4, 8, 4, 8};

static int is_int(int t) { return t >= T_I8 && t <= T_U64; }
static int is_float(int t) { return t == T_F32 || t == T_F64; }

typedef struct {
    int32_t op, type, sub, dst, a, b, c, e;
} Instr;

/* ---- the ops, one loop over a block each ---------------------------- */

/* Bit k of ``one``: operand k is one element, the same for the whole block
 * (a 0-d value: a broadcast constant, a shift amount); its loop reads it
 * once instead of a block-long copy (the copies of threefry's eleven
 * amounts would push its values out of the L1 cache). */
#define LOOP1(T, R, E) do { R *restrict d_ = (R *)d; const T *x_ = (const T *)pa; \
    if (one & 1) { T x = x_[0]; R r_ = (R)(E); for (Py_ssize_t i = 0; i < m; i++) d_[i] = r_; } \
    else for (Py_ssize_t i = 0; i < m; i++) { T x = x_[i]; d_[i] = (R)(E); } } while (0)
#define LOOP2(T, R, E) do { R *restrict d_ = (R *)d; const T *x_ = (const T *)pa, *y_ = (const T *)pb; \
    switch (one & 3) { \
    case 0: for (Py_ssize_t i = 0; i < m; i++) { T x = x_[i], y = y_[i]; d_[i] = (R)(E); } break; \
    case 1: { T x = x_[0]; for (Py_ssize_t i = 0; i < m; i++) { T y = y_[i]; d_[i] = (R)(E); } \
        break; } \
    case 2: { T y = y_[0]; for (Py_ssize_t i = 0; i < m; i++) { T x = x_[i]; d_[i] = (R)(E); } \
        break; } \
    default: { T x = x_[0], y = y_[0]; R r_ = (R)(E); \
        for (Py_ssize_t i = 0; i < m; i++) d_[i] = r_; } } } while (0)

/* By size: U the unsigned type, S the signed one, W the bits, P the type U
 * promotes to (unsigned: no signed overflow in x * y of two uint16). */
#define BY_SIZE(SZ, MACRO) switch (SZ) { \
    case 1: MACRO(uint8_t, int8_t, 8, unsigned); break; \
    case 2: MACRO(uint16_t, int16_t, 16, unsigned); break; \
    case 4: MACRO(uint32_t, int32_t, 32, uint32_t); break; \
    default: MACRO(uint64_t, int64_t, 64, uint64_t); break; }

/* numpy's maximum/minimum (x if x >= y or x is NaN, else y), equal values
 * taking the AND (max: +0 of -0 and +0) or OR (min: -0) of their bits. */
#define FMAX(F, U) static inline F max_##F(F x, F y) { \
    if (x == y) { U a, b; memcpy(&a, &x, sizeof a); memcpy(&b, &y, sizeof b); a &= b; \
        memcpy(&x, &a, sizeof a); return x; } \
    return (x > y || x != x) ? x : y; } \
static inline F min_##F(F x, F y) { \
    if (x == y) { U a, b; memcpy(&a, &x, sizeof a); memcpy(&b, &y, sizeof b); a |= b; \
        memcpy(&x, &a, sizeof a); return x; } \
    return (x < y || x != x) ? x : y; }
FMAX(float, uint32_t)
FMAX(double, uint64_t)

static inline float fabs_bits_f(float x) { uint32_t u; memcpy(&u, &x, 4); u &= 0x7fffffffu;
    memcpy(&x, &u, 4); return x; }
static inline double fabs_bits_d(double x) { uint64_t u; memcpy(&u, &x, 8);
    u &= 0x7fffffffffffffffull; memcpy(&x, &u, 8); return x; }

#define CMP_DIR(T, X, Y) switch (sub & 7) { \
    case D_EQ: LOOP2(T, uint8_t, (X) == (Y)); break; \
    case D_NE: LOOP2(T, uint8_t, (X) != (Y)); break; \
    case D_LT: LOOP2(T, uint8_t, (X) < (Y)); break; \
    case D_LE: LOOP2(T, uint8_t, (X) <= (Y)); break; \
    case D_GT: LOOP2(T, uint8_t, (X) > (Y)); break; \
    default: LOOP2(T, uint8_t, (X) >= (Y)); break; }

/* totalOrder keys: negative floats get every bit but the sign flipped. */
#define KEY32(v) ((int32_t)(v) ^ (int32_t)(((int32_t)(v) >> 31) & 0x7fffffff))
#define KEY64(v) ((int64_t)(v) ^ (int64_t)(((int64_t)(v) >> 63) & 0x7fffffffffffffffll))

#define BOOL_TO_INT(U, S, W, P) LOOP1(uint8_t, U, x != 0)
#define CVT_TO(S) switch (rt) { \
    case T_BOOL: LOOP1(S, uint8_t, x != 0); break; \
    case T_I8: LOOP1(S, int8_t, x); break; \
    case T_I16: LOOP1(S, int16_t, x); break; \
    case T_I32: LOOP1(S, int32_t, x); break; \
    case T_I64: LOOP1(S, int64_t, x); break; \
    case T_U8: LOOP1(S, uint8_t, x); break; \
    case T_U16: LOOP1(S, uint16_t, x); break; \
    case T_U32: LOOP1(S, uint32_t, x); break; \
    case T_U64: LOOP1(S, uint64_t, x); break; \
    case T_F32: LOOP1(S, float, x); break; \
    default: LOOP1(S, double, x); break; }

static inline __attribute__((always_inline)) void cvt(int t, int rt, int one, void *d, const void *pa, Py_ssize_t m)
{
    switch (t) {
    case T_BOOL: /* any nonzero byte is true */
        switch (rt) {
        case T_F32: LOOP1(uint8_t, float, x != 0); break;
        case T_F64: LOOP1(uint8_t, double, x != 0); break;
        default: BY_SIZE(SIZE[rt], BOOL_TO_INT); break;
        }
        break;
    case T_I8: CVT_TO(int8_t); break;
    case T_I16: CVT_TO(int16_t); break;
    case T_I32: CVT_TO(int32_t); break;
    case T_I64: CVT_TO(int64_t); break;
    case T_U8: CVT_TO(uint8_t); break;
    case T_U16: CVT_TO(uint16_t); break;
    case T_U32: CVT_TO(uint32_t); break;
    case T_U64: CVT_TO(uint64_t); break;
    /* floats: only to bool and the other float type (checked) */
    case T_F32: if (rt == T_BOOL) LOOP1(float, uint8_t, x != 0); else LOOP1(float, double, x); break;
    default: if (rt == T_BOOL) LOOP1(double, uint8_t, x != 0); else LOOP1(double, float, x); break;
    }
}

#define ARITH_INT(U, S, W, P) switch (op) { \
    case OP_ADD: LOOP2(U, U, (P)x + (P)y); break; \
    case OP_SUB: LOOP2(U, U, (P)x - (P)y); break; \
    default: LOOP2(U, U, (P)x * (P)y); break; }
#define NEG_INT(U, S, W, P) LOOP1(U, U, (P)0 - (P)x)
#define ABS_SINT(U, S, W, P) LOOP1(U, U, (S)x < 0 ? (P)0 - (P)x : x)
#define BITS_INT(U, S, W, P) switch (op) { \
    case OP_AND: LOOP2(U, U, x & y); break; \
    case OP_OR: LOOP2(U, U, x | y); break; \
    case OP_XOR: LOOP2(U, U, x ^ y); break; \
    default: LOOP1(U, U, ~x); break; }
#define SHIFT_INT(U, S, W, P) switch (op) { \
    case OP_SHL: LOOP2(U, U, y >= (U)W ? (U)0 : (U)(x << y)); break; \
    case OP_SHRL: LOOP2(U, U, y >= (U)W ? (U)0 : (U)(x >> y)); break; \
    default: LOOP2(U, U, (S)x >> (y >= (U)W ? (U)(W - 1) : y)); break; }
#define SELECT_BITS(U, S, W, P) do { U *restrict d_ = (U *)d; const uint8_t *p_ = (const uint8_t *)pa; \
    const U *t_ = (const U *)pb, *f_ = (const U *)pc; \
    Py_ssize_t sp = !(one & 1), st = !(one & 2), sf = !(one & 4); \
    if (sp && st && sf) for (Py_ssize_t i = 0; i < m; i++) d_[i] = p_[i] ? t_[i] : f_[i]; \
    else if (sp && st) { U f = f_[0]; for (Py_ssize_t i = 0; i < m; i++) d_[i] = p_[i] ? t_[i] : f; } \
    else if (sp && sf) { U t = t_[0]; for (Py_ssize_t i = 0; i < m; i++) d_[i] = p_[i] ? t : f_[i]; } \
    else for (Py_ssize_t i = 0; i < m; i++) d_[i] = p_[i * sp] ? t_[i * st] : f_[i * sf]; } while (0)
#define MINMAX_INT(T) do { if (op == OP_MAX) LOOP2(T, T, x > y ? x : y); \
    else LOOP2(T, T, x < y ? x : y); } while (0)
#define CMP_INT(T) CMP_DIR(T, x, y)

static inline __attribute__((always_inline)) void cmp(int t, int sub, int one, void *d, const void *pa, const void *pb, Py_ssize_t m)
{
    if (sub & TOTALORDER) {
        if (t == T_F32) CMP_DIR(int32_t, KEY32(x), KEY32(y))
        else CMP_DIR(int64_t, KEY64(x), KEY64(y))
        return;
    }
    switch (t) {
    case T_BOOL: case T_U8: CMP_INT(uint8_t); break;
    case T_I8: CMP_INT(int8_t); break;
    case T_I16: CMP_INT(int16_t); break;
    case T_I32: CMP_INT(int32_t); break;
    case T_I64: CMP_INT(int64_t); break;
    case T_U16: CMP_INT(uint16_t); break;
    case T_U32: CMP_INT(uint32_t); break;
    case T_U64: CMP_INT(uint64_t); break;
    case T_F32: CMP_INT(float); break;
    default: CMP_INT(double); break;
    }
}

static inline __attribute__((always_inline)) void minmax_int(int op, int t, int one, void *d, const void *pa, const void *pb, Py_ssize_t m)
{
    switch (t) {
    case T_I8: MINMAX_INT(int8_t); break;
    case T_I16: MINMAX_INT(int16_t); break;
    case T_I32: MINMAX_INT(int32_t); break;
    case T_I64: MINMAX_INT(int64_t); break;
    case T_U8: MINMAX_INT(uint8_t); break;
    case T_U16: MINMAX_INT(uint16_t); break;
    case T_U32: MINMAX_INT(uint32_t); break;
    default: MINMAX_INT(uint64_t); break;
    }
}

#define FLOAT_OPS(F, ABS) switch (op) { \
    case OP_ADD: LOOP2(F, F, x + y); break; \
    case OP_SUB: LOOP2(F, F, x - y); break; \
    case OP_MUL: LOOP2(F, F, x * y); break; \
    case OP_DIV: LOOP2(F, F, x / y); break; \
    case OP_NEG: LOOP1(F, F, -x); break; \
    case OP_ABS: LOOP1(F, F, ABS(x)); break; \
    case OP_MAX: LOOP2(F, F, max_##F(x, y)); break; \
    default: LOOP2(F, F, min_##F(x, y)); break; }

static inline __attribute__((always_inline)) void copy(void *d, const void *pa, int sz, int one,
                                                      Py_ssize_t m)
{
    if (!one) { memcpy(d, pa, (size_t)m * (size_t)sz); return; }
    for (Py_ssize_t i = 0; i < m; i++) memcpy((char *)d + i * sz, pa, (size_t)sz);
}

/* The op families, each its own function (cloned per vector width). */
#define FAMILY(NAME) VM_CLONES __attribute__((noinline)) static void NAME( \
    int op, int t, int sub, int rt, int one, void *d, const void *pa, const void *pb, \
    const void *pc, const void *pe, Py_ssize_t m)

FAMILY(f32_ops) { (void)pe; (void)t; (void)sub; (void)rt; (void)pc; FLOAT_OPS(float, fabs_bits_f) }
FAMILY(f64_ops) { (void)pe; (void)t; (void)sub; (void)rt; (void)pc; FLOAT_OPS(double, fabs_bits_d) }
FAMILY(cmp_ops) { (void)pe; (void)op; (void)rt; (void)pc; cmp(t, sub, one, d, pa, pb, m); }
FAMILY(cvt_ops) { (void)pe; (void)op; (void)sub; (void)pb; (void)pc; cvt(t, rt, one, d, pa, m); }
FAMILY(select_ops) { (void)pe; (void)op; (void)sub; (void)rt; BY_SIZE(SIZE[t], SELECT_BITS) }
FAMILY(bool_ops)
{
    (void)pe;
    (void)t; (void)sub; (void)rt; (void)pc;
    switch (op) {   /* logical: any nonzero byte is true */
    case OP_AND: LOOP2(uint8_t, uint8_t, (x != 0) & (y != 0)); break;
    case OP_OR: LOOP2(uint8_t, uint8_t, (x != 0) | (y != 0)); break;
    case OP_XOR: LOOP2(uint8_t, uint8_t, (x != 0) ^ (y != 0)); break;
    default: LOOP1(uint8_t, uint8_t, x == 0); break;
    }
}
FAMILY(arith_ops) { (void)pe; (void)sub; (void)rt; (void)pc; BY_SIZE(SIZE[t], ARITH_INT) }
FAMILY(bits_ops) { (void)pe; (void)sub; (void)rt; (void)pc; BY_SIZE(SIZE[t], BITS_INT) }
FAMILY(shift_ops) { (void)pe; (void)sub; (void)rt; (void)pc; BY_SIZE(SIZE[t], SHIFT_INT) }
FAMILY(unary_ops)
{
    (void)pe;
    (void)sub; (void)rt; (void)pb; (void)pc;
    if (op == OP_NEG) BY_SIZE(SIZE[t], NEG_INT)
    else if (t >= T_U8) copy(d, pa, SIZE[t], one & 1, m);   /* abs of unsigned */
    else BY_SIZE(SIZE[t], ABS_SINT)
}
FAMILY(minmax_ops) { (void)pe; (void)sub; (void)rt; (void)pc; minmax_int(op, t, one, d, pa, pb, m); }

/* shl(x, l) | shrl(x, r) [^ e], each shift by its own rules: a rotation
 * (threefry's, written as two shifts and an or) in one pass, and the xor
 * that follows it in threefry's rounds. */
#define ROT_INT(U, S, W, P) do { U *restrict d_ = (U *)d; const U *x_ = (const U *)pa, \
    *l_ = (const U *)pb, *r_ = (const U *)pc, *e_ = (const U *)pe; \
    Py_ssize_t sx = !(one & 1), sl = !(one & 2), sr = !(one & 4), se = !(one & 8); \
    if (sx && !sl && !sr && l_[0] < (U)W && r_[0] < (U)W) { U l = l_[0], r = r_[0]; \
        if (op == OP_SHLOR) \
            for (Py_ssize_t i = 0; i < m; i++) d_[i] = (U)(x_[i] << l) | (U)(x_[i] >> r); \
        else if (se) \
            for (Py_ssize_t i = 0; i < m; i++) \
                d_[i] = (U)((U)(x_[i] << l) | (U)(x_[i] >> r)) ^ e_[i]; \
        else { U e = e_[0]; for (Py_ssize_t i = 0; i < m; i++) \
                d_[i] = (U)((U)(x_[i] << l) | (U)(x_[i] >> r)) ^ e; } \
    } else for (Py_ssize_t i = 0; i < m; i++) { \
        U x = x_[i * sx], l = l_[i * sl], r = r_[i * sr]; \
        U v = (U)((l >= (U)W ? (U)0 : (U)(x << l)) | (r >= (U)W ? (U)0 : (U)(x >> r))); \
        d_[i] = op == OP_SHLORXOR ? (U)(v ^ e_[i * se]) : v; } } while (0)
FAMILY(rot_ops) { (void)sub; (void)rt; BY_SIZE(SIZE[t], ROT_INT) }

/* One instruction over m elements. Operands were checked (check_program). */
static void exec1(const Instr *in, int rt, int one, void *d, const void *pa, const void *pb,
                  const void *pc, const void *pe, Py_ssize_t m)
{
    int op = in->op, t = in->type, sub = in->sub;
    if (op == OP_COPY) {
        copy(d, pa, SIZE[t], one & 1, m);
        return;
    }
    void (*f)(int, int, int, int, int, void *, const void *, const void *, const void *,
              const void *, Py_ssize_t);
    if (op == OP_CMP) f = cmp_ops;
    else if (op == OP_SELECT) f = select_ops;
    else if (op == OP_CVT) f = cvt_ops;
    else if (op == OP_SHLOR || op == OP_SHLORXOR) f = rot_ops;
    else if (t == T_F32) f = f32_ops;
    else if (t == T_F64) f = f64_ops;
    else if (t == T_BOOL) f = bool_ops;
    else if (op == OP_ADD || op == OP_SUB || op == OP_MUL) f = arith_ops;
    else if (op == OP_NEG || op == OP_ABS) f = unary_ops;
    else if (op >= OP_AND && op <= OP_NOT) f = bits_ops;
    else if (op >= OP_SHL && op <= OP_SHRA) f = shift_ops;
    else f = minmax_ops;
    f(op, t, sub, rt, one, d, pa, pb, pc, pe, m);
}

/* ---- checking a program --------------------------------------------- */

typedef struct {
    int32_t n_values, n_inputs, n_outputs, n_slots, n_instr, block;
    const int32_t *values;   /* n_values * VWORDS */
    const Instr *instr;
} Program;

static int bad(const char *what, Py_ssize_t k)
{
    PyErr_Format(PyExc_ValueError, "_chains.run: bad program: %s (%zd)", what, k);
    return -1;
}

static int nargs(int op) {
    switch (op) {
    case OP_NEG: case OP_ABS: case OP_NOT: case OP_COPY: case OP_CVT: return 1;
    case OP_SELECT: case OP_SHLOR: return 3;
    case OP_SHLORXOR: return 4;
    default: return 2;
    }
}

/* Are the operand and result types of one instruction what its op takes? */
static int types_ok(const Instr *in, const int32_t *vt)
{
    int op = in->op, t = in->type, d = vt[in->dst], a = vt[in->a];
    int b = nargs(op) > 1 ? vt[in->b] : t;
    switch (op) {
    case OP_ADD: case OP_SUB: case OP_MUL: case OP_MAX: case OP_MIN:
        return t != T_BOOL && d == t && a == t && b == t;
    case OP_DIV:
        return is_float(t) && d == t && a == t && b == t;
    case OP_NEG: case OP_ABS:
        return t != T_BOOL && d == t && a == t;
    case OP_AND: case OP_OR: case OP_XOR:
        return !is_float(t) && d == t && a == t && b == t;
    case OP_NOT:
        return !is_float(t) && d == t && a == t;
    case OP_SHL: case OP_SHRL: case OP_SHRA:
        return is_int(t) && d == t && a == t && b == t;
    case OP_CMP:
        if (d != T_BOOL || a != b || SIZE[a] != SIZE[t] || (in->sub & ~(TOTALORDER | 7))
            || (in->sub & 7) > D_GE)
            return 0;
        if (in->sub & TOTALORDER) return is_float(t) && a == t;
        return is_float(t) || t == T_BOOL ? a == t : is_int(a);
    case OP_SELECT:
        return a == T_BOOL && b == t && vt[in->c] == t && d == t;
    case OP_COPY:
        return a == t && SIZE[d] == SIZE[t];
    case OP_CVT:
        return a == t && !(is_float(t) && is_int(d));
    case OP_SHLOR:
        return is_int(t) && d == t && a == t && b == t && vt[in->c] == t;
    case OP_SHLORXOR:
        return is_int(t) && d == t && a == t && b == t && vt[in->c] == t && vt[in->e] == t;
    default:
        return 0;
    }
}

static int check_program(const char *buf, Py_ssize_t len, Program *p)
{
    if (len % 4 || len < HEADER * 4) return bad("length", len);
    const int32_t *w = (const int32_t *)buf;
    if (w[0] != MAGIC) return bad("magic", w[0]);
    p->n_values = w[1]; p->n_inputs = w[2]; p->n_outputs = w[3];
    p->n_slots = w[4]; p->n_instr = w[5]; p->block = w[6];
    if (p->n_values < 0 || p->n_values > (1 << 20) || p->n_inputs < 0 || p->n_outputs < 0
        || p->n_slots < 0 || p->n_slots > (1 << 16) || p->n_instr < 0 || p->n_instr > (1 << 20)
        || p->block < 1 || p->block > MAX_BLOCK)
        return bad("header", 0);
    if (len / 4 != HEADER + (Py_ssize_t)p->n_values * VWORDS + (Py_ssize_t)p->n_instr * IWORDS)
        return bad("length", len);
    p->values = w + HEADER;
    p->instr = (const Instr *)(p->values + (Py_ssize_t)p->n_values * VWORDS);
    for (Py_ssize_t v = 0; v < p->n_values; v++) {
        const int32_t *e = p->values + v * VWORDS;
        int32_t lim = e[1] == K_IN ? p->n_inputs : e[1] == K_OUT ? p->n_outputs : p->n_slots;
        if (e[0] < 0 || e[0] >= N_TYPES || e[1] < K_IN || e[1] > K_TMP || e[2] < 0 || e[2] >= lim)
            return bad("value", v);
    }
    return 0;
}

/* _fastmath's loops (FM instructions), once imported (with the GIL). */
static const FastmathLoops *fm_table;

static int load_fastmath(void)
{
    if (fm_table) return 0;
    const FastmathLoops *t = PyCapsule_Import(FASTMATH_LOOPS_CAPSULE, 0);
    if (!t) return -1;
    if (t->version != FASTMATH_LOOPS_VERSION || t->count < 1) {
        PyErr_Format(PyExc_ImportError, "_chains: %s has version %d, want %d",
                     FASTMATH_LOOPS_CAPSULE, t->version, FASTMATH_LOOPS_VERSION);
        return -1;
    }
    fm_table = t;
    return 0;
}

static int check_instr(const Program *p, const int32_t *vt, Py_ssize_t *n_fm)
{
    *n_fm = 0;
    for (Py_ssize_t k = 0; k < p->n_instr; k++) {
        const Instr *in = p->instr + k;
        if (in->op == OP_FM) {
            if (in->dst < 0 || in->dst >= p->n_values || in->a < 0 || in->a >= p->n_values)
                return bad("operand", k);
            if (p->values[(Py_ssize_t)in->dst * VWORDS + 1] == K_IN)
                return bad("writes an input", k);
            if (in->type != T_F32 || vt[in->dst] != T_F32 || vt[in->a] != T_F32)
                return bad("types", k);
            if (load_fastmath() < 0) return -1;
            if (in->sub < 0 || in->sub >= fm_table->count) return bad("fastmath loop", k);
            ++*n_fm;
            continue;
        }
        int n = in->op > 0 && in->op < N_OPS ? nargs(in->op) : 0;
        if (n == 0 || in->type < 0 || in->type >= N_TYPES) return bad("op", k);
        if (in->dst < 0 || in->dst >= p->n_values || in->a < 0 || in->a >= p->n_values
            || (n > 1 && (in->b < 0 || in->b >= p->n_values))
            || (n > 2 && (in->c < 0 || in->c >= p->n_values))
            || (n > 3 && (in->e < 0 || in->e >= p->n_values)))
            return bad("operand", k);
        if (p->values[(Py_ssize_t)in->dst * VWORDS + 1] == K_IN) return bad("writes an input", k);
        if (!types_ok(in, vt)) return bad("types", k);
    }
    return 0;
}

/* ---- running ---------------------------------------------------------- */

typedef struct {
    const Program *p;
    const int32_t *vt;
    char **in_ptr;          /* per input: its data */
    char **out_ptr;
    char *scratch;          /* n_slots slots of block * stride bytes */
    Py_ssize_t pitch;       /* bytes from a slot to the next */
    const char *one;        /* per value: a one-element input (read at every element) */
    char **ptr;             /* per value, this block */
    Py_ssize_t n;
    int64_t *flags;         /* FM: the flagged elements' indices (n per FM) */
    Py_ssize_t n_flags;     /* how many so far */
} Run;

/* One FM instruction over the block at off: its loop's flagged indices,
 * made the run's, appended to r->flags. A one-element operand is first
 * spread over dst (the loop then runs in place). */
static void exec_fm(Run *r, const Instr *in, Py_ssize_t off, Py_ssize_t m)
{
    const float *x = (const float *)r->ptr[in->a];
    float *d = (float *)r->ptr[in->dst];
    if (r->one[in->a]) {
        for (Py_ssize_t i = 0; i < m; i++) d[i] = x[0];
        x = d;
    }
    int64_t *f = r->flags + r->n_flags;
    Py_ssize_t k = fm_table->loops[in->sub](x, d, f, m);
    for (Py_ssize_t i = 0; i < k; i++) f[i] += off;
    r->n_flags += k;
}

static void run_blocks(Run *r)
{
    const Program *p = r->p;
    Py_ssize_t block = p->block;
    for (Py_ssize_t off = 0; off < r->n; off += block) {
        Py_ssize_t m = r->n - off < block ? r->n - off : block;
        for (Py_ssize_t v = 0; v < p->n_values; v++) {
            const int32_t *e = p->values + v * VWORDS;
            Py_ssize_t sz = SIZE[e[0]];
            if (r->one[v]) r->ptr[v] = r->in_ptr[e[2]];
            else if (e[1] == K_IN) r->ptr[v] = r->in_ptr[e[2]] + off * sz;
            else if (e[1] == K_OUT) r->ptr[v] = r->out_ptr[e[2]] + off * sz;
            else r->ptr[v] = r->scratch + (Py_ssize_t)e[2] * r->pitch;
        }
        for (Py_ssize_t k = 0; k < p->n_instr; k++) {
            const Instr *in = p->instr + k;
            if (in->op == OP_FM) {
                exec_fm(r, in, off, m);
                continue;
            }
            int n = nargs(in->op);
            int one = r->one[in->a] | (n > 1 ? r->one[in->b] << 1 : 0)
                      | (n > 2 ? r->one[in->c] << 2 : 0) | (n > 3 ? r->one[in->e] << 3 : 0);
            exec1(in, r->vt[in->dst], one, r->ptr[in->dst], r->ptr[in->a],
                  n > 1 ? r->ptr[in->b] : NULL, n > 2 ? r->ptr[in->c] : NULL,
                  n > 3 ? r->ptr[in->e] : NULL, m);
        }
    }
}

/* Gets the buffers of seq (writable ones for outputs); -1 with an exception. */
static int get_buffers(PyObject *seq, Py_buffer *bufs, Py_ssize_t count, int writable,
                       const char *what)
{
    for (Py_ssize_t k = 0; k < count; k++) {
        PyObject *o = PySequence_Fast_GET_ITEM(seq, k);
        if (PyObject_GetBuffer(o, &bufs[k], writable ? PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS
                                                     : PyBUF_C_CONTIGUOUS) < 0) {
            for (Py_ssize_t j = 0; j < k; j++) PyBuffer_Release(&bufs[j]);
            PyErr_Format(PyExc_TypeError, "_chains.run: %s %zd is not a contiguous%s buffer",
                         what, k, writable ? " writable" : "");
            return -1;
        }
    }
    return 0;
}

/* Lengths and alignment of the buffers against the values they hold. */
static int check_buffers(const Program *p, Py_buffer *ins, Py_buffer *outs, Py_ssize_t n,
                         char *one)
{
    for (Py_ssize_t v = 0; v < p->n_values; v++) {
        const int32_t *e = p->values + v * VWORDS;
        Py_ssize_t sz = SIZE[e[0]];
        Py_buffer *b = e[1] == K_IN ? &ins[e[2]] : e[1] == K_OUT ? &outs[e[2]] : NULL;
        one[v] = 0;
        if (b == NULL) continue;
        if ((uintptr_t)b->buf % (uintptr_t)sz) {
            PyErr_Format(PyExc_ValueError, "_chains.run: %s %d is not aligned to %zd bytes",
                         e[1] == K_IN ? "input" : "output", e[2], sz);
            return -1;
        }
        if (b->len == n * sz) continue;
        if (e[1] == K_IN && b->len == sz) { one[v] = 1; continue; }
        PyErr_Format(PyExc_ValueError, "_chains.run: %s %d has %zd bytes, want %zd%s",
                     e[1] == K_IN ? "input" : "output", e[2], b->len, n * sz,
                     e[1] == K_IN ? " or one element" : "");
        return -1;
    }
    for (Py_ssize_t k = 0; k < p->n_outputs; k++) {
        for (Py_ssize_t j = 0; j < p->n_inputs; j++)
            if (buffers_overlap(&outs[k], &ins[j])) goto overlap;
        for (Py_ssize_t j = 0; j < k; j++)
            if (buffers_overlap(&outs[k], &outs[j])) goto overlap;
    }
    return 0;
overlap:
    PyErr_SetString(PyExc_ValueError, "_chains.run: an output overlaps an input or another output");
    return -1;
}

/* The flags buffer of a program with n_fm FM instructions: int64, room for
 * n indices per instruction, overlapping no input or output. */
static int check_flags(const Program *p, Py_buffer *ins, Py_buffer *outs, Py_ssize_t n,
                       Py_buffer *flags, Py_ssize_t n_fm)
{
    if (n_fm == 0) return 0;
    if (flags == NULL) {
        PyErr_SetString(PyExc_ValueError, "_chains.run: the program calls _fastmath loops "
                        "and needs a flags buffer");
        return -1;
    }
    if (flags->itemsize != 8 || !(buffer_format_is(flags, 'q') || buffer_format_is(flags, 'l'))
        || (uintptr_t)flags->buf % 8) {
        PyErr_SetString(PyExc_TypeError, "_chains.run: flags must be an aligned int64 buffer");
        return -1;
    }
    if (flags->len / 8 / n_fm < n) {
        PyErr_Format(PyExc_ValueError, "_chains.run: flags has %zd entries, want %zd x %zd",
                     flags->len / 8, n, n_fm);
        return -1;
    }
    for (Py_ssize_t k = 0; k < p->n_inputs; k++)
        if (buffers_overlap(flags, &ins[k])) goto overlap;
    for (Py_ssize_t k = 0; k < p->n_outputs; k++)
        if (buffers_overlap(flags, &outs[k])) goto overlap;
    return 0;
overlap:
    PyErr_SetString(PyExc_ValueError, "_chains.run: flags overlaps an input or output");
    return -1;
}

static int execute(const Program *p, Py_buffer *ins, Py_buffer *outs, Py_ssize_t n,
                   Py_buffer *flags, Py_ssize_t *n_flagged)
{
    Py_ssize_t nv = p->n_values, block = p->block;
    int32_t *vt = PyMem_Calloc((size_t)nv + 1, sizeof(int32_t));
    char *one = PyMem_Calloc((size_t)nv + 1, 1);
    char **tables = PyMem_Calloc((size_t)nv + (size_t)p->n_inputs + (size_t)p->n_outputs + 1,
                                 sizeof(char *));
    char *scratch = NULL;
    int rc = -1;
    if (!vt || !one || !tables) { PyErr_NoMemory(); goto done; }
    for (Py_ssize_t v = 0; v < nv; v++) vt[v] = p->values[v * VWORDS];
    Py_ssize_t n_fm;
    if (check_instr(p, vt, &n_fm) < 0 || check_buffers(p, ins, outs, n, one) < 0
        || check_flags(p, ins, outs, n, flags, n_fm) < 0)
        goto done;
    Py_ssize_t stride = 1;
    for (Py_ssize_t v = 0; v < nv; v++)
        if (SIZE[vt[v]] > stride) stride = SIZE[vt[v]];
    /* The slots, 64-byte aligned, each a few cache lines more than a block
     * of the widest value: blocks 4 KiB apart would make every load wait
     * for the store before it (the core matches them on their low 12 bits). */
    Py_ssize_t pitch = block * stride + 5 * 64;
    pitch += (64 - pitch % 64) % 64;
    scratch = PyMem_RawMalloc((size_t)p->n_slots * (size_t)pitch + 64);
    if (!scratch) { PyErr_NoMemory(); goto done; }
    Run r = {p, vt, tables, tables + p->n_inputs,
             scratch + (64 - (uintptr_t)scratch % 64) % 64, pitch, one,
             tables + p->n_inputs + p->n_outputs, n,
             n_fm ? (int64_t *)flags->buf : NULL, 0};
    for (Py_ssize_t k = 0; k < p->n_inputs; k++) r.in_ptr[k] = ins[k].buf;
    for (Py_ssize_t k = 0; k < p->n_outputs; k++) r.out_ptr[k] = outs[k].buf;
    if (n > 0) {
        Py_BEGIN_ALLOW_THREADS
        run_blocks(&r);
        Py_END_ALLOW_THREADS
    }
    *n_flagged = r.n_flags;
    rc = 0;
done:
    PyMem_RawFree(scratch);
    PyMem_Free(tables);
    PyMem_Free(one);
    PyMem_Free(vt);
    return rc;
}

static PyObject *run(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer prog, flags = {0};
    Py_ssize_t n, n_flagged = 0;
    PyObject *ins_obj, *outs_obj, *flags_obj = Py_None;
    if (!PyArg_ParseTuple(args, "y*nOO|O:run", &prog, &n, &ins_obj, &outs_obj, &flags_obj))
        return NULL;
    PyObject *ins = NULL, *outs = NULL, *res = NULL;
    Py_buffer *bufs = NULL;
    int got_flags = 0;
    Program p;
    Py_ssize_t ni = 0, no = 0;
    int got = 0;
    if (check_program(prog.buf, prog.len, &p) < 0) goto done;
    if (n < 0) { PyErr_SetString(PyExc_ValueError, "_chains.run: n < 0"); goto done; }
    ins = PySequence_Fast(ins_obj, "_chains.run: inputs must be a sequence");
    outs = ins ? PySequence_Fast(outs_obj, "_chains.run: outputs must be a sequence") : NULL;
    if (!outs) goto done;
    ni = PySequence_Fast_GET_SIZE(ins);
    no = PySequence_Fast_GET_SIZE(outs);
    if (ni != p.n_inputs || no != p.n_outputs) {
        PyErr_Format(PyExc_ValueError, "_chains.run: %zd inputs and %zd outputs, the program "
                     "takes %d and %d", ni, no, p.n_inputs, p.n_outputs);
        goto done;
    }
    bufs = PyMem_Calloc((size_t)(ni + no) + 1, sizeof(Py_buffer));
    if (!bufs) { PyErr_NoMemory(); goto done; }
    if (get_buffers(ins, bufs, ni, 0, "input") < 0) goto done;
    if (get_buffers(outs, bufs + ni, no, 1, "output") < 0) {
        for (Py_ssize_t k = 0; k < ni; k++) PyBuffer_Release(&bufs[k]);
        goto done;
    }
    got = 1;
    if (flags_obj != Py_None) {
        if (PyObject_GetBuffer(flags_obj, &flags,
                               PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
            goto done;
        got_flags = 1;
    }
    if (execute(&p, bufs, bufs + ni, n, got_flags ? &flags : NULL, &n_flagged) == 0)
        res = PyLong_FromSsize_t(n_flagged);
done:
    if (got_flags) PyBuffer_Release(&flags);
    if (got)
        for (Py_ssize_t k = 0; k < ni + no; k++) PyBuffer_Release(&bufs[k]);
    PyMem_Free(bufs);
    Py_XDECREF(ins);
    Py_XDECREF(outs);
    PyBuffer_Release(&prog);
    return res;
}

/* ---- scalar while loops: LoopCode and run_loop ------------------------ */

/* Loop program words (loopvm.py): header LMAGIC, n_regs, n_cond, n_body,
 * pred, n_moves, n_arrays; then the type of each register; then the element
 * type of each array; then n_cond + n_body instructions (op, type, sub, dst,
 * a, b, c, e: registers); then n_moves (dst, src) register pairs. A
 * register is one 8-byte slot of the state buffer holding one value at its
 * start. Two instructions reach the arrays (1-D buffers given to run_loop):
 * LOAD (dst register = array a [register b]) and STORE (array dst [register
 * a] = register b), the index (of integer type sub) clamped to the array as
 * dynamic_slice / dynamic_update_slice clamp a start index; OP_MATH
 * (dst register = f(register a), b the pause register) and OP_FTOI (dst =
 * register a converted) are loop-only too. One iteration
 * runs the cond instructions, stops when register pred (bool) is false,
 * runs the body instructions, then the moves as a parallel assignment
 * (every source read before any destination is written).
 *
 * LoopCode(program, init, inputs, outputs) checks the words once and keeps
 * them decoded (read-only from then on: one LoopCode serves every call and
 * thread): one LInstr per instruction, the cond's, then the body's, then the
 * moves as a sequence of copies (a cycle through one temporary). init is the registers'
 * initial bytes (the constants); inputs / outputs the register of each value
 * start() writes / finish() reads (-1: a value that is not a register, an
 * array). */
#define LMAGIC 0x324c4843 /* "CHL2" */
#define LHEADER 7
#define OP_LOAD 100
#define OP_STORE 101
#define OP_MATH 102   /* loop programs only: see "loop programs: float functions" */
#define OP_FTOI 103   /* loop programs only: float -> integer convert */

/* One decoded instruction: its dense code, the byte offsets of its
 * registers in the state (LOAD: a is the array; STORE: d is the array),
 * and its index in the program (F_SLOW: the Instr exec1 runs). */
typedef struct {
    int32_t fast, sub, d, a, b, c, e, k;
} LInstr;

/* The common scalar ops decoded to one dense code each, run inline by
 * loop_steps with the expressions of the block ops above (same bits); the
 * rest (F_SLOW) go through exec1 over one element. 8- and 16-bit integers
 * take exec1 (their products promote to int). L_TMP_IN and L_TMP_OUT are
 * the moves' own steps (not program ops). */
enum {
    F_SLOW, F_SELECT, F_COPY,
#define FAST_INT(N) F_ADD_##N, F_SUB_##N, F_MUL_##N, F_AND_##N, F_OR_##N, F_XOR_##N, F_NOT_##N, \
    F_SHL_##N, F_SHRL_##N, F_SHRA_##N, F_CMP_S##N, F_CMP_U##N
    FAST_INT(32), FAST_INT(64),
#define FAST_FLOAT(F) F_ADD_##F, F_SUB_##F, F_MUL_##F, F_DIV_##F, F_NEG_##F, F_ABS_##F, \
    F_MAX_##F, F_MIN_##F, F_CMP_##F
    FAST_FLOAT(float), FAST_FLOAT(double),
    F_CVT_I32_F32, F_CVT_I32_F64, F_CVT_F32_F64, F_CVT_F64_F32, F_CVT_U32_F32, F_CVT_I32_I64,
    F_CVT_BOOL_I32, F_LOAD, F_STORE, F_MATH, F_FTOI,
    L_TMP_IN, L_TMP_OUT,
    N_FAST   /* (new codes go above: the threaded body runs them through exec_step) */
};

static int fast_code(const Instr *in, int rt)
{
    int op = in->op, t = in->type;
    if (op == OP_LOAD) return F_LOAD;
    if (op == OP_STORE) return F_STORE;
    if (op == OP_MATH) return F_MATH;
    if (op == OP_FTOI) return F_FTOI;
    if (op == OP_SELECT) return F_SELECT;
    if (op == OP_COPY) return F_COPY;
    if (op == OP_CVT) {
        if (t == T_I32 && rt == T_F32) return F_CVT_I32_F32;
        if (t == T_I32 && rt == T_F64) return F_CVT_I32_F64;
        if (t == T_F32 && rt == T_F64) return F_CVT_F32_F64;
        if (t == T_F64 && rt == T_F32) return F_CVT_F64_F32;
        if (t == T_U32 && rt == T_F32) return F_CVT_U32_F32;
        if (t == T_I32 && rt == T_I64) return F_CVT_I32_I64;
        if (t == T_BOOL && rt == T_I32) return F_CVT_BOOL_I32;
        return F_SLOW;
    }
    if (op == OP_CMP && (in->sub & TOTALORDER)) return F_SLOW;
    if (is_float(t)) {
        int base = t == T_F32 ? F_ADD_float : F_ADD_double;
        switch (op) {
        case OP_ADD: return base; case OP_SUB: return base + 1; case OP_MUL: return base + 2;
        case OP_DIV: return base + 3; case OP_NEG: return base + 4; case OP_ABS: return base + 5;
        case OP_MAX: return base + 6; case OP_MIN: return base + 7; case OP_CMP: return base + 8;
        default: return F_SLOW;
        }
    }
    if (t != T_I32 && t != T_U32 && t != T_I64 && t != T_U64) return F_SLOW;
    int base = SIZE[t] == 4 ? F_ADD_32 : F_ADD_64, sgn = t == T_I32 || t == T_I64;
    switch (op) {
    case OP_ADD: return base; case OP_SUB: return base + 1; case OP_MUL: return base + 2;
    case OP_AND: return base + 3; case OP_OR: return base + 4; case OP_XOR: return base + 5;
    case OP_NOT: return base + 6; case OP_SHL: return base + 7; case OP_SHRL: return base + 8;
    case OP_SHRA: return base + 9; case OP_CMP: return base + (sgn ? 10 : 11);
    default: return F_SLOW;
    }
}

#define V(T, p) (*(T *)(void *)(p))
/* Register at byte offset OFF of the state. */
#define R(T, OFF) V(T, regs + (OFF))
#define DIR(sub, X, Y) ((sub) == D_EQ ? (X) == (Y) : (sub) == D_NE ? (X) != (Y) \
    : (sub) == D_LT ? (X) < (Y) : (sub) == D_LE ? (X) <= (Y) : (sub) == D_GT ? (X) > (Y) \
    : (X) >= (Y))
#define CASES_INT(N, U, S) \
    case F_ADD_##N: R(U, x->d) = (U)(R(U, x->a) + R(U, x->b)); break; \
    case F_SUB_##N: R(U, x->d) = (U)(R(U, x->a) - R(U, x->b)); break; \
    case F_MUL_##N: R(U, x->d) = (U)(R(U, x->a) * R(U, x->b)); break; \
    case F_AND_##N: R(U, x->d) = R(U, x->a) & R(U, x->b); break; \
    case F_OR_##N: R(U, x->d) = R(U, x->a) | R(U, x->b); break; \
    case F_XOR_##N: R(U, x->d) = R(U, x->a) ^ R(U, x->b); break; \
    case F_NOT_##N: R(U, x->d) = (U)~R(U, x->a); break; \
    case F_SHL_##N: { U y = R(U, x->b); R(U, x->d) = y >= N ? (U)0 : (U)(R(U, x->a) << y); \
        break; } \
    case F_SHRL_##N: { U y = R(U, x->b); R(U, x->d) = y >= N ? (U)0 : (U)(R(U, x->a) >> y); \
        break; } \
    case F_SHRA_##N: { U y = R(U, x->b); \
        R(U, x->d) = (U)((S)R(U, x->a) >> (y >= N ? (U)(N - 1) : y)); break; } \
    case F_CMP_S##N: R(uint8_t, x->d) = DIR(x->sub, R(S, x->a), R(S, x->b)); break; \
    case F_CMP_U##N: R(uint8_t, x->d) = DIR(x->sub, R(U, x->a), R(U, x->b)); break;
#define CASES_FLOAT(F, ABS) \
    case F_ADD_##F: R(F, x->d) = R(F, x->a) + R(F, x->b); break; \
    case F_SUB_##F: R(F, x->d) = R(F, x->a) - R(F, x->b); break; \
    case F_MUL_##F: R(F, x->d) = R(F, x->a) * R(F, x->b); break; \
    case F_DIV_##F: R(F, x->d) = R(F, x->a) / R(F, x->b); break; \
    case F_NEG_##F: R(F, x->d) = -R(F, x->a); break; \
    case F_ABS_##F: R(F, x->d) = ABS(R(F, x->a)); break; \
    case F_MAX_##F: R(F, x->d) = max_##F(R(F, x->a), R(F, x->b)); break; \
    case F_MIN_##F: R(F, x->d) = min_##F(R(F, x->a), R(F, x->b)); break; \
    case F_CMP_##F: R(uint8_t, x->d) = DIR(x->sub, R(F, x->a), R(F, x->b)); break;

/* An index register of integer type t clamped to [0, n - 1] (n >= 1). */
static inline Py_ssize_t clamp_index(const char *p, int t, Py_ssize_t n)
{
    int64_t v;
    uint64_t u;
    switch (t) {
    case T_I8: v = V(int8_t, p); break;
    case T_I16: v = V(int16_t, p); break;
    case T_I32: v = V(int32_t, p); break;
    case T_I64: v = V(int64_t, p); break;
    case T_U8: v = V(uint8_t, p); break;
    case T_U16: v = V(uint16_t, p); break;
    case T_U32: v = V(uint32_t, p); break;
    default: u = V(uint64_t, p); return u >= (uint64_t)n ? n - 1 : (Py_ssize_t)u;
    }
    return v < 0 ? 0 : v >= (int64_t)n ? n - 1 : (Py_ssize_t)v;
}

/* ---- loop programs: float functions and float -> integer converts -----
 *
 * OP_MATH (type f32 or f64, sub a MATH_* function, dst = f(register a), b:
 * the pause register, int64) gives the bits of the interpreter's kernel of
 * the function, or does not run (math_op returns 0, nothing written): the
 * loop pauses before it (loop_steps_guarded) for the caller to compute it
 * with the kernel itself.
 *
 * float32: the kernels (ops/fastmath.py) round numpy's float64 function of
 * (double)x once to float32. Here y is the C library's float64 function
 * (glibc: within 1-2 float64 ULPs of the true value, as numpy's own float64
 * loops are within a few), rounded to float32. Two float64 values within e
 * ULPs of the true value round to the same float32 unless one lies within
 * e ULPs of a float32 rounding boundary (a halfway point); y is trusted
 * only when its 29 bits that the rounding drops lie more than F32_TIE_GUARD
 * (2^15, _buffers.h, shared with _fastmath.c: thousands of times the two libraries' errors
 * together) units from the halfway pattern. Otherwise -- about 1 element
 * in 8000 -- and when the input is not finite, y is not finite (NaN
 * payloads and signs are the library's), or sin/cos of |x| >= 2^20, it
 * pauses. Results below float32's normal range are tested alike on the
 * subnormals' grid (a decaying exp must not pause at every step).
 *
 * float64 (spec mode only, loopvm.py): spec numerics' float64 kernels
 * (ops/spec_kernels.py libm) call these C library functions, taking numpy's
 * value where Python's math raises (a domain error, an overflow): every
 * finite result of a finite input is the library's own bits; the others
 * pause. (Accurate mode's float64 kernels are numpy's own loops, SIMD on
 * some hosts: not reproducible here, loopvm.py does not lower them.) */
enum { MATH_SIN, MATH_COS, MATH_TANH, MATH_EXP, MATH_LOG, MATH_LOGISTIC, MATH_EXPM1,
       MATH_LOG1P, N_MATH };

/* The C library's float64 function fn of v. */
static double math_f64(int fn, double v)
{
    switch (fn) {
    case MATH_SIN: return sin(v);
    case MATH_COS: return cos(v);
    case MATH_TANH: return tanh(v);
    case MATH_EXP: return exp(v);
    case MATH_LOG: return log(v);
    case MATH_LOGISTIC: return 1.0 / (1.0 + exp(-v));   /* the f32 kernel's formula */
    case MATH_EXPM1: return expm1(v);
    default: return log1p(v);
    }
}

/* dst = f(a), or 0 (nothing written) when the caller must compute it. */
static int math_op(int t, int fn, const char *a, char *d)
{
    if (t == T_F64) {   /* spec mode's float64 kernels call these very functions */
        double x = V(double, a), y;
        if (!isfinite(x) || fn == MATH_LOGISTIC) return 0;
        y = math_f64(fn, x);
        if (!isfinite(y)) return 0;   /* where math raises, numpy's value */
        V(double, d) = y;
        return 1;
    }
    float x = V(float, a);
    if (!isfinite(x)) return 0;
    /* Large sin/cos arguments take the kernel, as _fastmath.c's do (from
     * its TRIG_MAX on): no bound is claimed here for a float64 library's
     * argument reduction of them. */
    if ((fn == MATH_SIN || fn == MATH_COS) && fabsf(x) >= 0x1p20f) return 0;
    double y = math_f64(fn, x);
    if (!isfinite(y)) return 0;
    double ay = fabs(y);
    if (ay >= 0x1p-126) {   /* a float32 normal range: rounding drops 29 bits */
        uint64_t u;
        memcpy(&u, &y, 8);
        uint32_t low = (uint32_t)(u & ((1u << 29) - 1));
        /* |low - 2^28| < GUARD, as one unsigned compare */
        if (low - ((1u << 28) - F32_TIE_GUARD) < 2 * F32_TIE_GUARD) return 0;
    } else {
        /* float32 zero and subnormals: multiples of 2^-149. s counts them
         * (exactly); its halfway points are the rounding boundaries, and
         * GUARD * s * 2^-52 is at least GUARD of y's float64 ULPs there. */
        double s = ay * 0x1p149, f = s - floor(s);
        if (fabs(f - 0.5) <= F32_TIE_GUARD * 0x1p-52 * s) return 0;
    }
    V(float, d) = (float)y;
    return 1;
}

/* OP_FTOI (type the float source, dst an integer register): ops/
 * elementwise_convert.py's _float_to_int: truncate toward zero, NaN -> 0,
 * out of range saturates to the type's minimum / maximum. Exact: no pause. */
#define FTOI_TO(T, LO, HI) do { T r_; \
    if (t != t) r_ = 0; \
    else if (t >= (double)(LO) && t < 2.0 * ((double)((HI) / 2 + 1))) r_ = (T)t; \
    else r_ = t > 0 ? (T)(HI) : (T)(LO); \
    V(T, d) = r_; } while (0)

static void ftoi(int st, int rt, const char *a, char *d)
{
    double t = trunc(st == T_F32 ? (double)V(float, a) : V(double, a));
    switch (rt) {
    case T_I8: FTOI_TO(int8_t, INT8_MIN, INT8_MAX); break;
    case T_I16: FTOI_TO(int16_t, INT16_MIN, INT16_MAX); break;
    case T_I32: FTOI_TO(int32_t, INT32_MIN, INT32_MAX); break;
    case T_I64: FTOI_TO(int64_t, INT64_MIN, INT64_MAX); break;
    case T_U8: FTOI_TO(uint8_t, 0, UINT8_MAX); break;
    case T_U16: FTOI_TO(uint16_t, 0, UINT16_MAX); break;
    case T_U32: FTOI_TO(uint32_t, 0, UINT32_MAX); break;
    default: FTOI_TO(uint64_t, 0, UINT64_MAX); break;
    }
}

typedef struct {
    PyObject_HEAD
    int32_t *words;         /* the checked program (a copy) */
    int32_t n_regs, n_cond, n_body, pred, n_moves, n_arrays, n_code;
    const int32_t *vt, *at; /* per register / array: its type */
    const Instr *instr;
    LInstr *code;           /* n_code decoded steps: cond, body, moves */
    char *stored;           /* per array: written by a STORE */
    char *init;             /* n_regs * 8 bytes */
    int32_t *inputs, *outputs;
    Py_ssize_t n_inputs, n_outputs;
    char (*formats)[8];     /* per input: its buffer's format ("": any) */
    int32_t *ndims;         /* per input: its buffer's ndim (-1: any) */
    int32_t pause_reg;      /* the OP_MATH instructions' pause register, -1 without */
} LoopCode;

/* One run's array: its data and length in elements. */
typedef struct {
    char *buf;
    Py_ssize_t n, esz;
} ArrBuf;

/* One decoded step on the registers (tmp: the moves' temporary). */
static inline __attribute__((always_inline)) void exec_step(const LoopCode *lc, const LInstr *x,
                                                            char *regs, const ArrBuf *arrs,
                                                            uint64_t *tmp)
{
    switch (x->fast) {
    case L_TMP_IN: *tmp = R(uint64_t, x->a); break;
    case L_TMP_OUT: R(uint64_t, x->d) = *tmp; break;
    case F_SELECT: R(uint64_t, x->d) = R(uint8_t, x->a) ? R(uint64_t, x->b) : R(uint64_t, x->c);
        break;
    case F_COPY: R(uint64_t, x->d) = R(uint64_t, x->a); break;
    CASES_INT(32, uint32_t, int32_t)
    CASES_INT(64, uint64_t, int64_t)
    CASES_FLOAT(float, fabs_bits_f)
    CASES_FLOAT(double, fabs_bits_d)
    case F_CVT_I32_F32: R(float, x->d) = (float)R(int32_t, x->a); break;
    case F_CVT_I32_F64: R(double, x->d) = (double)R(int32_t, x->a); break;
    case F_CVT_F32_F64: R(double, x->d) = (double)R(float, x->a); break;
    case F_CVT_F64_F32: R(float, x->d) = (float)R(double, x->a); break;
    case F_CVT_U32_F32: R(float, x->d) = (float)R(uint32_t, x->a); break;
    case F_CVT_I32_I64: R(int64_t, x->d) = (int64_t)R(int32_t, x->a); break;
    case F_CVT_BOOL_I32: R(uint32_t, x->d) = R(uint8_t, x->a) != 0; break;
    case F_LOAD: { const ArrBuf *ab = arrs + x->a;
        memcpy(regs + x->d, ab->buf + clamp_index(regs + x->b, x->sub, ab->n) * ab->esz,
               (size_t)ab->esz);
        break; }
    case F_STORE: { const ArrBuf *ab = arrs + x->d;
        memcpy(ab->buf + clamp_index(regs + x->a, x->sub, ab->n) * ab->esz, regs + x->b,
               (size_t)ab->esz);
        break; }
    case F_FTOI: { const Instr *in = lc->instr + x->k;
        ftoi(in->type, lc->vt[in->dst], regs + x->a, regs + x->d);
        break; }
    case F_MATH: break;   /* never here: loop_steps_guarded runs OP_MATH (it may pause) */
    default: { const Instr *in = lc->instr + x->k;   /* F_SLOW */
        exec1(in, lc->vt[in->dst], 0, regs + x->d, regs + x->a, regs + x->b, regs + x->c,
              regs + x->e, 1);
        break; }
    }
}

#if defined(__GNUC__)
/* The body's steps as threaded code (GCC's labels as values): each handler
 * of a common integer/float op jumps straight to the next step's handler,
 * without the switch's range check and loop test, and each has its own
 * indirect jump to predict. Every other code (the rest of the switch, codes
 * added to it) runs through exec_step. The body's last step is followed by
 * a sentinel whose code is N_FAST (end of the body). Same bits: the
 * handlers are the switch's expressions. */
#define TH_INT(N, U, S) \
    [F_ADD_##N] = &&t_ADD_##N, [F_SUB_##N] = &&t_SUB_##N, [F_MUL_##N] = &&t_MUL_##N, \
    [F_AND_##N] = &&t_AND_##N, [F_OR_##N] = &&t_OR_##N, [F_XOR_##N] = &&t_XOR_##N, \
    [F_SHL_##N] = &&t_SHL_##N, [F_SHRL_##N] = &&t_SHRL_##N, [F_SHRA_##N] = &&t_SHRA_##N, \
    [F_CMP_S##N] = &&t_CMP_S##N, [F_CMP_U##N] = &&t_CMP_U##N
#define TH_FLOAT(F) \
    [F_ADD_##F] = &&t_ADD_##F, [F_SUB_##F] = &&t_SUB_##F, [F_MUL_##F] = &&t_MUL_##F, \
    [F_DIV_##F] = &&t_DIV_##F, [F_CMP_##F] = &&t_CMP_##F
#define NEXT_STEP do { x++; goto *tbl[x->fast]; } while (0)
#define TL_INT(N, U, S) \
    t_ADD_##N: R(U, x->d) = (U)(R(U, x->a) + R(U, x->b)); NEXT_STEP; \
    t_SUB_##N: R(U, x->d) = (U)(R(U, x->a) - R(U, x->b)); NEXT_STEP; \
    t_MUL_##N: R(U, x->d) = (U)(R(U, x->a) * R(U, x->b)); NEXT_STEP; \
    t_AND_##N: R(U, x->d) = R(U, x->a) & R(U, x->b); NEXT_STEP; \
    t_OR_##N: R(U, x->d) = R(U, x->a) | R(U, x->b); NEXT_STEP; \
    t_XOR_##N: R(U, x->d) = R(U, x->a) ^ R(U, x->b); NEXT_STEP; \
    t_SHL_##N: { U y = R(U, x->b); R(U, x->d) = y >= N ? (U)0 : (U)(R(U, x->a) << y); \
        NEXT_STEP; } \
    t_SHRL_##N: { U y = R(U, x->b); R(U, x->d) = y >= N ? (U)0 : (U)(R(U, x->a) >> y); \
        NEXT_STEP; } \
    t_SHRA_##N: { U y = R(U, x->b); \
        R(U, x->d) = (U)((S)R(U, x->a) >> (y >= N ? (U)(N - 1) : y)); NEXT_STEP; } \
    t_CMP_S##N: R(uint8_t, x->d) = DIR(x->sub, R(S, x->a), R(S, x->b)); NEXT_STEP; \
    t_CMP_U##N: R(uint8_t, x->d) = DIR(x->sub, R(U, x->a), R(U, x->b)); NEXT_STEP;
#define TL_FLOAT(F) \
    t_ADD_##F: R(F, x->d) = R(F, x->a) + R(F, x->b); NEXT_STEP; \
    t_SUB_##F: R(F, x->d) = R(F, x->a) - R(F, x->b); NEXT_STEP; \
    t_MUL_##F: R(F, x->d) = R(F, x->a) * R(F, x->b); NEXT_STEP; \
    t_DIV_##F: R(F, x->d) = R(F, x->a) / R(F, x->b); NEXT_STEP; \
    t_CMP_##F: R(uint8_t, x->d) = DIR(x->sub, R(F, x->a), R(F, x->b)); NEXT_STEP;

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Woverride-init"
#pragma GCC diagnostic ignored "-Wpedantic"
static int loop_steps(const LoopCode *lc, char *regs, const ArrBuf *arrs, Py_ssize_t max_steps)
{
    static const void *const tbl[N_FAST + 1] = {
        [0 ... N_FAST - 1] = &&t_other, [N_FAST] = &&t_end,
        [F_COPY] = &&t_COPY, [F_SELECT] = &&t_SELECT,
        TH_INT(32, uint32_t, int32_t), TH_INT(64, uint64_t, int64_t),
        TH_FLOAT(float), TH_FLOAT(double),
    };
    const LInstr *code = lc->code, *body = lc->code + lc->n_cond, *x;
    const int32_t n_cond = lc->n_cond;
    const uint8_t *pred = (const uint8_t *)regs + (Py_ssize_t)lc->pred * 8;
    uint64_t tmp = 0;
    Py_ssize_t step = 0;
next_iteration:
    if (step == max_steps) return 0;
    step++;
    for (int32_t k = 0; k < n_cond; k++) exec_step(lc, code + k, regs, arrs, &tmp);
    if (!*pred) return 1;
    x = body;
    goto *tbl[x->fast];
t_other:
    exec_step(lc, x, regs, arrs, &tmp);
    NEXT_STEP;
t_COPY: R(uint64_t, x->d) = R(uint64_t, x->a); NEXT_STEP;
t_SELECT: R(uint64_t, x->d) = R(uint8_t, x->a) ? R(uint64_t, x->b) : R(uint64_t, x->c);
    NEXT_STEP;
    TL_INT(32, uint32_t, int32_t)
    TL_INT(64, uint64_t, int64_t)
    TL_FLOAT(float)
    TL_FLOAT(double)
t_end:
    goto next_iteration;
}
#pragma GCC diagnostic pop
#else
/* Runs iterations from the start of the cond until the cond is false
 * (returns 1) or max_steps iterations ran (returns 0). The cond's and the
 * body's steps are two loops, each with its own copy of the dispatch. */
static int loop_steps(const LoopCode *lc, char *regs, const ArrBuf *arrs, Py_ssize_t max_steps)
{
    const LInstr *code = lc->code;
    const int32_t n_cond = lc->n_cond, n_code = lc->n_code;
    const uint8_t *pred = (const uint8_t *)regs + (Py_ssize_t)lc->pred * 8;
    uint64_t tmp = 0;
    for (Py_ssize_t step = 0; step < max_steps; step++) {
        for (int32_t k = 0; k < n_cond; k++) exec_step(lc, code + k, regs, arrs, &tmp);
        if (!*pred) return 1;
        for (int32_t k = n_cond; k < n_code; k++) exec_step(lc, code + k, regs, arrs, &tmp);
    }
    return 0;
}
#endif

/* loop_steps for programs with OP_MATH instructions: the same iterations,
 * started at instruction *pause of the current iteration (0: a new one).
 * An OP_MATH the C library's value cannot answer stops the run before it,
 * with *pause = its index + 1 and 0 returned: every instruction before it
 * has run (carries written in place and stores included), none after it.
 * The caller writes its result register and calls again: the iteration
 * goes on where it stopped. (The moves, after the body, never pause.) */
static int loop_steps_guarded(const LoopCode *lc, char *regs, const ArrBuf *arrs,
                              Py_ssize_t max_steps, int64_t *pause)
{
    if (max_steps <= 0) return 0;
    const LInstr *code = lc->code;
    const int32_t n_cond = lc->n_cond, n_code = lc->n_code;
    const uint8_t *pred = (const uint8_t *)regs + (Py_ssize_t)lc->pred * 8;
    uint64_t tmp = 0;
    int32_t k = (int32_t)*pause;
    *pause = 0;
#define RUN_GUARDED(LIMIT) for (; k < (LIMIT); k++) { const LInstr *x = code + k; \
        if (x->fast != F_MATH) exec_step(lc, x, regs, arrs, &tmp); \
        else if (!math_op(lc->instr[x->k].type, x->sub, regs + x->a, regs + x->d)) { \
            *pause = k + 1; return 0; } }
    for (Py_ssize_t step = 0; step < max_steps; step++, k = 0) {
        if (k <= n_cond) {   /* not resumed past the cond's predicate */
            RUN_GUARDED(n_cond)
            if (!*pred) return 1;
        }
        RUN_GUARDED(n_code)
    }
    return 0;
#undef RUN_GUARDED
}

static int bad_loop(const char *what, Py_ssize_t k)
{
    PyErr_Format(PyExc_ValueError, "_chains.LoopCode: bad program: %s (%zd)", what, k);
    return -1;
}

/* OP_MATH: f32 registers dst and a, sub a function, b an int64 register
 * (the pause register; pause_register checks that there is one). OP_FTOI:
 * a of float type t, dst of an integer type. The decoding reads b, which
 * must be a register either way. */
static int check_loop_only(const Instr *in, const int32_t *vt, int32_t n_regs)
{
    if (in->dst < 0 || in->dst >= n_regs || in->a < 0 || in->a >= n_regs || in->b < 0
        || in->b >= n_regs)
        return -1;
    if (in->op == OP_MATH)
        return is_float(in->type) && vt[in->dst] == in->type && vt[in->a] == in->type
               && vt[in->b] == T_I64 && in->sub >= 0 && in->sub < N_MATH ? 0 : -1;
    return is_float(in->type) && vt[in->a] == in->type && is_int(vt[in->dst]) ? 0 : -1;
}

/* The header's and instructions' checks; sets lc's counts and tables. */
static int check_loop(const int32_t *w, Py_ssize_t len, LoopCode *lc)
{
    lc->pause_reg = -1;
    if (len % 4 || len < LHEADER * 4) return bad_loop("length", len);
    if (w[0] != LMAGIC) return bad_loop("magic", w[0]);
    int32_t n_regs = w[1], n_cond = w[2], n_body = w[3], pred = w[4], n_moves = w[5];
    int32_t n_arrays = w[6];
    if (n_regs < 1 || n_regs > (1 << 20) || n_cond < 0 || n_body < 0
        || (int64_t)n_cond + n_body > (1 << 20) || pred < 0 || pred >= n_regs || n_moves < 0
        || n_moves > n_regs || n_arrays < 0 || n_arrays > (1 << 16))
        return bad_loop("header", 0);
    if (len / 4 != LHEADER + (Py_ssize_t)n_regs + n_arrays
                   + ((Py_ssize_t)n_cond + n_body) * IWORDS + 2 * (Py_ssize_t)n_moves)
        return bad_loop("length", len);
    const int32_t *vt = w + LHEADER;
    for (Py_ssize_t v = 0; v < n_regs; v++)
        if (vt[v] < 0 || vt[v] >= N_TYPES) return bad_loop("register type", v);
    if (vt[pred] != T_BOOL) return bad_loop("pred is not bool", pred);
    const int32_t *at = vt + n_regs;
    for (Py_ssize_t k = 0; k < n_arrays; k++)
        if (at[k] < 0 || at[k] >= N_TYPES) return bad_loop("array type", k);
    const Instr *instr = (const Instr *)(at + n_arrays);
    for (Py_ssize_t k = 0; k < (Py_ssize_t)n_cond + n_body; k++) {
        const Instr *in = instr + k;
        if (in->op == OP_LOAD || in->op == OP_STORE) {
            int load = in->op == OP_LOAD;
            int32_t arr = load ? in->a : in->dst, idx = load ? in->b : in->a;
            int32_t val = load ? in->dst : in->b;
            if (arr < 0 || arr >= n_arrays || idx < 0 || idx >= n_regs || val < 0
                || val >= n_regs)
                return bad_loop("operand", k);
            if (in->type != at[arr] || vt[val] != in->type || in->sub != vt[idx]
                || !is_int(in->sub))
                return bad_loop("types", k);
            continue;
        }
        if (in->op == OP_MATH || in->op == OP_FTOI) {
            if (check_loop_only(in, vt, n_regs) < 0) return bad_loop("math", k);
            if (in->op == OP_MATH) {   /* all name the same pause register */
                if (lc->pause_reg >= 0 && in->b != lc->pause_reg)
                    return bad_loop("pause register", k);
                lc->pause_reg = in->b;
            }
            continue;
        }
        int n = in->op > 0 && in->op < N_OPS ? nargs(in->op) : 0;
        if (n == 0 || in->type < 0 || in->type >= N_TYPES) return bad_loop("op", k);
        if (in->dst < 0 || in->dst >= n_regs || in->a < 0 || in->a >= n_regs
            || (n > 1 && (in->b < 0 || in->b >= n_regs))
            || (n > 2 && (in->c < 0 || in->c >= n_regs))
            || (n > 3 && (in->e < 0 || in->e >= n_regs)))
            return bad_loop("operand", k);
        if (!types_ok(in, vt)) return bad_loop("types", k);
    }
    const int32_t *mv = (const int32_t *)(instr + n_cond + n_body);
    for (Py_ssize_t k = 0; k < n_moves; k++) {
        int32_t d = mv[2 * k], s = mv[2 * k + 1];
        if (d < 0 || d >= n_regs || s < 0 || s >= n_regs || vt[d] != vt[s])
            return bad_loop("move", k);
    }
    for (Py_ssize_t k = 0; k < n_moves; k++)
        for (Py_ssize_t j = 0; j < k; j++)
            if (mv[2 * k] == mv[2 * j]) return bad_loop("two moves to one register", k);
    lc->n_regs = n_regs; lc->n_cond = n_cond; lc->n_body = n_body; lc->pred = pred;
    lc->n_moves = n_moves; lc->n_arrays = n_arrays;
    lc->vt = vt; lc->at = at; lc->instr = instr;
    return 0;
}

static LInstr decode1(const LoopCode *lc, Py_ssize_t k)
{
    const Instr *in = lc->instr + k;
    LInstr x = {0, in->sub & 7, 0, 0, 0, 0, 0, (int32_t)k};
    if (in->op == OP_LOAD || in->op == OP_STORE) {
        int load = in->op == OP_LOAD;
        x.fast = load ? F_LOAD : F_STORE;
        x.sub = in->sub;
        x.d = load ? in->dst * 8 : in->dst;    /* STORE: the array */
        x.a = load ? in->a : in->a * 8;        /* LOAD: the array */
        x.b = in->b * 8;
        return x;
    }
    int n = nargs(in->op);   /* (OP_MATH, OP_FTOI: 2; OP_MATH's b is the pause register) */
    x.fast = fast_code(in, lc->vt[in->dst]);
    if (x.fast == F_MATH) x.sub = in->sub;
    x.d = in->dst * 8;
    x.a = in->a * 8;
    x.b = n > 1 ? in->b * 8 : 0;
    x.c = n > 2 ? in->c * 8 : 0;
    x.e = n > 3 ? in->e * 8 : 0;
    return x;
}

/* The moves as copies in an order that reads every source before it is
 * overwritten: a move whose destination no other pending move reads goes
 * first; when none is left (cycles only), one destination's old value is
 * saved in the temporary and read from there. Returns the next free step. */
static Py_ssize_t sequence_moves(const LoopCode *lc, LInstr *out, Py_ssize_t at)
{
    const int32_t *mv = (const int32_t *)(lc->instr + lc->n_cond + lc->n_body);
    Py_ssize_t n = lc->n_moves;
    int32_t *dst = PyMem_Calloc((size_t)n + 1, 2 * sizeof(int32_t)), *src = dst + n + 1;
    if (!dst) { PyErr_NoMemory(); return -1; }
    Py_ssize_t left = 0;
    for (Py_ssize_t k = 0; k < n; k++)
        if (mv[2 * k] != mv[2 * k + 1]) { dst[left] = mv[2 * k]; src[left] = mv[2 * k + 1]; left++; }
    while (left) {
        Py_ssize_t pick = -1;
        for (Py_ssize_t k = 0; k < left && pick < 0; k++) {
            int read = 0;
            for (Py_ssize_t j = 0; j < left && !read; j++) read = j != k && src[j] == dst[k];
            if (!read) pick = k;
        }
        if (pick < 0) {   /* cycles only: save the first destination's old value */
            LInstr save = {L_TMP_IN, 0, 0, dst[0] * 8, 0, 0, 0, -1};
            out[at++] = save;
            for (Py_ssize_t j = 0; j < left; j++)
                if (src[j] == dst[0]) src[j] = -1;   /* -1: the temporary */
            pick = 0;
        }
        LInstr copy = {src[pick] < 0 ? L_TMP_OUT : F_COPY, 0, dst[pick] * 8,
                       src[pick] < 0 ? 0 : src[pick] * 8, 0, 0, 0, -1};
        out[at++] = copy;
        left--;
        dst[pick] = dst[left];
        src[pick] = src[left];
    }
    PyMem_Free(dst);
    return at;
}

static int loopcode_init_code(LoopCode *lc)
{
    Py_ssize_t n_instr = (Py_ssize_t)lc->n_cond + lc->n_body;
    /* cond, body, at most 2 steps per move (a cycle's save) */
    lc->code = PyMem_Calloc((size_t)(n_instr + 2 * (Py_ssize_t)lc->n_moves + 2), sizeof(LInstr));
    lc->stored = PyMem_Calloc((size_t)lc->n_arrays + 1, 1);
    if (!lc->code || !lc->stored) { PyErr_NoMemory(); return -1; }
    Py_ssize_t at = 0;
    for (Py_ssize_t k = 0; k < n_instr; k++) lc->code[at++] = decode1(lc, k);
    at = sequence_moves(lc, lc->code, at);
    if (at < 0) return -1;
    lc->n_code = (int32_t)at;
    lc->code[at].fast = N_FAST;   /* the end of the body (loop_steps' threaded code) */
    for (Py_ssize_t k = 0; k < n_instr; k++)
        if (lc->instr[k].op == OP_STORE) lc->stored[lc->instr[k].dst] = 1;
    return 0;
}

/* A tuple of register indices (or -1), each < n_regs. */
static int32_t *register_list(PyObject *seq, Py_ssize_t *count, int32_t n_regs, const char *what)
{
    PyObject *fast = PySequence_Fast(seq, "_chains.LoopCode: inputs and outputs must be sequences");
    if (!fast) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    int32_t *out = PyMem_Calloc((size_t)n + 1, sizeof(int32_t));
    if (!out) { Py_DECREF(fast); PyErr_NoMemory(); return NULL; }
    for (Py_ssize_t k = 0; k < n; k++) {
        long r = PyLong_AsLong(PySequence_Fast_GET_ITEM(fast, k));
        if (r == -1 && PyErr_Occurred()) goto fail;
        if (r < -1 || r >= n_regs) {
            PyErr_Format(PyExc_ValueError, "_chains.LoopCode: %s %zd is register %ld of %d",
                         what, k, r, n_regs);
            goto fail;
        }
        out[k] = (int32_t)r;
    }
    Py_DECREF(fast);
    *count = n;
    return out;
fail:
    Py_DECREF(fast);
    PyMem_Free(out);
    return NULL;
}

/* kinds: None, or per input (format, ndim) of the buffer start() takes:
 * the format as the buffer protocol spells it (numpy: "f", "i", "?", ...),
 * "" or ndim -1 for any. */
static int input_kinds(LoopCode *lc, PyObject *kinds)
{
    Py_ssize_t n = lc->n_inputs;
    lc->formats = PyMem_Calloc((size_t)n + 1, sizeof *lc->formats);
    lc->ndims = PyMem_Calloc((size_t)n + 1, sizeof(int32_t));
    if (!lc->formats || !lc->ndims) { PyErr_NoMemory(); return -1; }
    for (Py_ssize_t k = 0; k < n; k++) lc->ndims[k] = -1;
    if (kinds == NULL || kinds == Py_None) return 0;
    PyObject *fast = PySequence_Fast(kinds, "_chains.LoopCode: kinds must be a sequence");
    if (!fast) return -1;
    int rc = -1;
    if (PySequence_Fast_GET_SIZE(fast) != n) {
        PyErr_Format(PyExc_ValueError, "_chains.LoopCode: %zd kinds for %zd inputs",
                     PySequence_Fast_GET_SIZE(fast), n);
        goto done;
    }
    for (Py_ssize_t k = 0; k < n; k++) {
        const char *f;
        int ndim;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(fast, k), "si:kinds", &f, &ndim))
            goto done;
        if (strlen(f) >= sizeof lc->formats[k] || ndim < -1) {
            PyErr_Format(PyExc_ValueError, "_chains.LoopCode: bad kind of input %zd", k);
            goto done;
        }
        strcpy(lc->formats[k], f);
        lc->ndims[k] = ndim;
    }
    rc = 0;
done:
    Py_DECREF(fast);
    return rc;
}

static void loopcode_dealloc(PyObject *self)
{
    LoopCode *lc = (LoopCode *)self;
    PyTypeObject *tp = Py_TYPE(self);
    PyMem_Free(lc->words);
    PyMem_Free(lc->code);
    PyMem_Free(lc->stored);
    PyMem_Free(lc->init);
    PyMem_Free(lc->inputs);
    PyMem_Free(lc->outputs);
    PyMem_Free(lc->formats);
    PyMem_Free(lc->ndims);
    tp->tp_free(self);
    Py_DECREF(tp);
}

static PyObject *loopcode_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kw[] = {"program", "init", "inputs", "outputs", "kinds", NULL};
    Py_buffer prog, init = {0};
    PyObject *init_obj = Py_None, *ins = NULL, *outs = NULL, *kinds = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "y*|OOOO:LoopCode", kw, &prog, &init_obj, &ins,
                                     &outs, &kinds))
        return NULL;
    if (init_obj != Py_None && PyObject_GetBuffer(init_obj, &init, PyBUF_C_CONTIGUOUS) < 0) {
        PyBuffer_Release(&prog);
        return NULL;
    }
    LoopCode *lc = (LoopCode *)type->tp_alloc(type, 0);
    if (!lc) goto fail;
    lc->words = PyMem_Malloc((size_t)prog.len + 4);
    if (!lc->words) { PyErr_NoMemory(); goto fail; }
    memcpy(lc->words, prog.buf, (size_t)prog.len);
    if (check_loop(lc->words, prog.len, lc) < 0 || loopcode_init_code(lc) < 0) goto fail;
    Py_ssize_t state_len = (Py_ssize_t)lc->n_regs * 8;
    lc->init = PyMem_Calloc((size_t)state_len, 1);
    if (!lc->init) { PyErr_NoMemory(); goto fail; }
    if (init.buf != NULL) {
        if (init.len != state_len) {
            PyErr_Format(PyExc_ValueError, "_chains.LoopCode: init has %zd bytes, the program "
                         "takes %zd", init.len, state_len);
            goto fail;
        }
        memcpy(lc->init, init.buf, (size_t)state_len);
    }
    if (ins && !(lc->inputs = register_list(ins, &lc->n_inputs, lc->n_regs, "input")))
        goto fail;
    if (outs && !(lc->outputs = register_list(outs, &lc->n_outputs, lc->n_regs, "output")))
        goto fail;
    if (input_kinds(lc, kinds) < 0) goto fail;
    PyBuffer_Release(&prog);
    if (init.buf != NULL) PyBuffer_Release(&init);
    return (PyObject *)lc;
fail:
    Py_XDECREF(lc);
    PyBuffer_Release(&prog);
    if (init.buf != NULL) PyBuffer_Release(&init);
    return NULL;
}

/* Copies between a buffer and register r: it must be the register's type's size. */
static int register_io(const LoopCode *lc, PyObject *o, int32_t r, char *regs, int out,
                       Py_ssize_t k)
{
    Py_buffer b;
    if (PyObject_GetBuffer(o, &b, out ? PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS
                                      : PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        if (!out) { PyErr_Clear(); return 1; }   /* not a buffer: not of the loop's kind */
        PyErr_Format(PyExc_TypeError, "_chains.LoopCode: output %zd is not a contiguous "
                     "writable buffer", k);
        return -1;
    }
    Py_ssize_t sz = SIZE[lc->vt[r]];
    int rc = 0;
    if (!out && ((lc->formats[k][0] && strcmp(b.format ? b.format : "B", lc->formats[k]))
                 || (lc->ndims[k] >= 0 && b.ndim != lc->ndims[k]) || b.len != sz))
        rc = 1;
    else if (b.len != sz) {
        PyErr_Format(PyExc_ValueError, "_chains.LoopCode: %s %zd has %zd bytes, its register "
                     "holds %zd", out ? "output" : "input", k, b.len, sz);
        rc = -1;
    } else if (out) memcpy(b.buf, regs + (Py_ssize_t)r * 8, (size_t)sz);
    else memcpy(regs + (Py_ssize_t)r * 8, b.buf, (size_t)sz);
    PyBuffer_Release(&b);
    return rc;
}

static PyObject *loopcode_start(PyObject *self, PyObject *values)
{
    LoopCode *lc = (LoopCode *)self;
    PyObject *fast = PySequence_Fast(values, "_chains.LoopCode.start: values must be a sequence");
    if (!fast) return NULL;
    if (PySequence_Fast_GET_SIZE(fast) != lc->n_inputs) {
        PyErr_Format(PyExc_ValueError, "_chains.LoopCode.start: %zd values, the loop takes %zd",
                     PySequence_Fast_GET_SIZE(fast), lc->n_inputs);
        Py_DECREF(fast);
        return NULL;
    }
    PyObject *state = PyByteArray_FromStringAndSize(lc->init, (Py_ssize_t)lc->n_regs * 8);
    if (state) {
        char *regs = PyByteArray_AS_STRING(state);
        for (Py_ssize_t k = 0; k < lc->n_inputs; k++) {
            if (lc->inputs[k] < 0) continue;
            int rc = register_io(lc, PySequence_Fast_GET_ITEM(fast, k), lc->inputs[k], regs, 0,
                                 k);
            if (rc) {
                Py_DECREF(state);
                state = rc < 0 ? NULL : Py_NewRef(Py_None);
                break;
            }
        }
    }
    Py_DECREF(fast);
    return state;
}

/* The state buffer of a run: writable, contiguous, 8-byte aligned, the
 * program's size. */
static int get_state(const LoopCode *lc, PyObject *o, Py_buffer *state, const char *who)
{
    if (PyObject_GetBuffer(o, state, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) {
        PyErr_Format(PyExc_TypeError, "%s: the state is not a writable contiguous buffer", who);
        return -1;
    }
    if ((uintptr_t)state->buf % 8) {
        PyErr_Format(PyExc_ValueError, "%s: the state is not a contiguous buffer aligned to 8 "
                     "bytes", who);
    } else if (state->len != (Py_ssize_t)lc->n_regs * 8) {
        PyErr_Format(PyExc_ValueError, "%s: the state has %zd bytes, the program takes %zd",
                     who, state->len, (Py_ssize_t)lc->n_regs * 8);
    } else return 0;
    PyBuffer_Release(state);
    return -1;
}

static PyObject *loopcode_finish(PyObject *self, PyObject *args)
{
    LoopCode *lc = (LoopCode *)self;
    PyObject *state_obj, *outs;
    if (!PyArg_ParseTuple(args, "OO:finish", &state_obj, &outs)) return NULL;
    Py_buffer state;
    if (get_state(lc, state_obj, &state, "_chains.LoopCode.finish") < 0) return NULL;
    PyObject *fast = PySequence_Fast(outs, "_chains.LoopCode.finish: outputs must be a sequence");
    PyObject *res = NULL;
    if (!fast) goto done;
    if (PySequence_Fast_GET_SIZE(fast) != lc->n_outputs) {
        PyErr_Format(PyExc_ValueError, "_chains.LoopCode.finish: %zd outputs, the loop makes %zd",
                     PySequence_Fast_GET_SIZE(fast), lc->n_outputs);
        goto done;
    }
    for (Py_ssize_t k = 0; k < lc->n_outputs; k++)
        if (lc->outputs[k] >= 0 && register_io(lc, PySequence_Fast_GET_ITEM(fast, k),
                                               lc->outputs[k], state.buf, 1, k) < 0)
            goto done;
    res = Py_NewRef(Py_None);
done:
    Py_XDECREF(fast);
    PyBuffer_Release(&state);
    return res;
}

static PyMethodDef loopcode_methods[] = {
    {"start", loopcode_start, METH_O,
     "start(values) -> bytearray: the initial registers with each value (a buffer of its "
     "register's size; skipped where its register is -1) written to its input register; "
     "None when a value is not of its kind (format, ndim) or not a buffer."},
    {"finish", loopcode_finish, METH_VARARGS,
     "finish(state, outputs): copies each output register to its buffer (skipped where -1)."},
    {NULL, NULL, 0, NULL},
};

static PyObject *loopcode_n_registers(PyObject *self, void *closure)
{
    (void)closure;
    return PyLong_FromLong(((LoopCode *)self)->n_regs);
}

static PyObject *loopcode_n_steps(PyObject *self, void *closure)
{
    (void)closure;
    return PyLong_FromLong(((LoopCode *)self)->n_code);
}

static PyGetSetDef loopcode_getset[] = {
    {"n_registers", loopcode_n_registers, NULL, "registers of the state", NULL},
    {"n_steps", loopcode_n_steps, NULL,
     "decoded steps of one iteration (instructions, then the moves as copies)", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot loopcode_slots[] = {
    {Py_tp_new, loopcode_new},
    {Py_tp_dealloc, loopcode_dealloc},
    {Py_tp_methods, loopcode_methods},
    {Py_tp_getset, loopcode_getset},
    {Py_tp_doc, "LoopCode(program, init=None, inputs=(), outputs=(), kinds=None): a loop program "
                "(loopvm.py) checked and decoded once, for run_loop."},
    {0, NULL},
};

static PyType_Spec loopcode_spec = {
    "stablehlo_interpreter._chains.LoopCode", sizeof(LoopCode), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE, loopcode_slots,
};

typedef struct {
    PyObject *loopcode_type;
} ModState;

/* The arrays' buffers (writable where a STORE writes), each of at least one
 * element of its type, aligned; a written one overlaps no other. */
static int get_arrays(const LoopCode *lc, PyObject *arrays, Py_buffer *abuf, ArrBuf *ab,
                      Py_ssize_t *n_got)
{
    Py_ssize_t na = PySequence_Fast_GET_SIZE(arrays);
    for (Py_ssize_t k = 0; k < na; k++) {
        int stored = lc->stored[k];
        PyObject *o = PySequence_Fast_GET_ITEM(arrays, k);
        if (PyObject_GetBuffer(o, &abuf[k], stored ? PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS
                                                   : PyBUF_C_CONTIGUOUS) < 0) {
            PyErr_Format(PyExc_TypeError, "_chains.run_loop: array %zd is not a contiguous%s "
                         "buffer", k, stored ? " writable" : "");
            return -1;
        }
        *n_got = k + 1;
        Py_ssize_t sz = SIZE[lc->at[k]];
        if (abuf[k].len < sz || abuf[k].len % sz || (uintptr_t)abuf[k].buf % (uintptr_t)sz) {
            PyErr_Format(PyExc_ValueError, "_chains.run_loop: array %zd has %zd bytes, not a "
                         "whole number (>= 1) of aligned %zd-byte elements", k, abuf[k].len, sz);
            return -1;
        }
        ab[k].buf = abuf[k].buf;
        ab[k].esz = sz;
        ab[k].n = abuf[k].len / sz;
    }
    for (Py_ssize_t k = 0; k < na; k++)
        for (Py_ssize_t j = 0; j < na; j++)
            if (j != k && lc->stored[k] && buffers_overlap(&abuf[k], &abuf[j])) {
                PyErr_SetString(PyExc_ValueError,
                                "_chains.run_loop: a written array overlaps another array");
                return -1;
            }
    return 0;
}

#define FEW_ARRAYS 8

static PyObject *run_loop(PyObject *module, PyObject *args)
{
    PyObject *code_obj, *state_obj, *arrays_obj;
    Py_ssize_t max_steps;
    if (!PyArg_ParseTuple(args, "OOOn:run_loop", &code_obj, &state_obj, &arrays_obj, &max_steps))
        return NULL;
    ModState *ms = PyModule_GetState(module);
    PyObject *owned = NULL;   /* a LoopCode decoded here from program bytes */
    if (!PyObject_TypeCheck(code_obj, (PyTypeObject *)ms->loopcode_type)) {
        owned = PyObject_CallOneArg(ms->loopcode_type, code_obj);
        if (!owned) return NULL;
        code_obj = owned;
    }
    const LoopCode *lc = (const LoopCode *)code_obj;
    PyObject *res = NULL, *arrays = NULL;
    Py_buffer state, few[FEW_ARRAYS], *abuf = few;
    ArrBuf fewab[FEW_ARRAYS], *ab = fewab;
    Py_ssize_t n_got = 0;
    int got_state = 0;
    if (max_steps < 0) {
        PyErr_SetString(PyExc_ValueError, "_chains.run_loop: max_steps < 0");
        goto done;
    }
    if (get_state(lc, state_obj, &state, "_chains.run_loop") < 0) goto done;
    got_state = 1;
    if (lc->n_arrays) {
        arrays = PySequence_Fast(arrays_obj, "_chains.run_loop: arrays must be a sequence");
        if (!arrays) goto done;
    }
    if ((arrays ? PySequence_Fast_GET_SIZE(arrays) : PyObject_Length(arrays_obj))
        != lc->n_arrays) {
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_ValueError, "_chains.run_loop: %zd arrays, the program takes %d",
                         PyObject_Length(arrays_obj), lc->n_arrays);
        goto done;
    }
    if (lc->n_arrays > FEW_ARRAYS) {
        abuf = PyMem_Calloc((size_t)lc->n_arrays, sizeof(Py_buffer));
        ab = PyMem_Calloc((size_t)lc->n_arrays, sizeof(ArrBuf));
        if (!abuf || !ab) { PyErr_NoMemory(); goto done; }
    }
    if (arrays && get_arrays(lc, arrays, abuf, ab, &n_got) < 0) goto done;
    int finished = 0;
    int64_t *pause = NULL;
    if (lc->pause_reg >= 0) {   /* its value checked: 0 or one past an OP_MATH */
        pause = (int64_t *)(void *)((char *)state.buf + (Py_ssize_t)lc->pause_reg * 8);
        int64_t at = *pause;
        if (at < 0 || at > (int64_t)lc->n_cond + lc->n_body
            || (at > 0 && lc->code[at - 1].fast != F_MATH)) {
            PyErr_Format(PyExc_ValueError, "_chains.run_loop: the pause register holds %lld, "
                         "not 0 or one past an OP_MATH instruction", (long long)at);
            goto done;
        }
    }
    if (max_steps > 0) {
        Py_BEGIN_ALLOW_THREADS
        finished = pause ? loop_steps_guarded(lc, state.buf, ab, max_steps, pause)
                         : loop_steps(lc, state.buf, ab, max_steps);
        Py_END_ALLOW_THREADS
    }
    /* Ctrl-C between the caller's chunks of steps (its deadline lands in
     * the caller's Python code between them). */
    if (PyErr_CheckSignals() < 0) goto done;
    res = PyBool_FromLong(finished);
done:
    for (Py_ssize_t k = 0; k < n_got; k++) PyBuffer_Release(&abuf[k]);
    if (abuf != few) PyMem_Free(abuf);
    if (ab != fewab) PyMem_Free(ab);
    Py_XDECREF(arrays);
    if (got_state) PyBuffer_Release(&state);
    Py_XDECREF(owned);
    return res;
}

static PyMethodDef methods[] = {
    {"run", run, METH_VARARGS,
     "run(program, n, inputs, outputs): run a chain program (chainvm.py) over n elements."},
    {"run_loop", run_loop, METH_VARARGS,
     "run_loop(code, state, arrays, max_steps): run a scalar while loop (a LoopCode, or its "
     "program's bytes, decoded for this call) on the registers in state until its cond is "
     "false (True) or for max_steps iterations (False)."},
    {NULL, NULL, 0, NULL},
};

static int module_exec(PyObject *m)
{
    ModState *ms = PyModule_GetState(m);
    ms->loopcode_type = PyType_FromModuleAndSpec(m, &loopcode_spec, NULL);
    if (!ms->loopcode_type) return -1;
    return PyModule_AddObjectRef(m, "LoopCode", ms->loopcode_type);
}

static int module_traverse(PyObject *m, visitproc visit, void *arg)
{
    ModState *ms = PyModule_GetState(m);
    Py_VISIT(ms->loopcode_type);
    return 0;
}

static int module_clear(PyObject *m)
{
    ModState *ms = PyModule_GetState(m);
    Py_CLEAR(ms->loopcode_type);
    return 0;
}

static void module_free(void *m) { module_clear((PyObject *)m); }

static struct PyModuleDef_Slot slots[] = {
    {Py_mod_exec, module_exec},
#ifdef Py_mod_multiple_interpreters
    {Py_mod_multiple_interpreters, Py_MOD_PER_INTERPRETER_GIL_SUPPORTED},
#endif
    {0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_chains",
    "A block machine for fused chains of exact elementwise ops (see the C source's header "
    "comment).", sizeof(ModState), methods, slots, module_traverse, module_clear, module_free,
};

PyMODINIT_FUNC PyInit__chains(void) { return PyModuleDef_Init(&module); }
