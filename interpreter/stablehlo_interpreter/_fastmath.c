/* stablehlo_interpreter._fastmath: float32 erf, erfc, erf_inv, tanh,
 * logistic, exp, expm1, log, log1p, sin and cos, correctly rounded (the bits of the
 * float64 detour) at vector speed.
 *
 * Why hand-written C: erf/erfc/erf_inv have no vectorized float64 loop in
 * numpy (erf/erfc are scipy's scalar loops, 8-15 ns per element, erf_inv
 * scipy's ndtri, 20 ns), numpy's float64 sin and cos are libm's scalar
 * loops (11-12 ns per element here), and numpy's float64 exp, log, tanh
 * (expm1, log1p: never)
 * are SIMD loops only on some hosts (AVX512F) and still cost a float64
 * conversion each way; a numpy-level polynomial costs one memory pass per
 * operation (~30 passes: as slow as scipy, measured in docs/accuracy.md).
 * Here each element is one branch-free float64 evaluation in registers,
 * which the compiler vectorizes (4 or 8 lanes with FMA, picked at load time
 * by target_clones), rounded once to float32.
 *
 * Exactness. Each kernel evaluates its function in float64 to within about
 * 5e-13 (relative; benchmarks/fastmath_fit.py fits the polynomials and
 * prints their errors), i.e. a few thousand float64 ULPs, while rounding to
 * float32 drops 29 bits. An element whose float64 value lies within GUARD
 * ULPs (2^15, eight times the error bound) of a halfway point between two
 * float32 numbers, whose float32 result would be subnormal, whose input is
 * NaN (a NaN propagates through the kernel) or outside the kernel's domain
 * (|x| >= 1 for erf_inv, |x| >= TRIG_MAX and +-inf for sin and cos, x <= 0
 * and +inf for log, x <= -1 and +inf for log1p: they give NaN) is
 * "flagged": its index is written to the index buffer and
 * the caller recomputes it with the exact path (scipy / numpy in float64,
 * rounded once). +-inf inputs of erf, erfc, tanh, logistic, exp and expm1
 * meet the clamps every large |x| meets, whose results round to the
 * functions' limits (+-1; 0 and 2; +-1; 1 and 0; +inf and 0; +inf and -1)
 * as the exact path's do. Every other element rounds to the same float32 as that
 * path, whose float64 value is within a few ULPs of the true one. About 1
 * element in 8000 is flagged. fma() keeps the float64 bits the same on
 * every host (but erf's, exp's and logistic's, whose AVX-512 loops
 * compute other approximations, as close): the FMA clones inline it, the default clone (x86 CPUs
 * without FMA, other architectures) calls libm's, exact and slower;
 * -ffp-contract=off (pyproject.toml) forbids other contractions.
 *
 * Speed. On AVX-512 cores the loops are bound by the two ports that run
 * 512-bit arithmetic (about 30-60 operations per 8 elements: the float32
 * <-> float64 conversions, the reduction, the polynomials, the selects,
 * the rounding pass's test), not by the divider: with the division removed
 * outright (timing only) tanh, logistic and log run 11-30% faster, with a
 * float32 reciprocal and one Newton step in its place (relative error
 * 2^-46, within GUARD) 13-25% slower, since vdivpd is one operation there
 * and the reciprocal seven (two conversions of two operations each,
 * vdivps, a product and two fmas); so the divisions stay. What the loops
 * save is operations: the rounding pass tests a block by three min/max
 * reductions on 32-bit lanes (DEFINE_LOOP), NaN flows through the clamps
 * (no test of the input), log splits y with integer arithmetic alone, and
 * erf's Q is fitted for erf's error (degree 10, not 12). Every select
 * whose arm is a constant or is computed for that arm only is bitwise
 * (select_bits, nan_where): written `c ? a : b`, gcc moves the arm's
 * computation under a branch, which the AVX-512 clone if-converts with
 * masked operations and the AVX2 clone (no masked division or fma) cannot:
 * it left the loop scalar, 3-6x slower.
 *
 * erf, exp and logistic on AVX-512 (erf_lut_loop, exp_lut_loop,
 * logistic_lut_loop, chosen at run time): erf_d computes both of its
 * formulas, exp and a division for every element (1.3 ns an element); one
 * polynomial per element whose coefficients each lane picks from an
 * in-register table of 16 pieces (vpermt2pd) takes 0.8 ns. exp reduces by
 * ln2 / 16 with 2^(j/16) from a table the same way and scales by
 * vscalefpd: a polynomial of degree 5, not 9, and no clamp selects (exp
 * 0.52 ns against exp_d's 0.58, logistic 0.69 against 0.75). gcc turns a
 * table lookup into scalar loads (no gathers, no permutes), so these loops
 * are written with intrinsics, for x86-64-v4 only; other CPUs keep the
 * portable kernels.
 * Their float64 values differ from the portable kernels' (as close to the
 * function), their float32 results do not.
 *
 * API (each of erf_f32, erfc_f32, erf_inv_f32, tanh_f32, logistic_f32,
 * exp_f32, expm1_f32, log_f32, log1p_f32, sin_f32, cos_f32):
 *     n = f(x, out, idx)
 * x: a C-contiguous buffer of float32; out: a writable C-contiguous float32
 * buffer of the same length (it may be x itself, not a partial overlap);
 * idx: a writable C-contiguous int64 buffer at least as long. Writes out,
 * and the indices of the flagged elements to idx[:n]; returns n. The GIL is
 * released while computing. No state is kept between calls.
 *     n = f(x, out, idx, claim, chunk)
 * shares the work among the threads that make the same call at once
 * (ops/fastmath.py: one call per pool thread, not one per chunk): claim is
 * a writable int64 buffer of 1 + ceil(len(x) / chunk) entries, zeros; each
 * call takes chunks of `chunk` elements by an atomic increment of claim[0]
 * until none is left, and writes chunk c's flagged indices to idx[c * chunk:]
 * and their number to claim[1 + c]; it returns the number it flagged.
 *     LOOPS, _loops
 * LOOPS: the entries' names, in the order of the capsule _loops's table of
 * their C loops (_buffers.h's FastmathLoops), which _chains.c's block
 * machine calls for a transcendental inside a fused chain (chainvm.py).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "_buffers.h"
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

/* target_clones needs glibc's ifunc (musl's GCC refuses it). */
/* -DFM_CLONES=... builds one target only (tests/test_fastmath.py checks
 * each clone's bits so). */
#ifndef FM_CLONES
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__) \
    && defined(__GLIBC__)
#define FM_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define FM_CLONES
#endif
#endif

/* FM_LUT: the AVX-512 loops of erf, exp and logistic (erf_lut_loop, ...),
 * picked at run time on CPUs with x86-64-v4; -DFM_LUT=0 leaves the
 * portable loops on every CPU (tests/test_fastmath.py sweeps both). */
#ifndef FM_LUT
/* (gcc 12 names the x86-64 levels in __builtin_cpu_supports) */
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12 && defined(__x86_64__)
#define FM_LUT 1
#else
#define FM_LUT 0
#endif
#endif
#if FM_LUT
#include <immintrin.h>
#endif

#define BLOCK 1024
/* Distance (float64 ULPs) from a float32 halfway point that is flagged. */
#define GUARD F32_TIE_GUARD

/* ERF_P: in v, v in [0, 0.25]; max relative error 9.50e-14 */
static const double ERF_P[7] = {
    0x1.c5f6e9f4f7308p-14,
    -0x1.be0072e6ed6cbp-11,
    0x1.56500b7f92ee3p-8,
    -0x1.b82ca1a0e44fap-6,
    0x1.ce2f20f26e33ep-4,
    -0x1.812746af8a456p-2,
    0x1.20dd7504299a9p+0};
/* EXP_P: in v, v in [-0.35, 0.35]; max relative error 2.18e-14 */
static const double EXP_P[10] = {
    0x1.7301f4aedc976p-19,
    0x1.a1854ce218853p-16,
    0x1.a01971ab53994p-13,
    0x1.6c16257472868p-10,
    0x1.11111130459a6p-7,
    0x1.5555558bfd845p-5,
    0x1.555555554a39ap-3,
    0x1.ffffffffe52b4p-2,
    0x1.0000000000024p+0,
    0x1.0000000000048p+0};
/* EXPM1_P: in v, v in [-0.35, 0.35]; max relative error 1.01e-13 */
static const double EXPM1_P[9] = {
    0x1.72e7f88f0004bp-19,
    0x1.a160b8c394296p-16,
    0x1.a0198edbf90bep-13,
    0x1.6c16494913d0ap-10,
    0x1.11111125480b8p-7,
    0x1.555555760c9acp-5,
    0x1.5555555550608p-3,
    0x1.fffffffff660fp-2,
    0x1.000000000000ap+0};
/* LOG_P: in v, v in [0, 0.0294373]; max relative error 2.71e-14 */
static const double LOG_P[6] = {
    0x1.9198785182f8bp-3,
    0x1.c620882ac9dd0p-3,
    0x1.249439667694ap-2,
    0x1.99999628af1efp-2,
    0x1.5555555672ceep-1,
    0x1.fffffffffff14p+0};
/* ERFC_Q: in u = v * ERFC_Q_SCALE + ERFC_Q_OFFSET, v in [0.16, 0.8]; max relative error 3.36e-13 */
#define ERFC_Q_SCALE 0x1.9000000000000p+1
#define ERFC_Q_OFFSET -0x1.8000000000000p+0
static const double ERFC_Q[15] = {
    0x1.97edcd4ea184dp-28,
    -0x1.b8397f216d822p-27,
    -0x1.decd033dfac34p-25,
    0x1.0f3fdd9b381c9p-22,
    0x1.521d3a2c252b2p-23,
    -0x1.b9fc75e0c8e92p-19,
    0x1.98385889571b5p-19,
    0x1.615f2306cf49cp-15,
    -0x1.42966ccd2b6cfp-14,
    -0x1.7ca18f24dd08bp-11,
    0x1.c177e8cdeed76p-11,
    0x1.502b5bdb0fd0cp-6,
    0x1.859a2dcfc4484p-4,
    0x1.0b89d670a7c7bp-2,
    0x1.e8d639851d891p-3};
/* ERF_Q: in u = v * ERF_Q_SCALE + ERF_Q_OFFSET, v in [0.333333, 0.8]; max error weighted by _erf_weight 1.68e-14 */
#define ERF_Q_SCALE 0x1.1249249249248p+2
#define ERF_Q_OFFSET -0x1.36db6db6db6dap+1
static const double ERF_Q[11] = {
    0x1.8180c56c8453ap-26,
    -0x1.f8c4325161d03p-24,
    -0x1.48fd4f190d7bap-22,
    0x1.2bb85b20dc61ep-18,
    0x1.462ee5bc7e80bp-21,
    -0x1.5344ec8d2c5b5p-13,
    -0x1.ac43592c8a748p-15,
    0x1.09677b59b143fp-7,
    0x1.e7e558e05219bp-5,
    0x1.d9ea03c9f7a7fp-3,
    0x1.44712fe2caaefp-2};
/* ERFINV_W: in u = v * ERFINV_W_SCALE + ERFINV_W_OFFSET, v in [0, 6.25]; max relative error 2.07e-14 */
#define ERFINV_W_SCALE 0x1.47ae147ae147bp-2
#define ERFINV_W_OFFSET -0x1.0000000000000p+0
static const double ERFINV_W[19] = {
    -0x1.05e10b1104d2cp-24,
    0x1.6ba6b2bf258f4p-24,
    0x1.e5e4107ed274cp-22,
    -0x1.40decbf80611cp-20,
    -0x1.368f3fd6e4834p-21,
    0x1.e6a82c563d7a7p-18,
    -0x1.7c4748c7831c6p-17,
    -0x1.fa90e4d204ae6p-17,
    0x1.87c097c37cecap-14,
    -0x1.ea29f66d15dc0p-14,
    -0x1.153f10d9109ccp-12,
    0x1.431659f49111cp-10,
    -0x1.4d5dbacbb8338p-10,
    -0x1.0f249b42a0de0p-8,
    0x1.23c5aec8a16f3p-6,
    -0x1.7259ecacf6fe8p-6,
    -0x1.e2b194562bed8p-5,
    0x1.8040caa128babp-1,
    0x1.a755e7c99ae3ep+0};
/* ERFINV_V: in u = v * ERFINV_V_SCALE + ERFINV_V_OFFSET, v in [2.5, 4.1]; max relative error 1.57e-13 */
#define ERFINV_V_SCALE 0x1.4000000000001p+0
#define ERFINV_V_OFFSET -0x1.0800000000000p+2
static const double ERFINV_V[15] = {
    0x1.6401f15ba75a0p-25,
    -0x1.69bdac624c3b3p-23,
    0x1.5a4d825cee3d6p-24,
    0x1.37412d4973fa6p-20,
    -0x1.230a51491f39dp-18,
    0x1.a2449d216ae5ap-18,
    0x1.184446597cb9fp-17,
    -0x1.2b0b9d12fbc38p-14,
    0x1.c90a4cf7b4f0ep-13,
    -0x1.e826c8d37aa69p-12,
    0x1.c3bdaab733a84p-11,
    -0x1.b9f47837f71bep-10,
    0x1.964f1f5bc9202p-9,
    0x1.9bf6893afbe46p-1,
    0x1.912c3480d992cp+1};

/* SIN_P, COS_P: fdlibm's k_sin.c / k_cos.c kernels: sin(r) = r + r^3
 * SIN_P(r^2), cos(r) = 1 - r^2/2 + r^4 COS_P(r^2) for |r| <= pi/4 + 1e-3;
 * relative error below 5e-18 (mpmath). */
static const double SIN_P[6] = {
    0x1.5d93a5acfd57cp-33,
    -0x1.ae5e68a2b9cebp-26,
    0x1.71de357b1fe7dp-19,
    -0x1.a01a019c161d5p-13,
    0x1.111111110f8a6p-7,
    -0x1.5555555555549p-3};
static const double COS_P[6] = {
    -0x1.8fae9be8838d4p-37,
    0x1.1ee9ebdb4b1c4p-29,
    -0x1.27e4f809c52adp-22,
    0x1.a01a019cb1590p-16,
    -0x1.6c16c16c15177p-10,
    0x1.555555555554cp-5};

/* ERF_T: erf(a) / a for a in [0, 4]; piece j = round(a * 3.75), a polynomial in u = a - j / 3.75; row k: the 16 pieces' coefficients of u^(8 - k); max relative error 9.06e-14 */
static const double ERF_T[9][16] = {
    {0x1.53df19fa4921bp-8, 0x1.699702d4ffda3p-9, -0x1.d130fb5859c00p-10, -0x1.ef06aa1824815p-9, -0x1.21f9807e0c599p-9, 0x1.2ee661995cfd1p-12, 0x1.65e2646683060p-10, 0x1.0054a0e555470p-10, 0x1.ff944bdf4e828p-13, -0x1.2ce41f2e85633p-13, -0x1.821b7453caeabp-13, -0x1.b25987a700929p-14, -0x1.31337cf0da519p-15, -0x1.aaafca6e77d06p-18, 0x1.0d5bdb0d83884p-19, 0x1.73609b68372d8p-19},
    {0x1.aee49bfe13f65p-30, 0x1.2f201cb53ecbap-7, 0x1.4eb5e6cc63fe0p-7, 0x1.d6fe65f21ff55p-9, -0x1.aa18bfabf9cfbp-9, -0x1.542ef3651be26p-8, -0x1.96a0e014d4027p-9, -0x1.ccc6afed7281fp-12, 0x1.b6c1667b2b3ebp-11, 0x1.c6b099b886cd0p-11, 0x1.f424fbb918560p-12, 0x1.5a8d319928f23p-13, 0x1.7eb0010ece09ap-16, -0x1.2251712fdc76cp-16, -0x1.49e91c204d02fp-16, -0x1.d5b5c98f14a5ep-17},
    {-0x1.b82a683881c8bp-6, -0x1.1bfcdedf5b5a9p-6, 0x1.48c9cb0a99e4fp-9, 0x1.083e24014ec89p-6, 0x1.03e6af0a18c38p-6, 0x1.ced86a33e40bbp-8, -0x1.17ea1510e41a4p-10, -0x1.14f290f4e6abap-8, -0x1.d5ddb4c5ba722p-9, -0x1.e601f19fb1279p-10, -0x1.33385229f05cbp-11, -0x1.14fba1b5a5550p-16, 0x1.1a2a80f83d7ecp-13, 0x1.0e4afcf1803a9p-13, 0x1.7f742e2bcfec5p-14, 0x1.f544286cc530ap-15},
    {-0x1.6f5c973959e4ap-35, -0x1.34fe628fc8bb3p-5, -0x1.980fe3ca43470p-5, -0x1.10002f488f532p-5, -0x1.80e623665fd96p-8, 0x1.a813d16502cbfp-7, 0x1.19b3d00676ae6p-6, 0x1.9285840c11669p-7, 0x1.76daadbd2ef5ap-8, 0x1.6654ff97c2b76p-10, -0x1.fc70c10a57e30p-12, -0x1.d20f42ff9fc27p-11, -0x1.8e3ad9417b8c2p-11, -0x1.1ab7191b2e3ebp-11, -0x1.7c2eae044cccfp-12, -0x1.fdc70d95ca5a7p-13},
    {0x1.ce2f209db860dp-4, 0x1.601eb1b37767dp-4, 0x1.89ae99754ce14p-6, -0x1.14921197916f5p-5, -0x1.e96dd3ffeb233p-5, -0x1.b5c082a9cd8c3p-5, -0x1.0539914c9b329p-5, -0x1.7eb869b3b4a73p-7, 0x1.a2e01b80b2f29p-13, 0x1.2e3e5893832fdp-8, 0x1.45fb2fd735123p-8, 0x1.0363dc99ea62cp-8, 0x1.7351b8bc1f5aap-9, 0x1.0201ca4869327p-9, 0x1.682ed2969511dp-10, 0x1.ffa17bced3e43p-11},
    {0x1.5b24b4a2e86ebp-42, 0x1.c4d664e4b6da7p-4, 0x1.5d826937371e0p-3, 0x1.4ec38d1645c03p-3, 0x1.c3d2e51d4b99bp-4, 0x1.86cac8b31e91dp-5, 0x1.bf79f6a6dc34dp-10, -0x1.56ef04a5df4cbp-6, -0x1.ae60e6a1ef9d3p-6, -0x1.7be1b77771128p-6, -0x1.248fd71f5af02p-6, -0x1.ab84257bf108ap-7, -0x1.355d9f2e8e979p-7, -0x1.c4a316cf3b928p-8, -0x1.512efee3d78dap-8, -0x1.fff3dbedd2e39p-9},
    {-0x1.812746b012bc7p-2, -0x1.51e33e90ed39ap-2, -0x1.b447521fefb62p-3, -0x1.3429c096bd22fp-4, 0x1.27e203ecb9751p-5, 0x1.94e5f62fb6daap-4, 0x1.df7dddc834289p-4, 0x1.ba13a3249c377p-4, 0x1.694af0f630c11p-4, 0x1.16fff90bdbe97p-4, 0x1.a7538ebb5fa14p-5, 0x1.42aa7bbb77d5bp-5, 0x1.f345b3c72433ap-6, 0x1.89246d7580ba9p-6, 0x1.3ad9ea3d8b3a1p-6, 0x1.fffeddbf32333p-7},
    {-0x1.389190c614d1dp-51, -0x1.89bd17ac1afeep-3, -0x1.5b578a38f9abdp-2, -0x1.a9c79cda21a0bp-2, -0x1.b28084277c416p-2, -0x1.8b59aeca482a1p-2, -0x1.4eb6772a385a7p-2, -0x1.10747dd1663e1p-2, -0x1.b56ac0d3ff10fp-3, -0x1.6046cf10d6923p-3, -0x1.1f3eff7c388b4p-3, -0x1.dbba73448f350p-4, -0x1.8ff22da0ac32cp-4, -0x1.54d1edaae593bp-4, -0x1.25e05ce575dfep-4, -0x1.ffffee707c86dp-5},
    {0x1.20dd750429b60p+0, 0x1.1a2959ed6f837p+0, 0x1.07a9e35a9a466p+0, 0x1.daf1d2725fa77p-1, 0x1.a0ea1fead3df7p-1, 0x1.693601f761c77p-1, 0x1.386e75a5f5ab0p-1, 0x1.1002c4df351d8p-1, 0x1.dec649d64c23dp-2, 0x1.aa5f766c37ec7p-2, 0x1.7ff0080ad2d66p-2, 0x1.5d1447b61c390p-2, 0x1.3fff81a170ef3p-2, 0x1.276263d898f9bp-2, 0x1.1249223ef068dp-2, 0x1.ffffff7b91178p-3}};
#define ERF_T_STEP 3.75
/* EXP_T: 2^(j / 16), j = 0..15, rounded */
static const double EXP_T[16] = {
    0x1.0000000000000p+0, 0x1.0b5586cf9890fp+0, 0x1.172b83c7d517bp+0, 0x1.2387a6e756238p+0,
    0x1.306fe0a31b715p+0, 0x1.3dea64c123422p+0, 0x1.4bfdad5362a27p+0, 0x1.5ab07dd485429p+0,
    0x1.6a09e667f3bcdp+0, 0x1.7a11473eb0187p+0, 0x1.8ace5422aa0dbp+0, 0x1.9c49182a3f090p+0,
    0x1.ae89f995ad3adp+0, 0x1.c199bdd85529cp+0, 0x1.d5818dcfba487p+0, 0x1.ea4afa2a490dap+0};
/* EXP16_P: in v, v in [-0.0218775, 0.0218775]; max relative error 5.11e-15 */
static const double EXP16_P[6] = {
    0x1.1114036fb6377p-7,
    0x1.55576dac1b84fp-5,
    0x1.55555550c92c6p-3,
    0x1.fffffffce9c1ap-2,
    0x1.0000000000032p+0,
    0x1.0000000000017p+0};

#define INV_LN2 0x1.71547652b82fep+0
#define LN2_HI 0x1.62e42fee00000p-1
#define LN2_LO 0x1.a39ef35793c76p-33
#define SHIFTER 0x1.8p52
#define SQRT1_2_BITS 0x3fe6a09e667f3bcdull   /* bits64(sqrt(1/2)), rounded */
/* pi/2 = PIO2_1 + PIO2_2 + PIO2_3 (to 2^-163) and 2/pi, rounded */
#define PIO2_1 0x1.921fb54442d18p+0
#define PIO2_2 0x1.1a62633145c07p-54
#define PIO2_3 -0x1.f1976b7ed8fbcp-110
#define TWO_OVER_PI 0x1.45f306dc9c883p-1
/* |x| from which sin and cos are flagged (the exact path reduces them) */
#define TRIG_MAX 0x1p20

static inline uint64_t bits64(double d) { uint64_t u; memcpy(&u, &d, 8); return u; }
static inline double from_bits64(uint64_t u) { double d; memcpy(&d, &u, 8); return d; }

/* y where mask is 0, a NaN where it is all ones. A bitwise select, not
 * `ok ? y : NAN`: gcc sinks the computation of y under that condition and
 * then may leave the loop scalar ("control flow in loop"). */
static inline double nan_where(uint64_t mask, double y)
{
    return from_bits64(bits64(y) | (mask & 0x7ff8000000000000ull));
}

/* cond ? a : b as a bitwise select. Where b (or a) is a constant, gcc
 * otherwise splits the loop body into a branch computing the rest of the
 * function from that constant (folded) and one from a, and the AVX2 clone,
 * which has no masked division or fma, does not vectorize it (scalar: 3-6x
 * slower). */
static inline double select_mask(uint64_t m, double a, double b)
{
    return from_bits64((bits64(a) & m) | (bits64(b) & ~m));
}

static inline double select_bits(int cond, double a, double b)
{
    return select_mask(-(uint64_t)cond, a, b);
}

/* min/max without fmin's NaN rules (which keep it a libm call); a NaN v
 * stays NaN, so that a NaN input gives a NaN result, which the loop flags:
 * no separate test of the input for NaN. */
static inline double lo_clamp(double v, double lo) { return select_bits(v < lo, lo, v); }
static inline double hi_clamp(double v, double hi) { return select_bits(v > hi, hi, v); }

#define HORNER(P, v, out) do { \
    double acc_ = (P)[0]; \
    _Pragma("GCC unroll 32") \
    for (size_t k_ = 1; k_ < sizeof(P) / sizeof((P)[0]); k_++) acc_ = fma(acc_, (v), (P)[k_]); \
    (out) = acc_; } while (0)

/* y = k ln2 + r, |r| <= ln2 / 2 (r = y when k = 0), for |y| <= 700: r,
 * and 2^k in *scale. */
static inline double ln2_reduce(double y, double *scale)
{
    double kd = fma(y, INV_LN2, SHIFTER);
    uint64_t ki = bits64(kd);
    kd -= SHIFTER;
    double r = fma(-kd, LN2_HI, y);
    *scale = from_bits64((ki << 52) + bits64(1.0));
    return fma(-kd, LN2_LO, r);
}

/* e^y for |y| <= 700: 2^k e^r, e^r by EXP_P. */
static inline double exp_core(double y)
{
    double scale, p, r = ln2_reduce(y, &scale);
    HORNER(EXP_P, r, p);
    return p * scale;
}

/* e^y - 1 for |y| <= 700, relatively accurate near 0: 2^k expm1(r) + (2^k
 * - 1), one rounding; expm1(r) = r EXPM1_P(r). (y = -0 gives +0.) */
static inline double expm1_core(double y)
{
    double scale, p, r = ln2_reduce(y, &scale);
    HORNER(EXPM1_P, r, p);
    return fma(scale, r * p, scale - 1.0);
}

/* log(y) for normal positive y: y = 2^e m, m in [sqrt(1/2), sqrt(2)),
 * log(m) = s LOG_P(s^2), s = (m - 1) / (m + 1) (m - 1 is exact). */
static inline double log_core(double y)
{
    /* From sqrt(1/2) 2^e to sqrt(2) 2^e the bits of y run over 2^52
     * patterns from bits64(sqrt(1/2)) + e 2^52: t's top 12 bits are e +
     * 1024 (the offset 2^62 keeps t positive), its low 52 bits m's bits
     * above those of sqrt(1/2). e as a double without an int64 conversion
     * (none in AVX2): 2^52 + (e + 1024) is exact in the low bits of
     * 0x433... No compare and no selects: 6 operations where splitting y at
     * its own exponent and moving m > sqrt(2) down took 8. */
    uint64_t t = bits64(y) + ((1ull << 62) - SQRT1_2_BITS);
    double e = from_bits64(0x4330000000000000ull | (t >> 52)) - (0x1p52 + 1024.0);
    double m = from_bits64((t & 0x000fffffffffffffull) + SQRT1_2_BITS);
    double s = (m - 1.0) / (m + 1.0), p;
    HORNER(LOG_P, s * s, p);
    return fma(e, LN2_HI, fma(s, p, e * LN2_LO));
}

/* exp(-a^2) Q(t) = erfc(a), t = 2 / (2 + a), for 0.5 <= a <= 10.5 (a^2 is
 * exact: a is a float32) */
#define ERFC_BIG(a, Q, SCALE, OFFSET, out) do { \
    double q_; \
    HORNER(Q, fma(2.0 / (2.0 + (a)), SCALE, OFFSET), q_); \
    (out) = exp_core(-((a) * (a))) * q_; } while (0)

static inline double erf_d(float xf)
{
    double x = xf, a = fabs(x), p;
    HORNER(ERF_P, x * x, p);
    double small = x * p;
    double c = hi_clamp(a, 4.0), e;
    ERFC_BIG(c, ERF_Q, ERF_Q_SCALE, ERF_Q_OFFSET, e);
    double big = copysign(1.0 - e, x);
    return select_bits(a >= 0.5, big, small);   /* NaN: small, NaN */
}

static inline double erfc_d(float xf)
{
    double x = xf, a = fabs(x), p;
    HORNER(ERF_P, x * x, p);
    double small = 1.0 - x * p;
    double c = hi_clamp(lo_clamp(a, 0.5), 10.5), e;
    ERFC_BIG(c, ERFC_Q, ERFC_Q_SCALE, ERFC_Q_OFFSET, e);
    /* beyond 10.5 erfc is below 2^-160: +0 in float32, as is e at the
     * clamp (2^-164) */
    double big = select_bits(x > 0, e, 2.0 - e);
    return select_bits(a >= 0.5, big, small);   /* NaN: small, NaN */
}

static inline double tanh_d(float xf)
{
    double x = xf;
    /* tanh(a) = m / (m + 2), m = e^(2a) - 1 (relatively accurate for every
     * a: one formula, no small-argument series); tanh(10) rounds to 1 in
     * float32. copysign keeps tanh(-0) = -0. */
    double m = expm1_core(2.0 * hi_clamp(fabs(x), 10.0));
    return copysign(m / (m + 2.0), x);
}

static inline double logistic_d(float xf)
{
    double x = xf;
    /* |x| > 120: the result rounds to 1 or to +0, as at the clamp */
    double c = fabs(x) > 120.0 ? copysign(120.0, x) : x;
    return 1.0 / (1.0 + exp_core(-c));
}


/* erf_inv(x) = x P(w), w = -log(1 - x^2) (1 - x and 1 + x are exact);
 * |x| >= 1 and NaN give NaN (flagged: the exact path gives +-inf or NaN). */
static inline double erfinv_d(float xf)
{
    double x = xf;
    double y = (1.0 - x) * (1.0 + x);
    int inside = fabs(x) < 1.0;
    double w = -log_core(select_bits(inside, y, 0.5)), pw, pv;
    HORNER(ERFINV_W, fma(w, ERFINV_W_SCALE, ERFINV_W_OFFSET), pw);
    double v = sqrt(w);
    HORNER(ERFINV_V, fma(v, ERFINV_V_SCALE, ERFINV_V_OFFSET), pv);
    double r = x * select_bits(w < 6.25, pw, pv);
    return nan_where(-(uint64_t)!inside, r);
}

/* exp(x): beyond |x| = 110 the float32 result is +inf or rounds to +0
 * (e^-110 is below 2^-151), as at the clamp (written as logistic's: two
 * nested clamps do not if-convert). */
static inline double exp_d(float xf)
{
    double x = xf;
    return exp_core(fabs(x) > 110.0 ? copysign(110.0, x) : x);
}

/* e^x - 1: beyond |x| = 110 the float32 result is +inf or -1, as at the
 * clamp. */
static inline double expm1_d(float xf)
{
    double x = xf;
    double y = expm1_core(fabs(x) > 110.0 ? copysign(110.0, x) : x);
    return copysign(y, x);   /* expm1(x) has the sign of x: keeps -0 */
}

/* log(1 + x) for finite x > -1: u = 1 + x rounded, log(u) + c / u with c
 * = x - (u - 1) (exact) the rounding error; x <= -1 and
 * non-finite x give NaN (flagged). */
static inline double log1p_d(float xf)
{
    double x = xf, u = 1.0 + x;
    uint64_t inside = (x > -1.0) & (x <= FLT_MAX), mask = -inside;
    double y = log_core(from_bits64((bits64(u) & mask) | (bits64(1.0) & ~mask)));
    y += (x - (u - 1.0)) / u;
    y = copysign(y, x);   /* log1p(x) has the sign of x: keeps -0 (a select does not vectorize) */
    return nan_where(~mask, y);
}

/* log(x) for finite x > 0 (float32 subnormals are normal doubles); 0,
 * negative and non-finite inputs give NaN (flagged). */
static inline double log_d(float xf)
{
    double x = xf;
    /* a bitwise select: gcc does not vectorize `inside ? x : 1.0` here
     * (measured: 5x slower) */
    uint64_t inside = (x > 0.0) & (x <= FLT_MAX), mask = -inside;
    double y = log_core(from_bits64((bits64(x) & mask) | (bits64(1.0) & ~mask)));
    return nan_where(~mask, y);
}

/* sin and cos: x = k pi/2 + r, |r| <= pi/4 (+ 2^-30). For |x| < TRIG_MAX,
 * k < 2^20 is exact, x - k PIO2_1 is exact (both are multiples of 2^-52
 * and the difference is below 1 in magnitude; fma rounds once), and the
 * other two steps err by about 2^-53 |r| + k 2^-163, far below the guard
 * for every float32 x (below 2^20 no float32 number comes closer than
 * 2^-27.8 to a multiple of pi/2, at x = 252.8982; exact integer arithmetic
 * over the nearest float32 of each multiple).
 * The quadrant k mod 4 is the low bits of k + 1.5 2^52. */
#define TRIG_REDUCE(xf, r, q) \
    double x_ = (xf); \
    int ok_ = fabs(x_) < TRIG_MAX; \
    x_ = select_bits(ok_, x_, 0.0); \
    double kd_ = fma(x_, TWO_OVER_PI, SHIFTER); \
    uint64_t q = bits64(kd_) & 3; \
    kd_ -= SHIFTER; \
    double r = fma(-kd_, PIO2_1, x_); \
    r = fma(-kd_, PIO2_2, r); \
    r = fma(-kd_, PIO2_3, r)

static inline double sin_r(double r, double z)
{
    double p;
    HORNER(SIN_P, z, p);
    return fma(r * z, p, r);
}

static inline double cos_r(double z)
{
    double p;
    HORNER(COS_P, z, p);
    return fma(z * z, p, fma(-0.5, z, 1.0));
}

static inline double negate_if(double v, uint64_t neg)
{
    return from_bits64(bits64(v) ^ (neg << 63));
}

static inline double sin_d(float xf)
{
    TRIG_REDUCE(xf, r, q);
    double z = r * r, s = sin_r(r, z), c = cos_r(z);
    /* sin(x): s, c, -s, -c for k = 0, 1, 2, 3 (mod 4) */
    double y = negate_if(select_mask(-(q & 1), c, s), q >> 1);
    /* sin(-0) = -0: the reduction's last step turns x = -0 into r = +0 */
    y = select_bits(x_ == 0.0, x_, y);
    return nan_where(-(uint64_t)!ok_, y);
}

static inline double cos_d(float xf)
{
    TRIG_REDUCE(xf, r, q);
    double z = r * r, s = sin_r(r, z), c = cos_r(z);
    /* cos(x): c, -s, -c, s for k = 0, 1, 2, 3 (mod 4) */
    double y = negate_if(select_mask(-(q & 1), s, c), ((q + 1) >> 1) & 1);
    return nan_where(-(uint64_t)!ok_, y);
}

/* Top bit set when float64 y may round to float32 differently from the
 * exact path's float64 value: normal float32 results whose 29 dropped bits
 * lie within GUARD of the halfway pattern 2^28; every subnormal one (below
 * 2^-126, at least 2^-151: smaller ones round to +-0 whatever the error);
 * NaN (a NaN input, or one outside the kernel's domain). Integer
 * subtractions whose sign bit is the answer: the per-element test of the
 * rescan. */
#define B151 0x3680000000000000ull   /* bits64(0x1p-151) */
#define B126 0x3810000000000000ull   /* bits64(0x1p-126) */
#define INF64 0x7ff0000000000000ull
static inline uint64_t flag_bits(double y)
{
    uint64_t u = bits64(y) & 0x7fffffffffffffffull;
    uint64_t near = (((u - ((1ull << 28) - GUARD)) & ((1ull << 29) - 1)) - 2ull * GUARD);
    uint64_t t = u - B151;
    uint64_t sub = ~t & (t - (B126 - B151));   /* B151 <= u < B126 */
    uint64_t nan = (INF64 - 1) - u;            /* u >= INF64 */
    return near | sub | nan;
}

/* A block is computed into buf, then rounded (two vectorized loops: one
 * does not if-convert); the block with an element to flag is scanned
 * again for its indices. The rounding loop's test is three
 * unsigned min/max reductions over the block, on 32-bit halves of the
 * float64 bits (16 lanes to a 512-bit vector; the thresholds are whole
 * exponents, so the high half suffices for the range tests, and the low
 * half holds the 29 dropped bits): min of the dropped bits' distance past
 * 2^28 - GUARD (below 2 GUARD: a near-tie), min of |y|'s high half minus
 * 2^-151's (below the span to 2^-126: subnormal), max of |y|'s high half
 * (at least +inf's: NaN). Three operations and a reduction each, no
 * compare masks (whose conversion back to vectors queues on one port);
 * 5-12% faster than OR-ing flag_bits over the block. The halves are read
 * as two strided 32-bit loads (memcpy: no aliasing question), which gcc
 * turns into one two-source permute each; from the 64-bit words it
 * shifted each word first (two more operations per 16 elements, 1-2%).
 * About one block in eight (1024 elements, a near-tie every ~8000) is
 * scanned again: flag_bits of every element into a byte array (a
 * vectorized loop), then the bytes eight at a time. The scalar scan it
 * replaces (a test and a branch per element) cost as much as computing
 * the block a second time on such blocks: 5-9% of exp, log, sin and tanh
 * (measured on 65536 float32 elements, process CPU time, interleaved). */
/* Rounds buf[:m] (the float64 values of elements start.. start + m) into
 * os and appends the indices of the elements to flag to idx (nflag). */
#define ROUND_BLOCK(buf, m, os, start, idx, nflag) do { \
    uint32_t near = UINT32_MAX, sub = UINT32_MAX, top = 0; \
    for (Py_ssize_t i = 0; i < (m); i++) { \
        (os)[i] = (float)(buf)[i]; \
        uint32_t lo, hi; \
        memcpy(&lo, (const char *)(buf) + 8 * i, 4); \
        memcpy(&hi, (const char *)(buf) + 8 * i + 4, 4); \
        hi &= 0x7fffffffu; \
        uint32_t a = (lo - ((1u << 28) - GUARD)) & ((1u << 29) - 1); \
        uint32_t t = hi - (uint32_t)(B151 >> 32); \
        near = a < near ? a : near; \
        sub = t < sub ? t : sub; \
        top = hi > top ? hi : top; \
    } \
    if (near < 2 * GUARD || sub < (uint32_t)((B126 - B151) >> 32) || top >= (uint32_t)(INF64 >> 32)) { \
        uint8_t fl[BLOCK]; \
        for (Py_ssize_t i = 0; i < (m); i++) \
            fl[i] = (uint8_t)(flag_bits((buf)[i]) >> 63); \
        for (Py_ssize_t i = (m); i < (((m) + 7) & ~(Py_ssize_t)7); i++) \
            fl[i] = 0; \
        for (Py_ssize_t i = 0; i < (m); i += 8) { \
            uint64_t w; \
            memcpy(&w, fl + i, 8); \
            if (w) \
                for (Py_ssize_t j = i; j < i + 8; j++) \
                    if (fl[j]) (idx)[(nflag)++] = (start) + j; \
        } \
    } } while (0)

/* A kernel's loop over blocks of BLOCK elements: FILL(F, buf, xs, m) puts
 * the float64 values of the block's m inputs xs into buf, then ROUND_BLOCK
 * rounds them and flags the near-ties. ATTRS: the clones it is built for. */
#define DEFINE_BLOCK_LOOP(ATTRS, NAME, FILL, F) \
ATTRS static Py_ssize_t NAME(const float *x, float *out, int64_t *idx, Py_ssize_t n) \
{ \
    double buf[BLOCK]; \
    Py_ssize_t nflag = 0; \
    for (Py_ssize_t start = 0; start < n; start += BLOCK) { \
        Py_ssize_t m = n - start < BLOCK ? n - start : BLOCK; \
        const float *xs = x + start; \
        FILL(F, buf, xs, m); \
        ROUND_BLOCK(buf, m, out + start, start, idx, nflag); \
    } \
    return nflag; \
}

/* One element at a time by FN (each clone vectorizes it). */
#define FILL_EACH(FN, buf, xs, m) \
    for (Py_ssize_t i = 0; i < (m); i++) \
        (buf)[i] = FN((xs)[i])

#define DEFINE_LOOP(NAME, FN) DEFINE_BLOCK_LOOP(FM_CLONES, NAME, FILL_EACH, FN)

DEFINE_LOOP(erf_loop, erf_d)
DEFINE_LOOP(erfc_loop, erfc_d)
DEFINE_LOOP(tanh_loop, tanh_d)
DEFINE_LOOP(logistic_loop, logistic_d)
DEFINE_LOOP(erfinv_loop, erfinv_d)
DEFINE_LOOP(exp_loop, exp_d)
DEFINE_LOOP(log_loop, log_d)
DEFINE_LOOP(sin_loop, sin_d)
DEFINE_LOOP(cos_loop, cos_d)
DEFINE_LOOP(expm1_loop, expm1_d)
DEFINE_LOOP(log1p_loop, log1p_d)

#if FM_LUT
/* erf on 8 lanes of AVX-512: erf(x) = sign(x) c G(c), c = min(|x|, 4),
 * G = erf(c) / c in 16 pieces (ERF_T: piece j =
 * round(c * ERF_T_STEP), a polynomial of degree 8 in u = c - j /
 * ERF_T_STEP, |u| <= 0.134); each coefficient is picked from its row of 16
 * by a two-source permute (vpermt2pd: the low 4 bits of the index are j),
 * so an element costs one polynomial of degree 8 and nine permutes, not
 * erf_d's two polynomials, exp and a division (the compiler makes gathers
 * of a table lookup, scalar ones at that: hence intrinsics). |x| >= 4 gives
 * 4 G(4) = erf(4), within 1.6e-8 of 1, to which it rounds (as erf(3.92)
 * does already), far from a near-tie; the sign is x's (vpternlogq), so -0
 * gives -0 and -inf -1; NaN stays NaN. The float64 values differ from
 * erf_d's but are as close to erf (9.1e-14, fastmath_fit), so the rounding
 * pass gives the same float32 results and flags the elements it must. Three
 * operations fewer than selecting +-1 for |x| >= 4 and multiplying by x. */
#define FM_V4 __attribute__((target("arch=x86-64-v4")))
FM_V4 static inline __m512d erf_lut8(__m512d x)
{
    /* (vminpd returns its second operand when one is NaN: a NaN x stays NaN;
     * vrangepd, one operation, would return 4 for a quiet NaN) */
    __m512d c = _mm512_min_pd(_mm512_set1_pd(4.0), _mm512_abs_pd(x));
    __m512d kd = _mm512_fmadd_pd(c, _mm512_set1_pd(ERF_T_STEP), _mm512_set1_pd(SHIFTER));
    __m512i j = _mm512_castpd_si512(kd);
    kd = _mm512_sub_pd(kd, _mm512_set1_pd(SHIFTER));
    __m512d u = _mm512_fnmadd_pd(kd, _mm512_set1_pd(1.0 / ERF_T_STEP), c);
    __m512d g = _mm512_permutex2var_pd(_mm512_loadu_pd(ERF_T[0]), j, _mm512_loadu_pd(ERF_T[0] + 8));
    _Pragma("GCC unroll 16")
    for (size_t k = 1; k < sizeof(ERF_T) / sizeof(ERF_T[0]); k++)
        g = _mm512_fmadd_pd(g, u, _mm512_permutex2var_pd(_mm512_loadu_pd(ERF_T[k]), j,
                                                           _mm512_loadu_pd(ERF_T[k] + 8)));
    /* (vpternlogq 0xca: the sign bit's mask ? x : c G) */
    return _mm512_castsi512_pd(_mm512_ternarylogic_epi64(
        _mm512_set1_epi64(INT64_MIN), _mm512_castpd_si512(x),
        _mm512_castpd_si512(_mm512_mul_pd(c, g)), 0xca));
}

/* e^x on 8 lanes of AVX-512: x clamped to [-120, 120] (vmaxpd/vminpd
 * return their second operand when one is NaN: x there keeps NaN), K =
 * round(16 x / ln2) = 16 k + j, r = x - K ln2 / 16 (|r| <= ln2 / 32, two
 * steps as ln2_reduce's), e^x = 2^k 2^(j/16) e^r: 2^(j/16) from EXP_T by a
 * permute, e^r by EXP16_P (degree 5), 2^k by vscalefpd (floor of K / 16).
 * 15 operations where exp_d takes 20; within 6e-15. Beyond |x| = 120 the
 * float32 result is +inf or +0 (flagged by neither), as at the clamp. */
FM_V4 static inline __m512d exp_lut8(__m512d x)
{
    x = _mm512_min_pd(_mm512_set1_pd(120.0), _mm512_max_pd(_mm512_set1_pd(-120.0), x));
    __m512d kd = _mm512_fmadd_pd(x, _mm512_set1_pd(16.0 * INV_LN2), _mm512_set1_pd(SHIFTER));
    __m512i j = _mm512_castpd_si512(kd);
    kd = _mm512_sub_pd(kd, _mm512_set1_pd(SHIFTER));
    __m512d r = _mm512_fnmadd_pd(kd, _mm512_set1_pd(LN2_HI / 16), x);
    r = _mm512_fnmadd_pd(kd, _mm512_set1_pd(LN2_LO / 16), r);
    __m512d p = _mm512_set1_pd(EXP16_P[0]);
    _Pragma("GCC unroll 16")
    for (size_t k = 1; k < sizeof(EXP16_P) / sizeof(EXP16_P[0]); k++)
        p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(EXP16_P[k]));
    __m512d t = _mm512_permutex2var_pd(_mm512_loadu_pd(EXP_T), j, _mm512_loadu_pd(EXP_T + 8));
    return _mm512_scalef_pd(_mm512_mul_pd(t, p), _mm512_mul_pd(kd, _mm512_set1_pd(1.0 / 16)));
}

/* 1 / (1 + e^-x): e^-x by exp_lut8 (its clamp: 1 and +0, as logistic_d's) */
FM_V4 static inline __m512d logistic_lut8(__m512d x)
{
    __m512d one = _mm512_set1_pd(1.0);
    return _mm512_div_pd(one, _mm512_add_pd(one, exp_lut8(_mm512_sub_pd(_mm512_setzero_pd(), x))));
}

/* Eight elements at a time by VFN (BLOCK is a multiple of 8: the last
 * group's lanes past m load 0, masked, into buf's spare entries). */
#define FILL_BY_8(VFN, buf, xs, m) \
    for (Py_ssize_t i = 0; i < (m); i += 8) { \
        __mmask8 k = (m) - i >= 8 ? 0xff : (__mmask8)((1u << ((m) - i)) - 1); \
        _mm512_storeu_pd((buf) + i, VFN(_mm512_cvtps_pd(_mm256_maskz_loadu_ps(k, (xs) + i)))); \
    }

#define DEFINE_V4_LOOP(NAME, VFN) DEFINE_BLOCK_LOOP(FM_V4, NAME, FILL_BY_8, VFN)

DEFINE_V4_LOOP(erf_lut_loop, erf_lut8)
DEFINE_V4_LOOP(exp_lut_loop, exp_lut8)
DEFINE_V4_LOOP(logistic_lut_loop, logistic_lut8)

/* The AVX-512 loop where the CPU runs x86-64-v4, else the portable one. */
static int has_v4(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("x86-64-v4");
}

#define DEFINE_ANY_LOOP(NAME, V4, ANY) \
static Py_ssize_t NAME(const float *x, float *out, int64_t *idx, Py_ssize_t n) \
{ \
    return has_v4() ? V4(x, out, idx, n) : ANY(x, out, idx, n); \
}

DEFINE_ANY_LOOP(erf_any_loop, erf_lut_loop, erf_loop)
DEFINE_ANY_LOOP(exp_any_loop, exp_lut_loop, exp_loop)
DEFINE_ANY_LOOP(logistic_any_loop, logistic_lut_loop, logistic_loop)
#else
#define erf_any_loop erf_loop
#define exp_any_loop exp_loop
#define logistic_any_loop logistic_loop
#endif

typedef fastmath_loop loop_fn;   /* (_buffers.h) */

/* The claiming form: chunk after chunk of `chunk` elements, taken from
 * claim[0] by an atomic increment until none is left, its flagged indices
 * written from idx[c * chunk] on and their number to claim[1 + c]. Several
 * threads may run it on the same buffers at once (the pool's threads, one
 * call each): a thread that starts late finds fewer chunks left, so the
 * work balances without a Python call per chunk. Returns the number of
 * elements this call flagged. */
static Py_ssize_t run_claimed(loop_fn loop, const float *x, float *out, int64_t *idx,
                              Py_ssize_t n, int64_t *claim, Py_ssize_t chunk)
{
    Py_ssize_t total = 0, nchunks = n / chunk + (n % chunk != 0);
    for (;;) {
        int64_t c = __atomic_fetch_add(&claim[0], 1, __ATOMIC_RELAXED);
        if (c < 0 || c >= nchunks)   /* (a negative counter: nothing to take) */
            return total;
        Py_ssize_t lo = (Py_ssize_t)c * chunk;
        Py_ssize_t m = n - lo < chunk ? n - lo : chunk;
        Py_ssize_t k = loop(x + lo, out + lo, idx + lo, m);
        for (Py_ssize_t i = 0; i < k; i++)
            idx[lo + i] += lo;
        __atomic_store_n(&claim[1 + c], (int64_t)k, __ATOMIC_RELAXED);
        total += k;
    }
}

static PyObject *run(PyObject *args, const char *name, loop_fn loop)
{
    PyObject *ox, *oout, *oidx, *oclaim = NULL;
    Py_ssize_t chunk = 0;
    if (!PyArg_ParseTuple(args, "OOO|On", &ox, &oout, &oidx, &oclaim, &chunk))
        return NULL;
    if (oclaim != NULL && chunk < 1) {
        PyErr_Format(PyExc_ValueError, "_fastmath.%s: chunk must be positive, got %zd",
                     name, chunk);
        return NULL;
    }
    Py_buffer bx, bo, bi, bc = {0};
    if (PyObject_GetBuffer(ox, &bx, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        return NULL;
    if (PyObject_GetBuffer(oout, &bo, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&bx);
        return NULL;
    }
    if (PyObject_GetBuffer(oidx, &bi, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&bx);
        PyBuffer_Release(&bo);
        return NULL;
    }
    if (oclaim != NULL
        && PyObject_GetBuffer(oclaim, &bc, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&bx);
        PyBuffer_Release(&bo);
        PyBuffer_Release(&bi);
        return NULL;
    }
    PyObject *res = NULL;
    Py_ssize_t n = bx.len / 4;
    const char *xb = bx.buf, *ob = bo.buf;
    if (bx.itemsize != 4 || !buffer_format_is(&bx, 'f') || bo.itemsize != 4
        || !buffer_format_is(&bo, 'f')) {
        PyErr_Format(PyExc_TypeError, "_fastmath.%s: x and out must be float32 buffers", name);
    } else if (bi.itemsize != 8 || !(buffer_format_is(&bi, 'q') || buffer_format_is(&bi, 'l'))) {
        PyErr_Format(PyExc_TypeError, "_fastmath.%s: idx must be an int64 buffer", name);
    } else if (bo.len != bx.len || bi.len / 8 < n) {
        PyErr_Format(PyExc_ValueError,
                     "_fastmath.%s: x has %zd elements, out %zd and idx %zd (want %zd, >= %zd)",
                     name, n, bo.len / 4, bi.len / 8, n, n);
    } else if (xb != ob && xb < ob + bo.len && ob < xb + bx.len) {
        PyErr_Format(PyExc_ValueError, "_fastmath.%s: out partially overlaps x", name);
    } else if (oclaim != NULL
               && (bc.itemsize != 8 || !(buffer_format_is(&bc, 'q') || buffer_format_is(&bc, 'l')))) {
        PyErr_Format(PyExc_TypeError, "_fastmath.%s: claim must be an int64 buffer", name);
    } else if (oclaim != NULL && bc.len / 8 < 1 + n / chunk + (n % chunk != 0)) {
        PyErr_Format(PyExc_ValueError,
                     "_fastmath.%s: claim has %zd entries, %zd chunks of %zd need %zd",
                     name, bc.len / 8, n / chunk + (n % chunk != 0), chunk,
                     1 + n / chunk + (n % chunk != 0));
    } else if (oclaim != NULL && (buffers_overlap(&bc, &bx) || buffers_overlap(&bc, &bo)
                                  || buffers_overlap(&bc, &bi))) {
        PyErr_Format(PyExc_ValueError, "_fastmath.%s: claim overlaps another buffer", name);
    } else {
        Py_ssize_t nflag;
        Py_BEGIN_ALLOW_THREADS
        if (oclaim == NULL)
            nflag = loop((const float *)bx.buf, (float *)bo.buf, (int64_t *)bi.buf, n);
        else
            nflag = run_claimed(loop, (const float *)bx.buf, (float *)bo.buf,
                                (int64_t *)bi.buf, n, (int64_t *)bc.buf, chunk);
        Py_END_ALLOW_THREADS
        res = PyLong_FromSsize_t(nflag);
    }
    PyBuffer_Release(&bx);
    PyBuffer_Release(&bo);
    PyBuffer_Release(&bi);
    if (oclaim != NULL)
        PyBuffer_Release(&bc);
    return res;
}

/* The functions: the Python entry's name, its loop, its doc name. One list
 * for the entries, the method table and the loop table (LOOPS). */
#define FASTMATH_FUNCTIONS(X) \
    X(erf_f32, erf_any_loop, "erf") \
    X(erfc_f32, erfc_loop, "erfc") \
    X(tanh_f32, tanh_loop, "tanh") \
    X(logistic_f32, logistic_any_loop, "logistic") \
    X(erf_inv_f32, erfinv_loop, "erf_inv") \
    X(exp_f32, exp_any_loop, "exp") \
    X(log_f32, log_loop, "log") \
    X(sin_f32, sin_loop, "sin") \
    X(cos_f32, cos_loop, "cos") \
    X(expm1_f32, expm1_loop, "expm1") \
    X(log1p_f32, log1p_loop, "log1p")

#define DEFINE_ENTRY(NAME, LOOP, DOCNAME) \
static PyObject *NAME(PyObject *self, PyObject *args) { (void)self; return run(args, #NAME, LOOP); }
FASTMATH_FUNCTIONS(DEFINE_ENTRY)

#define DOC(F) F "(x, out, idx[, claim, chunk]) -> n: " F " of float32 x into out; the " \
    "indices of the n elements to recompute exactly into idx[:n] (with claim: the chunks " \
    "this call took, see the C source)."
#define METHOD(NAME, LOOP, DOCNAME) {#NAME, NAME, METH_VARARGS, DOC(DOCNAME)},

static PyMethodDef methods[] = {
    FASTMATH_FUNCTIONS(METHOD)
    {NULL, NULL, 0, NULL},
};

/* The loops for _chains.c's block machine (_buffers.h's FastmathLoops), in
 * the order of the module's LOOPS tuple of entry names. */
#define LOOP_ENTRY(NAME, LOOP, DOCNAME) LOOP,
#define LOOP_NAME(NAME, LOOP, DOCNAME) #NAME,
static const fastmath_loop LOOP_TABLE[] = {FASTMATH_FUNCTIONS(LOOP_ENTRY)};
static const char *const LOOP_NAMES[] = {FASTMATH_FUNCTIONS(LOOP_NAME)};
#define N_LOOPS ((int32_t)(sizeof LOOP_TABLE / sizeof LOOP_TABLE[0]))
static const FastmathLoops LOOPS = {FASTMATH_LOOPS_VERSION, N_LOOPS, LOOP_TABLE};

static int module_exec(PyObject *m)
{
    PyObject *names = PyTuple_New(N_LOOPS);
    if (!names) return -1;
    for (int32_t k = 0; k < N_LOOPS; k++) {
        PyObject *name = PyUnicode_FromString(LOOP_NAMES[k]);
        if (!name) { Py_DECREF(names); return -1; }
        PyTuple_SET_ITEM(names, k, name);
    }
    if (PyModule_AddObject(m, "LOOPS", names) < 0) { Py_DECREF(names); return -1; }
    PyObject *cap = PyCapsule_New((void *)&LOOPS, FASTMATH_LOOPS_CAPSULE, NULL);
    if (!cap) return -1;
    if (PyModule_AddObject(m, "_loops", cap) < 0) { Py_DECREF(cap); return -1; }
    return 0;
}

static struct PyModuleDef_Slot slots[] = {
    {Py_mod_exec, module_exec},
#ifdef Py_mod_multiple_interpreters
    {Py_mod_multiple_interpreters, Py_MOD_PER_INTERPRETER_GIL_SUPPORTED},
#endif
    {0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_fastmath",
    "Vectorized, correctly rounded float32 erf, erfc, erf_inv, tanh, logistic, exp, expm1, "
    "log, log1p, sin and cos "
    "(see the C source's header comment).", 0, methods, slots, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__fastmath(void) { return PyModuleDef_Init(&module); }
