/*
 * C trampolines for the stablehlo_pjrt PJRT plugin.
 *
 * The PJRT C API table itself is described and filled from Python (see
 * _capi.py and api.py).  This extension exists because plain ctypes callbacks
 * are not robust enough when jaxlib is the caller:
 *
 *   - jaxlib sometimes calls PJRT_Buffer_Destroy while a Python exception is
 *     pending on the calling thread (a failed Execute freeing a temporary
 *     argument).  Running Python code in that state corrupts the exception.
 *   - An exception escaping a ctypes callback makes it return garbage, which
 *     jaxlib then treats as a PJRT_Error* and aborts on.
 *   - At interpreter exit jaxlib destroys executables and buffers from its
 *     thread pool after Python is finalized; touching Python then crashes.
 *
 * Every PJRT entry point has the shape `PJRT_Error* f(Args*)`, so one generic
 * trampoline per table slot suffices: it takes the GIL, parks any pending
 * exception, calls the Python handler registered for the slot with the
 * address of the args struct, turns an escaping exception into a PJRT_Error,
 * restores the parked exception and returns.  After (or during) finalization
 * it returns without touching Python.
 *
 * Errors, events and the PJRT_Memory vtable are implemented here in C: they
 * are called from jaxlib threads at any time (including after finalization),
 * their semantics are tiny, and event callbacks must run without the GIL so
 * that jaxlib continuations cannot deadlock against Python threads.
 *
 * The same shared object exports GetPjrtApi so hosts that load PJRT plugins
 * by path (PJRT_NAMES_AND_LIBRARY_PATHS, PyTorch/XLA) can use it too.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ */
/* Types from pjrt_c_api.h that the C part implements.  Layouts must match  */
/* the header version mirrored in _capi.py (0.110).                         */
/* ------------------------------------------------------------------------ */

typedef struct PJRT_Error PJRT_Error;
typedef struct PJRT_Memory PJRT_Memory;

typedef void (*PayloadVisitor)(const char *key, size_t key_size,
                               const char *value, size_t value_size,
                               void *user_arg);

typedef struct {
  size_t struct_size;
  size_t instance_size;
  void *extension_start;
  void (*destroy)(PJRT_Error *error);
  void (*message)(const PJRT_Error *error, const char **message,
                  size_t *message_size);
  int (*get_code)(const PJRT_Error *error);
  void (*for_each_payload)(const PJRT_Error *error, PayloadVisitor visitor,
                           void *user_arg);
} ErrorFunctionTable;

struct PJRT_Error {
  const ErrorFunctionTable *vtable; /* public part (PJRT_Error_STRUCT_SIZE) */
  int code;
  size_t message_size;
  char *message; /* NUL terminated, owned */
};

typedef struct {
  size_t struct_size;
  void *extension_start;
  size_t instance_struct_size;
  void *(*get_user_data)(PJRT_Memory *memory, const void *key);
  void (*set_user_data)(PJRT_Memory *memory, const void *key, void *data,
                        void (*dtor)(void *));
} MemoryFunctionTable;

typedef struct UserData {
  const void *key;
  void *data;
  void (*dtor)(void *);
  struct UserData *next;
} UserData;

struct PJRT_Memory {
  const MemoryFunctionTable *vtable; /* public part (PJRT_Memory_STRUCT_SIZE) */
  pthread_mutex_t mu;
  UserData *user_data;
};

enum { CODE_OK = 0, CODE_INVALID_ARGUMENT = 3, CODE_FAILED_PRECONDITION = 9,
       CODE_UNIMPLEMENTED = 12, CODE_INTERNAL = 13, CODE_UNAVAILABLE = 14,
       CODE_CANCELLED = 1 };

/* ------------------------------------------------------------------------ */
/* Errors                                                                   */
/* ------------------------------------------------------------------------ */

static void error_vt_destroy(PJRT_Error *e);
static void error_vt_message(const PJRT_Error *e, const char **m, size_t *n);
static int error_vt_get_code(const PJRT_Error *e);
static void error_vt_for_each_payload(const PJRT_Error *e, PayloadVisitor v,
                                      void *user_arg);

static const ErrorFunctionTable kErrorVtable = {
    sizeof(ErrorFunctionTable), sizeof(void *), NULL, error_vt_destroy,
    error_vt_message, error_vt_get_code, error_vt_for_each_payload};

/* Never returns NULL for a non-OK code: if allocation fails we hand out a
 * static error so jaxlib still sees a failure (destroy ignores it). */
static char kOutOfMemoryText[] = "stablehlo_pjrt: out of host memory";
static PJRT_Error kOutOfMemoryError = {&kErrorVtable, 8 /*RESOURCE_EXHAUSTED*/,
                                       sizeof(kOutOfMemoryText) - 1,
                                       kOutOfMemoryText};

static PJRT_Error *error_new(int code, const char *msg, size_t len) {
  PJRT_Error *e = (PJRT_Error *)malloc(sizeof(PJRT_Error));
  char *copy = (char *)malloc(len + 1);
  if (e == NULL || copy == NULL) {
    free(e);
    free(copy);
    return &kOutOfMemoryError;
  }
  if (len) memcpy(copy, msg, len);
  copy[len] = '\0';
  e->vtable = &kErrorVtable;
  e->code = code;
  e->message = copy;
  e->message_size = len;
  return e;
}

static PJRT_Error *error_new_cstr(int code, const char *msg) {
  return error_new(code, msg, strlen(msg));
}

static void error_free(PJRT_Error *e) {
  if (e == NULL || e == &kOutOfMemoryError) return;
  free(e->message);
  free(e);
}

static void error_vt_destroy(PJRT_Error *e) { error_free(e); }
static void error_vt_message(const PJRT_Error *e, const char **m, size_t *n) {
  *m = e->message;
  *n = e->message_size;
}
static int error_vt_get_code(const PJRT_Error *e) { return e->code; }
static void error_vt_for_each_payload(const PJRT_Error *e, PayloadVisitor v,
                                      void *user_arg) {
  (void)e; (void)v; (void)user_arg; /* we never attach payloads */
}

typedef struct { size_t struct_size; void *ext; PJRT_Error *error; } ErrorDestroyArgs;
typedef struct {
  size_t struct_size; void *ext; const PJRT_Error *error;
  const char *message; size_t message_size;
} ErrorMessageArgs;
typedef struct { size_t struct_size; void *ext; const PJRT_Error *error; int code; } ErrorGetCodeArgs;
typedef struct {
  size_t struct_size; void *ext; const PJRT_Error *error;
  PayloadVisitor visitor; void *user_arg;
} ErrorForEachPayloadArgs;

/* pjrt_c_api.h's struct_size rule for the args structs implemented in C:
 * every field of them exists since the first minor version, so a NULL args
 * pointer or a struct that ends before its last field is a broken caller.
 * Such a call is refused (INVALID_ARGUMENT; nothing at all for the two
 * functions returning void) and nothing past what it gave is read or
 * written. Found by the C API fuzz kind (tests/fuzz/capi_fuzz.py). */
#define ARGS_OK(a, T, last) \
  ((a) != NULL && (a)->struct_size >= offsetof(T, last) + sizeof(((T *)0)->last))

static PJRT_Error *bad_args(const char *fn, const char *what) {
  char buf[200];
  snprintf(buf, sizeof buf, "%s: %s", fn, what);
  return error_new_cstr(CODE_INVALID_ARGUMENT, buf);
}
#define TOO_SMALL "the args pointer is NULL or its struct_size is smaller than the struct"

static void api_error_destroy(ErrorDestroyArgs *a) {
  if (ARGS_OK(a, ErrorDestroyArgs, error)) error_free(a->error);
}
static void api_error_message(ErrorMessageArgs *a) {
  if (!ARGS_OK(a, ErrorMessageArgs, message_size)) return;
  a->message = a->error ? a->error->message : "";
  a->message_size = a->error ? a->error->message_size : 0;
}
static PJRT_Error *api_error_get_code(ErrorGetCodeArgs *a) {
  if (!ARGS_OK(a, ErrorGetCodeArgs, code)) return bad_args("PJRT_Error_GetCode", TOO_SMALL);
  if (a->error == NULL) return bad_args("PJRT_Error_GetCode", "error is NULL");
  a->code = a->error->code;
  return NULL;
}
static PJRT_Error *api_error_for_each_payload(ErrorForEachPayloadArgs *a) {
  if (!ARGS_OK(a, ErrorForEachPayloadArgs, user_arg))
    return bad_args("PJRT_Error_ForEachPayload", TOO_SMALL);
  if (a->error == NULL) return bad_args("PJRT_Error_ForEachPayload", "error is NULL");
  return NULL;
}

/* ------------------------------------------------------------------------ */
/* Events                                                                   */
/* ------------------------------------------------------------------------ */

typedef void (*OnReadyCallback)(PJRT_Error *error, void *user_arg);

typedef struct Callback {
  OnReadyCallback fn;
  void *user_arg;
  struct Callback *next;
} Callback;

typedef struct PJRT_Event {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int refs;  /* the caller's reference plus one per pending plugin setter */
  int ready;
  int code;
  char *message;
  size_t message_size;
  Callback *callbacks;
} PJRT_Event;

static PJRT_Event *event_new(int ready, int code, const char *msg, size_t len,
                             int refs) {
  PJRT_Event *ev = (PJRT_Event *)calloc(1, sizeof(PJRT_Event));
  if (ev == NULL) return NULL;
  pthread_mutex_init(&ev->mu, NULL);
  pthread_cond_init(&ev->cv, NULL);
  ev->refs = refs;
  ev->ready = ready;
  ev->code = code;
  if (code != CODE_OK && msg != NULL) {
    ev->message = (char *)malloc(len + 1);
    if (ev->message) {
      memcpy(ev->message, msg, len);
      ev->message[len] = '\0';
      ev->message_size = len;
    }
  }
  return ev;
}

static void event_unref(PJRT_Event *ev) {
  int last;
  pthread_mutex_lock(&ev->mu);
  last = (--ev->refs == 0);
  pthread_mutex_unlock(&ev->mu);
  if (!last) return;
  /* Callbacks still registered on a never-set event are dropped: nothing
   * will ever complete them, and calling them with a fake status would lie. */
  while (ev->callbacks) {
    Callback *c = ev->callbacks;
    ev->callbacks = c->next;
    free(c);
  }
  free(ev->message);
  pthread_cond_destroy(&ev->cv);
  pthread_mutex_destroy(&ev->mu);
  free(ev);
}

/* Status of a ready event as a fresh PJRT_Error (NULL when OK). */
static PJRT_Error *event_status(PJRT_Event *ev) {
  if (ev->code == CODE_OK) return NULL;
  return error_new(ev->code, ev->message ? ev->message : "",
                   ev->message ? ev->message_size : 0);
}

/* Marks the event ready and runs its callbacks on this thread, outside the
 * event lock (callbacks may destroy the event or register new work). */
static int event_set(PJRT_Event *ev, int code, const char *msg, size_t len) {
  Callback *cbs;
  pthread_mutex_lock(&ev->mu);
  if (ev->ready) {
    pthread_mutex_unlock(&ev->mu);
    return -1;
  }
  ev->ready = 1;
  ev->code = code;
  if (code != CODE_OK && msg != NULL) {
    ev->message = (char *)malloc(len + 1);
    if (ev->message) {
      memcpy(ev->message, msg, len);
      ev->message[len] = '\0';
      ev->message_size = len;
    }
  }
  cbs = ev->callbacks;
  ev->callbacks = NULL;
  pthread_cond_broadcast(&ev->cv);
  ev->refs++; /* keep ev alive while callbacks read its status */
  pthread_mutex_unlock(&ev->mu);
  /* Registration prepends; run callbacks in registration order. */
  {
    Callback *rev = NULL;
    while (cbs) {
      Callback *n = cbs->next;
      cbs->next = rev;
      rev = cbs;
      cbs = n;
    }
    cbs = rev;
  }
  while (cbs) {
    Callback *c = cbs;
    cbs = c->next;
    c->fn(event_status(ev), c->user_arg);
    free(c);
  }
  event_unref(ev);
  return 0;
}

typedef struct { size_t struct_size; void *ext; PJRT_Event *event; } EventArgs;
typedef struct { size_t struct_size; void *ext; PJRT_Event *event; bool is_ready; } EventIsReadyArgs;
typedef struct {
  size_t struct_size; void *ext; PJRT_Event *event;
  OnReadyCallback callback; void *user_arg;
} EventOnReadyArgs;
typedef struct { size_t struct_size; void *ext; PJRT_Event *event; } EventCreateArgs;
typedef struct {
  size_t struct_size; void *ext; PJRT_Event *event; int error_code;
  const char *error_message; size_t error_message_size;
} EventSetArgs;

static void trace_c_call(const char *name, void *obj);

static PJRT_Error *api_event_destroy(EventArgs *a) {
  if (!ARGS_OK(a, EventArgs, event)) return bad_args("PJRT_Event_Destroy", TOO_SMALL);
  if (a->event == NULL) return NULL;
  trace_c_call("PJRT_Event_Destroy", a->event);
  event_unref(a->event);
  return NULL;
}

static PJRT_Error *api_event_is_ready(EventIsReadyArgs *a) {
  if (!ARGS_OK(a, EventIsReadyArgs, is_ready)) return bad_args("PJRT_Event_IsReady", TOO_SMALL);
  if (a->event == NULL) return error_new_cstr(CODE_INVALID_ARGUMENT, "PJRT_Event_IsReady: event is NULL");
  pthread_mutex_lock(&a->event->mu);
  a->is_ready = a->event->ready != 0;
  pthread_mutex_unlock(&a->event->mu);
  return NULL;
}

static PJRT_Error *api_event_error(EventArgs *a) {
  PJRT_Error *status;
  if (!ARGS_OK(a, EventArgs, event)) return bad_args("PJRT_Event_Error", TOO_SMALL);
  if (a->event == NULL) return error_new_cstr(CODE_INVALID_ARGUMENT, "PJRT_Event_Error: event is NULL");
  pthread_mutex_lock(&a->event->mu);
  if (!a->event->ready) {
    pthread_mutex_unlock(&a->event->mu);
    return error_new_cstr(CODE_FAILED_PRECONDITION,
                          "PJRT_Event_Error called on an event that is not ready");
  }
  status = event_status(a->event);
  pthread_mutex_unlock(&a->event->mu);
  return status;
}

static int python_gone(void);

static PJRT_Error *api_event_await(EventArgs *a) {
  PJRT_Error *status;
  PyThreadState *saved = NULL;
  if (!ARGS_OK(a, EventArgs, event)) return bad_args("PJRT_Event_Await", TOO_SMALL);
  if (a->event == NULL) return error_new_cstr(CODE_INVALID_ARGUMENT, "PJRT_Event_Await: event is NULL");
  trace_c_call("PJRT_Event_Await", a->event);
  pthread_mutex_lock(&a->event->mu);
  if (!a->event->ready) {
    /* The plugin's worker thread completes pending events and needs the GIL
     * to do so: a caller that holds it while waiting would wait forever. */
    pthread_mutex_unlock(&a->event->mu);
    if (!python_gone() && PyGILState_Check()) saved = PyEval_SaveThread();
    pthread_mutex_lock(&a->event->mu);
  }
  while (!a->event->ready) pthread_cond_wait(&a->event->cv, &a->event->mu);
  status = event_status(a->event);
  pthread_mutex_unlock(&a->event->mu);
  if (saved != NULL) PyEval_RestoreThread(saved);
  return status;
}

static PJRT_Error *api_event_on_ready(EventOnReadyArgs *a) {
  PJRT_Event *ev;
  if (!ARGS_OK(a, EventOnReadyArgs, user_arg)) return bad_args("PJRT_Event_OnReady", TOO_SMALL);
  ev = a->event;
  if (ev == NULL || a->callback == NULL)
    return error_new_cstr(CODE_INVALID_ARGUMENT, "PJRT_Event_OnReady: event or callback is NULL");
  trace_c_call("PJRT_Event_OnReady", ev);
  pthread_mutex_lock(&ev->mu);
  if (!ev->ready) {
    Callback *c = (Callback *)malloc(sizeof(Callback));
    if (c == NULL) {
      pthread_mutex_unlock(&ev->mu);
      return &kOutOfMemoryError;
    }
    c->fn = a->callback;
    c->user_arg = a->user_arg;
    c->next = ev->callbacks;
    ev->callbacks = c;
    pthread_mutex_unlock(&ev->mu);
    return NULL;
  }
  pthread_mutex_unlock(&ev->mu);
  /* Ready already: run the callback right here, without holding the GIL or
   * the event lock. */
  a->callback(event_status(ev), a->user_arg);
  return NULL;
}

static PJRT_Error *api_event_create(EventCreateArgs *a) {
  if (!ARGS_OK(a, EventCreateArgs, event)) return bad_args("PJRT_Event_Create", TOO_SMALL);
  a->event = event_new(0, CODE_OK, NULL, 0, 1);
  return a->event ? NULL : &kOutOfMemoryError;
}

static PJRT_Error *api_event_set(EventSetArgs *a) {
  if (!ARGS_OK(a, EventSetArgs, error_message_size)) return bad_args("PJRT_Event_Set", TOO_SMALL);
  if (a->event == NULL) return error_new_cstr(CODE_INVALID_ARGUMENT, "PJRT_Event_Set: event is NULL");
  if (a->error_code < 0 || a->error_code > 16)
    return bad_args("PJRT_Event_Set", "error_code is not a PJRT_Error_Code (0-16)");
  if (a->error_message == NULL && a->error_message_size > 0)
    return bad_args("PJRT_Event_Set", "error_message is NULL but error_message_size is not 0");
  if (a->error_message_size >= ((size_t)1 << 47))
    return bad_args("PJRT_Event_Set", "error_message_size is larger than any buffer");
  if (event_set(a->event, a->error_code, a->error_message, a->error_message_size) != 0)
    return error_new_cstr(CODE_FAILED_PRECONDITION, "PJRT_Event_Set: event is already set");
  return NULL;
}

/* ------------------------------------------------------------------------ */
/* PJRT_Memory objects (vtable with user data)                              */
/* ------------------------------------------------------------------------ */

static void *memory_get_user_data(PJRT_Memory *m, const void *key) {
  void *found = NULL;
  UserData *u;
  pthread_mutex_lock(&m->mu);
  for (u = m->user_data; u; u = u->next)
    if (u->key == key) { found = u->data; break; }
  pthread_mutex_unlock(&m->mu);
  return found;
}

static void memory_set_user_data(PJRT_Memory *m, const void *key, void *data,
                                 void (*dtor)(void *)) {
  void *old = NULL;
  void (*old_dtor)(void *) = NULL;
  UserData *u;
  pthread_mutex_lock(&m->mu);
  for (u = m->user_data; u; u = u->next)
    if (u->key == key) break;
  if (u) {
    old = u->data;
    old_dtor = u->dtor;
    u->data = data;
    u->dtor = dtor;
  } else {
    u = (UserData *)malloc(sizeof(UserData));
    if (u) {
      u->key = key; u->data = data; u->dtor = dtor;
      u->next = m->user_data;
      m->user_data = u;
    }
  }
  pthread_mutex_unlock(&m->mu);
  /* Replacing a value releases the previous one, like PjRtMemorySpace's
   * user-data map does; done outside the lock in case dtor re-enters. */
  if (old_dtor && old != data) old_dtor(old);
}

static const MemoryFunctionTable kMemoryVtable = {
    sizeof(MemoryFunctionTable), NULL, sizeof(void *), memory_get_user_data,
    memory_set_user_data};

/* ------------------------------------------------------------------------ */
/* The API table, slots and trampolines                                     */
/* ------------------------------------------------------------------------ */

#define MAX_SLOTS 192
#define API_STORAGE_BYTES 4096

/* The PJRT_Api struct lives in static storage so that it outlives Python
 * finalization (jaxlib reads it until process exit).  Python fills it. */
static _Alignas(16) unsigned char g_api[API_STORAGE_BYTES];
static int g_api_ready = 0;

#define MAX_GETTER_OUTS 2
/* Execute's fast path reads these fields: offsets in the args struct
 * (executable, options, argument_lists, num_devices, num_args, output_lists,
 * device_complete_events, execute_device), then in PJRT_ExecuteOptions (the
 * struct_size it needs, num_send_ops, num_recv_ops,
 * num_non_donatable_input_indices). */
enum { FX_EXE, FX_OPTIONS, FX_LISTS, FX_NDEV, FX_NARGS, FX_OUTS, FX_EVENTS, FX_DEVICE,
       FX_OPT_SIZE, FX_OPT_SEND, FX_OPT_RECV, FX_OPT_NONDON, FAST_FIELDS };
#define FAST_MAX_ARGS 256

typedef struct {
  PyObject *handler; /* strong ref; NULL -> UNIMPLEMENTED */
  char *name;
  int quiet;         /* return NULL instead of an error once Python is gone */
  /* Fast paths, taken only when the args pointer is not NULL and the
   * caller's struct_size is at least args_size (otherwise `handler`, which
   * applies pjrt_c_api.h's struct_size rules and reports bad args, runs):
   *   direct(args_address): the handler without the struct_size wrapper;
   *   getter(handle): for calls that only read one object and write fields:
   *     C reads the handle at in_offset, calls getter, and writes what it
   *     returns (an int, or a tuple of n_outs ints; None is 0) into the
   *     out fields (offset, size in bytes: 1 bool, 4 int32, 8 size_t or
   *     pointer). */
  PyObject *direct;
  PyObject *getter;
  size_t args_size;
  size_t in_offset;
  int n_outs;
  size_t out_offset[MAX_GETTER_OUTS];
  int out_size[MAX_GETTER_OUTS];
  /* constant: the getter's outputs never change while its handle is live
   * (a buffer's device, an executable's output count): answered from
   * g_const_cache without calling Python once seen; handles.release calls
   * forget(handle). */
  int constant;
  /* live: a getter on a buffer that C answers for the buffers Execute's fast
   * path made (g_live: ready, no error, not deleted) without calling Python:
   * LIVE_IS_DELETED writes false, LIVE_READY_EVENT a new ready event.
   * LIVE_DESTROY (PJRT_Buffer_Destroy, under the GIL): see destroy_live. 0: none. */
  int live;
  /* fast: Execute's common case (see fast_execute); NULL for other slots. */
  PyObject *fast;
  size_t fast_off[FAST_FIELDS];
  /* The slots of PJRT_Buffer_Device and PJRT_Buffer_Memory (constant
   * getters), whose answers for its outputs the fast path knows: put in the
   * cache at once (jaxlib asks both for every output). -1: none. */
  int device_slot, memory_slot;
} Slot;

static Slot g_slots[MAX_SLOTS];

/* The constant getters' answers, keyed by (slot, handle): direct-mapped (a
 * collision replaces the older entry). Written under the GIL only
 * (const_store, const_clear); read by any thread without it (const_load):
 * jaxlib calls these getters with the GIL released, and taking it costs
 * more than the rest of the call. Each entry is a sequence lock: `seq` is
 * odd while a writer changes the entry, and a reader that sees it odd or
 * changed across its reads takes the path through Python instead. */
#define CONST_CACHE_SIZE 1024
typedef struct {
  unsigned long seq;
  void *handle; /* NULL: empty */
  long slot;
  uint64_t v[MAX_GETTER_OUTS];
} ConstEntry;
static ConstEntry g_const_cache[CONST_CACHE_SIZE];
static int g_const_slots[MAX_SLOTS]; /* the slots with `constant` set */
static int g_n_const_slots = 0;

static ConstEntry *const_entry(int slot, void *handle) {
  uint64_t x = (uint64_t)(uintptr_t)handle * 0x9E3779B97F4A7C15ull + (uint64_t)slot * 0xC2B2AE3D27D4EB4Full;
  return &g_const_cache[(x >> 32) & (CONST_CACHE_SIZE - 1)];
}
/* Under the GIL (the only writers): entry e := (handle, slot, v[0..n)). */
static void const_store(ConstEntry *e, void *handle, int slot, const uint64_t *v, int n) {
  unsigned long q = e->seq;
  int i;
  __atomic_store_n(&e->seq, q + 1, __ATOMIC_RELAXED);
  __atomic_thread_fence(__ATOMIC_RELEASE);
  __atomic_store_n(&e->handle, handle, __ATOMIC_RELAXED);
  __atomic_store_n(&e->slot, (long)slot, __ATOMIC_RELAXED);
  for (i = 0; i < MAX_GETTER_OUTS; i++)
    __atomic_store_n(&e->v[i], i < n ? v[i] : 0, __ATOMIC_RELAXED);
  __atomic_store_n(&e->seq, q + 2, __ATOMIC_RELEASE);
}

static void const_clear(ConstEntry *e) {
  unsigned long q = e->seq;
  __atomic_store_n(&e->seq, q + 1, __ATOMIC_RELAXED);
  __atomic_thread_fence(__ATOMIC_RELEASE);
  __atomic_store_n(&e->handle, NULL, __ATOMIC_RELAXED);
  __atomic_store_n(&e->seq, q + 2, __ATOMIC_RELEASE);
}

/* Any thread: 1 and v[0..n) when e holds (handle, slot) and no write
 * overlapped the read; 0 otherwise (the caller asks Python). */
static int const_load(const ConstEntry *e, void *handle, int slot, uint64_t *v, int n) {
  unsigned long q = __atomic_load_n(&e->seq, __ATOMIC_ACQUIRE);
  int i, hit;
  if (q & 1) return 0;
  hit = __atomic_load_n(&e->handle, __ATOMIC_RELAXED) == handle &&
        __atomic_load_n(&e->slot, __ATOMIC_RELAXED) == (long)slot;
  for (i = 0; i < n; i++) v[i] = __atomic_load_n(&e->v[i], __ATOMIC_RELAXED);
  __atomic_thread_fence(__ATOMIC_ACQUIRE);
  return hit && __atomic_load_n(&e->seq, __ATOMIC_RELAXED) == q;
}

enum { LIVE_NONE = 0, LIVE_IS_DELETED = 1, LIVE_READY_EVENT = 2, LIVE_DESTROY = 3 };

/* The buffers made by Execute's fast path that are still alive: their
 * PJRT_Buffer_IsDeleted and PJRT_Buffer_ReadyEvent (jaxlib asks both for
 * every output) are answered here. An output is ready and error-free when
 * made and stays so; it leaves the set when it is deleted (buffer.py calls
 * deleted(handle)) or released (forget). Direct-mapped: a collision drops
 * the older entry, whose calls then go to Python, which knows the truth.
 * Written under the GIL, read by any thread (one pointer: atomic). */
#define LIVE_SIZE 1024
static void *g_live[LIVE_SIZE];

static void **live_entry(void *handle) {
  uint64_t x = (uint64_t)(uintptr_t)handle * 0x9E3779B97F4A7C15ull;
  return &g_live[(x >> 32) & (LIVE_SIZE - 1)];
}

static void live_drop(void *handle) {
  void **e = live_entry(handle);
  if (__atomic_load_n(e, __ATOMIC_RELAXED) == handle) __atomic_store_n(e, NULL, __ATOMIC_RELEASE);
}

static void live_add(void *handle) { __atomic_store_n(live_entry(handle), handle, __ATOMIC_RELEASE); }

static int live_has(void *handle) {
  return __atomic_load_n(live_entry(handle), __ATOMIC_ACQUIRE) == handle;
}

static PyObject *g_trace_hook = NULL;
/* Called as hook(slot_name, exception) when a Python signal handler raised
 * as a handler was about to start (Ctrl-C pressed while jaxlib was busy in
 * C++: the exception would otherwise surface inside whichever handler runs
 * next, as that call's error). Returns a str to fail the call with CANCELLED
 * and that text (long calls: compile, execute), None to run the handler; the
 * hook arranges for the exception to reach the Python caller (interrupt.py). */
static PyObject *g_interrupt_hook = NULL;
/* Set by the plugin's exit handler (shutdown.py): from then on, threads that
 * do not already hold the GIL (jaxlib's pool threads destroying objects) no
 * longer wait for it.  A thread blocked in PyGILState_Ensure when
 * finalization starts is killed with pthread_exit, which aborts the process
 * ("terminate called without an active exception") when it unwinds through
 * jaxlib's C++ frames.  g_foreign_calls counts the calls in progress from
 * such threads (counted before g_exiting is read, both sequentially
 * consistent): begin_exit waits, with the GIL released, for the ones that
 * started before it, so that none is still waiting for the GIL when
 * finalization starts. */
static int g_exiting = 0;
static int g_foreign_calls = 0;

static int exiting(void) { return __atomic_load_n(&g_exiting, __ATOMIC_SEQ_CST); }

/* Enter/leave a call from a thread that does not hold the GIL: enter returns
 * 0 (and counts nothing) once the plugin is exiting. */
static int foreign_enter(void) {
  __atomic_add_fetch(&g_foreign_calls, 1, __ATOMIC_SEQ_CST);
  if (exiting()) {
    __atomic_sub_fetch(&g_foreign_calls, 1, __ATOMIC_SEQ_CST);
    return 0;
  }
  return 1;
}

static void foreign_leave(void) { __atomic_sub_fetch(&g_foreign_calls, 1, __ATOMIC_SEQ_CST); }

static int python_gone(void) {
  if (!Py_IsInitialized()) return 1;
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing();
#else
  return _Py_IsFinalizing();
#endif
}

/* Builds a PJRT_Error from the exception currently set (and clears it).
 * Exceptions carrying a `pjrt_code` attribute (stablehlo_pjrt.error.PjrtError)
 * keep their code and message; anything else is INTERNAL with its type name. */
static PJRT_Error *error_from_exception(const char *slot_name) {
  PyObject *type, *value, *tb, *code_obj, *text;
  int code = CODE_INTERNAL;
  int has_code = 0;
  PJRT_Error *err;
  const char *msg;
  Py_ssize_t len;
  PyErr_Fetch(&type, &value, &tb);
  PyErr_NormalizeException(&type, &value, &tb);
  if (value == NULL) {
    Py_XDECREF(type);
    Py_XDECREF(tb);
    return error_new_cstr(CODE_INTERNAL, "stablehlo_pjrt: unknown failure");
  }
  code_obj = PyObject_GetAttrString(value, "pjrt_code");
  if (code_obj != NULL) {
    long c = PyLong_AsLong(code_obj);
    if (!(c == -1 && PyErr_Occurred()) && c > 0 && c <= 16) {
      code = (int)c;
      has_code = 1;
    }
    Py_DECREF(code_obj);
  }
  PyErr_Clear();
  if (has_code) {
    text = PyObject_Str(value);
  } else {
    text = PyUnicode_FromFormat("%s: internal error in the plugin: %s: %S",
                                slot_name ? slot_name : "PJRT call",
                                Py_TYPE(value)->tp_name, value);
  }
  if (text == NULL) {
    PyErr_Clear();
    err = error_new_cstr(code, "stablehlo_pjrt: error message could not be formatted");
  } else {
    msg = PyUnicode_AsUTF8AndSize(text, &len);
    if (msg == NULL) {
      PyErr_Clear();
      err = error_new_cstr(code, "stablehlo_pjrt: error message could not be encoded");
    } else {
      err = error_new(code, msg, (size_t)len);
    }
    Py_DECREF(text);
  }
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(tb);
  return err;
}

/* Takes the pending KeyboardInterrupt and calls the interrupt hook with
 * (call name, the exception); returns the hook's result (NULL with its
 * exception set if it raised). */
static PyObject *pass_interrupt(const char *name) {
  PyObject *etype, *evalue, *etb, *res;
  PyErr_Fetch(&etype, &evalue, &etb);
  PyErr_NormalizeException(&etype, &evalue, &etb);
  res = PyObject_CallFunction(g_interrupt_hook, "sO", name, evalue ? evalue : Py_None);
  Py_XDECREF(etype);
  Py_XDECREF(evalue);
  Py_XDECREF(etb);
  return res;
}

/* The PJRT_Error of a handler that raised (the exception is set). A
 * KeyboardInterrupt (Ctrl-C while the handler's Python code ran) is not the
 * plugin's failure: the call fails with CANCELLED and the interrupt hook
 * (interrupt.py) arranges for KeyboardInterrupt to reach the Python caller,
 * as for a signal pending when a call starts; raised through PJRT it would
 * reach the user as an INTERNAL error instead of the interrupt. */
static PJRT_Error *handler_error(const Slot *s) {
  PyObject *res;
  char buf[256];
  if (g_interrupt_hook == NULL || !PyErr_ExceptionMatches(PyExc_KeyboardInterrupt))
    return error_from_exception(s->name);
  res = pass_interrupt("");
  if (res == NULL) PyErr_Clear();
  Py_XDECREF(res);
  snprintf(buf, sizeof buf, "stablehlo_ref: %s was interrupted (KeyboardInterrupt)",
           s->name ? s->name : "PJRT call");
  return error_new_cstr(CODE_CANCELLED, buf);
}

/* Writes a getter's result into the args struct; -1 with an exception set
 * if the result does not fit the declared fields. */
static int write_one(char *dst, int size, PyObject *v) {
  if (v == Py_None) {
    memset(dst, 0, (size_t)size);
    return 0;
  }
  if (size == 1) {
    int b = PyObject_IsTrue(v);
    if (b < 0) return -1;
    *(bool *)dst = b != 0;
    return 0;
  }
  if (!PyLong_Check(v)) {
    PyErr_Format(PyExc_TypeError, "getter returned %s, not an int", Py_TYPE(v)->tp_name);
    return -1;
  }
  if (size == 4) {
    long x = PyLong_AsLong(v);
    if (x == -1 && PyErr_Occurred()) return -1;
    *(int32_t *)dst = (int32_t)x;
    return 0;
  }
  {
    unsigned long long x = PyLong_AsUnsignedLongLong(v);
    if (x == (unsigned long long)-1 && PyErr_Occurred()) return -1;
    memcpy(dst, &x, 8);
    return 0;
  }
}

static int write_getter_outputs(const Slot *s, char *args, PyObject *res) {
  int i;
  if (s->n_outs == 0) return 0;
  if (s->n_outs == 1) return write_one(args + s->out_offset[0], s->out_size[0], res);
  if (!PyTuple_Check(res) || PyTuple_GET_SIZE(res) != s->n_outs) {
    PyErr_Format(PyExc_TypeError, "getter must return a tuple of %d values", s->n_outs);
    return -1;
  }
  for (i = 0; i < s->n_outs; i++)
    if (write_one(args + s->out_offset[i], s->out_size[i], PyTuple_GET_ITEM(res, i)) != 0)
      return -1;
  return 0;
}

static void *read_ptr(const char *p) { void *v; memcpy(&v, p, sizeof v); return v; }
static size_t read_size(const char *p) { size_t v; memcpy(&v, p, sizeof v); return v; }

static void const_remember(int slot, void *handle, void *value) {
  uint64_t v = (uint64_t)(uintptr_t)value;
  if (slot < 0 || !g_slots[slot].constant || handle == NULL) return;
  const_store(const_entry(slot, handle), handle, slot, &v, 1);
}

/* Writes the cached answer of a constant getter into args; 0 on a miss. */
static int const_write(const Slot *s, char *args, const ConstEntry *e, void *handle, int slot) {
  uint64_t v[MAX_GETTER_OUTS];
  int i;
  if (!const_load(e, handle, slot, v, s->n_outs)) return 0;
  for (i = 0; i < s->n_outs; i++) memcpy(args + s->out_offset[i], &v[i], (size_t)s->out_size[i]);
  return 1;
}

/* A getter's answer that needs no Python: a live output's IsDeleted or
 * ReadyEvent, a constant getter's cached answer. Read without the GIL
 * (jaxlib makes these calls with it released: taking it would cost more
 * than the call). 1 when answered (*err set on failure), 0 otherwise (the
 * caller then takes the GIL and does what it always does). Not for traced
 * slots (their getter is NULL: each call goes through Python). */
static int answer_without_python(int slot, char *args, PJRT_Error **err) {
  const Slot *s = &g_slots[slot];
  void *handle;
  if (args == NULL || s->getter == NULL || (!s->constant && s->live == LIVE_NONE) ||
      s->live == LIVE_DESTROY || !s->args_size || *(const size_t *)args < s->args_size)
    return 0;
  handle = read_ptr(args + s->in_offset);
  if (handle == NULL) return 0;
  if (s->live != LIVE_NONE && live_has(handle)) {
    char *out = args + s->out_offset[0];
    if (s->live == LIVE_IS_DELETED) {
      *(bool *)out = false;
    } else {
      void *ev = event_new(1, CODE_OK, NULL, 0, 1);
      if (ev == NULL) *err = &kOutOfMemoryError;
      memcpy(out, &ev, sizeof ev);
    }
    return 1;
  }
  return s->constant && const_write(s, args, const_entry(slot, handle), handle, slot);
}

/* The trampoline's answers for a released handle go (handles.release):
 * its constant getters' cached answers and its live-output entry. */
static void forget_handle(void *handle) {
  int k;
  for (k = 0; k < g_n_const_slots; k++) {
    int slot = g_const_slots[k];
    ConstEntry *e = const_entry(slot, handle);
    if (e->handle == handle && e->slot == (long)slot) const_clear(e);
  }
  live_drop(handle);
}

/* PJRT_Buffer_Destroy of a live output (set_registry): handles._objects and
 * the Buffer class. A live handle (g_live) names an output of Execute's
 * fast path that is not deleted, pinned or externally referenced
 * (buffer.py drops the entry on each of those) and has nothing to call
 * back when freed. */
static PyObject *g_registry = NULL;
static PyObject *g_buffer_type = NULL;
/* set_executable_class: Execute's fast path calls
 * executable.execute_fast(handles) itself when the handle names an object
 * of this class (one Python frame less than the slot's fast function). */
static PyObject *g_exe_type = NULL, *g_str_execute_fast = NULL;
static PyObject *g_str_nbytes = NULL, *g_str_device = NULL, *g_str_stats = NULL;

static int64_t *stats_of(PyObject *obj, Py_buffer *view);

/* Buffer.destroy's common case without running Python code: when the handle
 * is live and the registry's reference is the buffer's only one (nothing
 * can see its state change), the handle's answers go, its bytes leave the
 * device's allocation statistics and the registry lets go of it (the buffer
 * and its array are freed). 1 when done; 0, with nothing changed and no
 * exception set, for Python's destroy to do it. Under the GIL, with no
 * exception pending. */
static int destroy_live(void *handle) {
  PyObject *key, *obj, *nb = NULL, *dev = NULL, *stats = NULL;
  long long n;
  Py_buffer view;
  int64_t *st;
  int done = 0;
  if (g_registry == NULL || !live_has(handle)) return 0;
  key = PyLong_FromVoidPtr(handle);
  if (key == NULL) goto out;
  obj = PyDict_GetItemWithError(g_registry, key); /* borrowed */
  if (obj == NULL || (PyObject *)Py_TYPE(obj) != g_buffer_type || Py_REFCNT(obj) != 1) goto out;
  if ((nb = PyObject_GetAttr(obj, g_str_nbytes)) == NULL ||
      (dev = PyObject_GetAttr(obj, g_str_device)) == NULL ||
      (stats = PyObject_GetAttr(dev, g_str_stats)) == NULL)
    goto out;
  n = PyLong_AsLongLong(nb);
  if ((n == -1 && PyErr_Occurred()) || (st = stats_of(stats, &view)) == NULL) goto out;
  forget_handle(handle);
  st[0] -= n; /* stats_free */
  PyBuffer_Release(&view);
  /* The buffer's last reference: freeing it runs no Python code (a Buffer
   * and an ndarray), bar weak-reference callbacks, whose errors Python
   * reports as unraisable. */
  if (PyDict_DelItem(g_registry, key) != 0) PyErr_WriteUnraisable(key);
  done = 1;
out:
  if (!done) PyErr_Clear();
  Py_XDECREF(key);
  Py_XDECREF(nb);
  Py_XDECREF(dev);
  Py_XDECREF(stats);
  return done;
}

/* PJRT_LoadedExecutable_Execute's common case without ctypes: one device
 * (execute_device NULL), no send/recv callbacks, no non-donatable indices,
 * output list present. Calls fast(executable, (argument handles...)), which
 * returns (output handles, device handle, memory handles): the outputs are
 * written to output_lists[0] (their device and memory to the constant
 * getters' cache) and a ready event to device_complete_events[0] (an inline
 * run has finished). Returns 0, having
 * done nothing, when the call is not that case or fast returns None (the
 * handler then does all of it, checks and errors included); 1 when handled,
 * with *err set on failure. Called with the GIL held. */
static int fast_execute(Slot *s, char *args, PJRT_Error **err) {
  const size_t *o = s->fast_off;
  void *exe = read_ptr(args + o[FX_EXE]);
  const char *opts = (const char *)read_ptr(args + o[FX_OPTIONS]);
  void *const *const *lists = (void *const *const *)read_ptr(args + o[FX_LISTS]);
  size_t ndev = read_size(args + o[FX_NDEV]), nargs = read_size(args + o[FX_NARGS]), i;
  void **const *outs = (void **const *)read_ptr(args + o[FX_OUTS]);
  void **events = (void **)read_ptr(args + o[FX_EVENTS]);
  PyObject *handles, *exe_obj, *res, *out_handles, *memories;
  void *device;
  Py_ssize_t n;
  if (ndev != 1 || read_ptr(args + o[FX_DEVICE]) != NULL || nargs > FAST_MAX_ARGS ||
      outs == NULL || outs[0] == NULL || (nargs && (lists == NULL || lists[0] == NULL)))
    return 0;
  if (opts != NULL && (read_size(opts) < o[FX_OPT_SIZE] || read_size(opts + o[FX_OPT_SEND]) ||
                       read_size(opts + o[FX_OPT_RECV]) || read_size(opts + o[FX_OPT_NONDON])))
    return 0;
  handles = PyTuple_New((Py_ssize_t)nargs);
  if (handles == NULL) goto failed;
  for (i = 0; i < nargs; i++) {
    PyObject *h = PyLong_FromVoidPtr(lists[0][i]);
    if (h == NULL) {
      Py_DECREF(handles);
      goto failed;
    }
    PyTuple_SET_ITEM(handles, (Py_ssize_t)i, h);
  }
  exe_obj = PyLong_FromVoidPtr(exe);
  res = NULL;
  if (exe_obj != NULL) {
    PyObject *obj = g_exe_type != NULL ? PyDict_GetItemWithError(g_registry, exe_obj) : NULL;
    if (obj != NULL && (PyObject *)Py_TYPE(obj) == g_exe_type) {
      Py_INCREF(obj); /* (borrowed from the registry, which the call may change) */
      res = PyObject_CallMethodOneArg(obj, g_str_execute_fast, handles);
      Py_DECREF(obj);
    } else if (!PyErr_Occurred()) {
      res = PyObject_CallFunctionObjArgs(s->fast, exe_obj, handles, NULL);
    }
  }
  Py_XDECREF(exe_obj);
  Py_DECREF(handles);
  if (res == NULL) goto failed;
  if (res == Py_None) {
    Py_DECREF(res);
    return 0;
  }
  if (!PyTuple_Check(res) || PyTuple_GET_SIZE(res) != 3 ||
      !PyTuple_Check(out_handles = PyTuple_GET_ITEM(res, 0)) ||
      !PyTuple_Check(memories = PyTuple_GET_ITEM(res, 2)) ||
      PyTuple_GET_SIZE(memories) != PyTuple_GET_SIZE(out_handles)) {
    Py_DECREF(res);
    PyErr_SetString(PyExc_TypeError, "Execute's fast path must return None or "
                    "(outputs, device, memories)");
    goto failed;
  }
  device = PyLong_AsVoidPtr(PyTuple_GET_ITEM(res, 1));
  n = PyTuple_GET_SIZE(out_handles);
  for (i = 0; i < (size_t)n; i++) {
    void *h = PyLong_AsVoidPtr(PyTuple_GET_ITEM(out_handles, (Py_ssize_t)i));
    void *m = PyLong_AsVoidPtr(PyTuple_GET_ITEM(memories, (Py_ssize_t)i));
    if (PyErr_Occurred()) {
      Py_DECREF(res);
      goto failed;
    }
    outs[0][i] = h;
    if (h != NULL) live_add(h);
    const_remember(s->device_slot, h, device);
    const_remember(s->memory_slot, h, m);
  }
  Py_DECREF(res);
  if (events != NULL) {
    events[0] = event_new(1, CODE_OK, NULL, 0, 1);
    if (events[0] == NULL) *err = &kOutOfMemoryError;
  }
  return 1;
failed:
  *err = handler_error(s);
  return 1;
}

static PJRT_Error *dispatch(int slot, void *args) {
  Slot *s = &g_slots[slot];
  PJRT_Error *err = NULL;
  PyGILState_STATE gstate;
  PyObject *ptype, *pvalue, *ptb, *arg, *res;
  int foreign = 0;

  if (answer_without_python(slot, (char *)args, &err)) return err;
  if (python_gone() || (!PyGILState_Check() && !(foreign = foreign_enter()))) {
    /* Destroy-like calls at exit: leaking is the right thing to do. */
    if (s->quiet) return NULL;
    return error_new_cstr(CODE_UNAVAILABLE,
                          "stablehlo_pjrt: the Python interpreter hosting the "
                          "plugin is shutting down");
  }
  gstate = PyGILState_Ensure();
  /* The caller may hold the GIL with an exception pending; park it so the
   * handler runs in a clean state, and put it back afterwards. */
  PyErr_Fetch(&ptype, &pvalue, &ptb);
  /* A signal that arrived while jaxlib was in C++ (Ctrl-C during its part of
   * a compile or dispatch) would raise at the handler's first bytecode, in
   * the middle of a PJRT call; take it here, before the handler starts. */
  if (g_interrupt_hook != NULL && PyErr_CheckSignals() < 0) {
    res = pass_interrupt(s->name ? s->name : "");
    if (res == NULL) {
      err = error_from_exception(s->name);
      goto done;
    }
    if (PyUnicode_Check(res)) {
      Py_ssize_t len;
      const char *msg = PyUnicode_AsUTF8AndSize(res, &len);
      if (msg == NULL) {
        PyErr_Clear();
        err = error_new_cstr(CODE_CANCELLED, "stablehlo_ref: interrupted");
      } else {
        err = error_new(CODE_CANCELLED, msg, (size_t)len);
      }
      Py_DECREF(res);
      goto done;
    }
    Py_DECREF(res);
  }
  if (s->handler == NULL) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s is not implemented by the stablehlo_ref plugin",
             s->name ? s->name : "this PJRT function");
    err = error_new_cstr(CODE_UNIMPLEMENTED, buf);
  } else {
    int full = args != NULL && s->args_size && *(const size_t *)args >= s->args_size;
    if (full && s->fast != NULL && fast_execute(s, (char *)args, &err)) {
      /* done (err: its failure) */
    } else if (full && s->getter != NULL) {
      void *handle = *(void *const *)((const char *)args + s->in_offset);
      ConstEntry *e = s->constant && handle != NULL ? const_entry(slot, handle) : NULL;
      /* Live and cached answers were given before the GIL was taken
       * (answer_without_python); what reaches here asks Python, whose
       * answer is the same, and caches it (const_store below). */
      if (s->live == LIVE_DESTROY && handle != NULL && destroy_live(handle)) goto done;
      arg = PyLong_FromVoidPtr(handle);
      res = arg ? PyObject_CallOneArg(s->getter, arg) : NULL;
      Py_XDECREF(arg);
      if (res == NULL) {
        err = handler_error(s);
      } else {
        if (write_getter_outputs(s, (char *)args, res) != 0) {
          err = error_from_exception(s->name);
        } else if (e != NULL) {
          uint64_t v[MAX_GETTER_OUTS];
          int i;
          for (i = 0; i < s->n_outs; i++) {
            v[i] = 0;
            memcpy(&v[i], (char *)args + s->out_offset[i], (size_t)s->out_size[i]);
          }
          const_store(e, handle, slot, v, s->n_outs);
        }
        Py_DECREF(res);
      }
    } else {
      PyObject *fn = full && s->direct != NULL ? s->direct : s->handler;
      arg = PyLong_FromVoidPtr(args);
      res = arg ? PyObject_CallOneArg(fn, arg) : NULL;
      Py_XDECREF(arg);
      if (res == NULL) {
        err = handler_error(s);
      } else {
        if (res != Py_None) {
          /* A handler may also return a PJRT_Error* it built itself. */
          err = (PJRT_Error *)PyLong_AsVoidPtr(res);
          if (err == NULL && PyErr_Occurred()) err = error_from_exception(s->name);
        }
        Py_DECREF(res);
      }
    }
  }
done:
  PyErr_Restore(ptype, pvalue, ptb);
  PyGILState_Release(gstate);
  if (foreign) foreign_leave();
  return err;
}

/* Trace records for the C-implemented functions (events).  Only when a trace
 * hook is installed; failures of the hook are swallowed (tracing must never
 * change behaviour). */
static void trace_c_call(const char *name, void *obj) {
  PyGILState_STATE gstate;
  PyObject *ptype, *pvalue, *ptb, *res;
  int foreign = 0;
  if (g_trace_hook == NULL || python_gone() || (!PyGILState_Check() && !(foreign = foreign_enter())))
    return;
  gstate = PyGILState_Ensure();
  if (g_trace_hook != NULL) {
    PyErr_Fetch(&ptype, &pvalue, &ptb);
    res = PyObject_CallFunction(g_trace_hook, "sN", name, PyLong_FromVoidPtr(obj));
    if (res == NULL) PyErr_Clear();
    Py_XDECREF(res);
    PyErr_Restore(ptype, pvalue, ptb);
  }
  PyGILState_Release(gstate);
  if (foreign) foreign_leave();
}

#define T1(i) static PJRT_Error *tramp_##i(void *a) { return dispatch(i, a); }
/* Slots 0..191 as tramp_0 .. tramp_191: R10(p) spells p0 .. p9. */
#define R10(p) T1(p##0) T1(p##1) T1(p##2) T1(p##3) T1(p##4) T1(p##5) T1(p##6) T1(p##7) T1(p##8) T1(p##9)
T1(0) T1(1) T1(2) T1(3) T1(4) T1(5) T1(6) T1(7) T1(8) T1(9)
R10(1) R10(2) R10(3) R10(4) R10(5) R10(6) R10(7) R10(8) R10(9)
R10(10) R10(11) R10(12) R10(13) R10(14) R10(15) R10(16) R10(17) R10(18)
T1(190) T1(191)

#define A1(i) (void *)tramp_##i,
#define A10(p) A1(p##0) A1(p##1) A1(p##2) A1(p##3) A1(p##4) A1(p##5) A1(p##6) A1(p##7) A1(p##8) A1(p##9)
static void *const g_trampolines[MAX_SLOTS] = {
    A1(0) A1(1) A1(2) A1(3) A1(4) A1(5) A1(6) A1(7) A1(8) A1(9)
    A10(1) A10(2) A10(3) A10(4) A10(5) A10(6) A10(7) A10(8) A10(9)
    A10(10) A10(11) A10(12) A10(13) A10(14) A10(15) A10(16) A10(17) A10(18)
    A1(190) A1(191)};

/* ------------------------------------------------------------------------ */
/* Python module functions                                                  */
/* ------------------------------------------------------------------------ */

static PyObject *py_set_slot(PyObject *self, PyObject *args, PyObject *kwargs) {
  static char *kwlist[] = {"index", "name", "handler", "quiet", "direct", "args_size",
                           "getter", "in_offset", "outs", "constant", "fast", "fast_offsets",
                           "device_slot", "memory_slot", "live", NULL};
  int slot, quiet, n_outs = 0, i, constant = 0, device_slot = -1, memory_slot = -1;
  int live = LIVE_NONE;
  const char *name;
  PyObject *handler, *direct = Py_None, *getter = Py_None, *outs = NULL, *fast = Py_None;
  PyObject *fast_offsets = NULL;
  Py_ssize_t args_size = 0, in_offset = 0;
  size_t out_offset[MAX_GETTER_OUTS] = {0};
  int out_size[MAX_GETTER_OUTS] = {0};
  size_t fast_off[FAST_FIELDS] = {0};
  (void)self;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "isOp|OnOnOpOOiii", kwlist, &slot, &name,
                                   &handler, &quiet, &direct, &args_size, &getter, &in_offset,
                                   &outs, &constant, &fast, &fast_offsets, &device_slot,
                                   &memory_slot, &live))
    return NULL;
  if (device_slot < -1 || device_slot >= MAX_SLOTS || memory_slot < -1 ||
      memory_slot >= MAX_SLOTS) {
    PyErr_SetString(PyExc_IndexError, "device_slot/memory_slot out of range");
    return NULL;
  }
  if (fast != Py_None) {
    /* fast_offsets: FAST_FIELDS sizes and offsets (the enum's order); the
     * args fields inside args_size. */
    if (!PyCallable_Check(fast) || fast_offsets == NULL || !PyTuple_Check(fast_offsets) ||
        PyTuple_GET_SIZE(fast_offsets) != FAST_FIELDS || args_size <= 0) {
      PyErr_SetString(PyExc_ValueError, "fast needs a callable, args_size and the offsets");
      return NULL;
    }
    for (i = 0; i < FAST_FIELDS; i++) {
      Py_ssize_t v = PyLong_AsSsize_t(PyTuple_GET_ITEM(fast_offsets, i));
      if (v < 0) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "negative offset");
        return NULL;
      }
      if (i < FX_OPT_SIZE && (size_t)v + sizeof(void *) > (size_t)args_size) {
        PyErr_SetString(PyExc_ValueError, "an Execute field outside the args struct");
        return NULL;
      }
      if (i > FX_OPT_SIZE && (size_t)v + sizeof(size_t) > fast_off[FX_OPT_SIZE]) {
        PyErr_SetString(PyExc_ValueError, "an ExecuteOptions field past its struct_size");
        return NULL;
      }
      fast_off[i] = (size_t)v;
    }
  }
  if (slot < 0 || slot >= MAX_SLOTS) {
    PyErr_Format(PyExc_IndexError, "slot %d out of range (max %d)", slot, MAX_SLOTS);
    return NULL;
  }
  if ((handler != Py_None && !PyCallable_Check(handler)) ||
      (direct != Py_None && !PyCallable_Check(direct)) ||
      (getter != Py_None && !PyCallable_Check(getter))) {
    PyErr_SetString(PyExc_TypeError, "handler, direct and getter must be callable or None");
    return NULL;
  }
  if (args_size < 0 || in_offset < 0) {
    PyErr_SetString(PyExc_ValueError, "args_size and in_offset must be >= 0");
    return NULL;
  }
  if (getter != Py_None) {
    /* outs: ((offset, size), ...), each field inside the args struct. */
    if (outs == NULL || !PyTuple_Check(outs) || PyTuple_GET_SIZE(outs) > MAX_GETTER_OUTS ||
        (size_t)in_offset + sizeof(void *) > (size_t)args_size) {
      PyErr_SetString(PyExc_ValueError, "a getter needs 0-2 outs and in_offset inside args_size");
      return NULL;
    }
    n_outs = (int)PyTuple_GET_SIZE(outs);
    if (live != LIVE_NONE && n_outs != (live == LIVE_DESTROY ? 0 : 1)) {
      PyErr_SetString(PyExc_ValueError, "a live getter writes one field (a Destroy none)");
      return NULL;
    }
    for (i = 0; i < n_outs; i++) {
      Py_ssize_t off;
      int size;
      if (!PyArg_ParseTuple(PyTuple_GET_ITEM(outs, i), "ni", &off, &size)) return NULL;
      if (off < 0 || (size != 1 && size != 4 && size != 8) ||
          (size_t)off + (size_t)size > (size_t)args_size) {
        PyErr_SetString(PyExc_ValueError, "getter out field outside the args struct");
        return NULL;
      }
      out_offset[i] = (size_t)off;
      out_size[i] = size;
    }
  }
  {
    char *copy = strdup(name);
    Slot *s = &g_slots[slot];
    PyObject *old = s->handler, *old_direct = s->direct, *old_getter = s->getter;
    PyObject *old_fast = s->fast;
    if (copy == NULL) return PyErr_NoMemory();
    /* Answers cached for the previous wiring go (a rare event: tracing
     * switched, a fault installed). */
    memset(g_const_cache, 0, sizeof g_const_cache);
    if (live < LIVE_NONE || live > LIVE_DESTROY) {
      free(copy);
      PyErr_SetString(PyExc_ValueError,
                      "live must be 0, 1 (IsDeleted), 2 (ReadyEvent) or 3 (Destroy)");
      return NULL;
    }
    if (live == LIVE_IS_DELETED ? out_size[0] != 1 : live == LIVE_READY_EVENT && out_size[0] != 8) {
      free(copy);
      PyErr_SetString(PyExc_ValueError, "a live getter's field is a bool (IsDeleted) or a "
                      "pointer (ReadyEvent)");
      return NULL;
    }
    s->live = getter != Py_None ? live : LIVE_NONE;
    s->constant = constant && getter != Py_None;
    s->fast = fast == Py_None ? NULL : (Py_INCREF(fast), fast);
    memcpy(s->fast_off, fast_off, sizeof fast_off);
    s->device_slot = device_slot;
    s->memory_slot = memory_slot;
    free(s->name);
    s->name = copy;
    s->quiet = quiet;
    s->handler = handler == Py_None ? NULL : (Py_INCREF(handler), handler);
    s->direct = direct == Py_None ? NULL : (Py_INCREF(direct), direct);
    s->getter = getter == Py_None ? NULL : (Py_INCREF(getter), getter);
    s->args_size = (size_t)args_size;
    s->in_offset = (size_t)in_offset;
    s->n_outs = n_outs;
    for (i = 0; i < MAX_GETTER_OUTS; i++) {
      s->out_offset[i] = out_offset[i];
      s->out_size[i] = out_size[i];
    }
    Py_XDECREF(old);
    Py_XDECREF(old_direct);
    Py_XDECREF(old_getter);
    Py_XDECREF(old_fast);
    g_n_const_slots = 0;
    for (i = 0; i < MAX_SLOTS; i++)
      if (g_slots[i].constant) g_const_slots[g_n_const_slots++] = i;
  }
  return PyLong_FromVoidPtr(g_trampolines[slot]);
}

static PyObject *py_c_functions(PyObject *self, PyObject *noargs) {
  (void)self; (void)noargs;
  return Py_BuildValue(
      "{s:N,s:N,s:N,s:N,s:N,s:N,s:N,s:N,s:N,s:N,s:N}",
      "PJRT_Error_Destroy", PyLong_FromVoidPtr((void *)api_error_destroy),
      "PJRT_Error_Message", PyLong_FromVoidPtr((void *)api_error_message),
      "PJRT_Error_GetCode", PyLong_FromVoidPtr((void *)api_error_get_code),
      "PJRT_Error_ForEachPayload", PyLong_FromVoidPtr((void *)api_error_for_each_payload),
      "PJRT_Event_Destroy", PyLong_FromVoidPtr((void *)api_event_destroy),
      "PJRT_Event_IsReady", PyLong_FromVoidPtr((void *)api_event_is_ready),
      "PJRT_Event_Error", PyLong_FromVoidPtr((void *)api_event_error),
      "PJRT_Event_Await", PyLong_FromVoidPtr((void *)api_event_await),
      "PJRT_Event_OnReady", PyLong_FromVoidPtr((void *)api_event_on_ready),
      "PJRT_Event_Create", PyLong_FromVoidPtr((void *)api_event_create),
      "PJRT_Event_Set", PyLong_FromVoidPtr((void *)api_event_set));
}

static PyObject *py_api_address(PyObject *self, PyObject *noargs) {
  (void)self; (void)noargs;
  return Py_BuildValue("(Nn)", PyLong_FromVoidPtr(g_api), (Py_ssize_t)API_STORAGE_BYTES);
}

static PyObject *py_mark_api_ready(PyObject *self, PyObject *noargs) {
  (void)self; (void)noargs;
  g_api_ready = 1;
  Py_RETURN_NONE;
}

static PyObject *py_api_capsule(PyObject *self, PyObject *noargs) {
  (void)self; (void)noargs;
  if (!g_api_ready) {
    PyErr_SetString(PyExc_RuntimeError, "the PJRT API table has not been built yet");
    return NULL;
  }
  return PyCapsule_New((void *)g_api, "pjrt_c_api", NULL);
}

static PyObject *py_error_new(PyObject *self, PyObject *args) {
  int code;
  const char *msg;
  Py_ssize_t len;
  (void)self;
  if (!PyArg_ParseTuple(args, "is#", &code, &msg, &len)) return NULL;
  return PyLong_FromVoidPtr(error_new(code, msg, (size_t)len));
}

/* The pointer an int argument of the Python module holds: 0 when the
 * argument is not an int that fits a pointer (the Python error set), 1 when
 * it is (*out may be NULL for 0). */
static int pointer_arg(PyObject *arg, void **out) {
  *out = PyLong_AsVoidPtr(arg);
  return *out != NULL || !PyErr_Occurred();
}

/* The same, where NULL is refused: a ValueError naming `what`. */
static void *nonnull_arg(PyObject *arg, const char *what) {
  void *p = PyLong_AsVoidPtr(arg);
  if (p == NULL && !PyErr_Occurred()) PyErr_Format(PyExc_ValueError, "NULL %s", what);
  return p;
}

static PyObject *py_error_info(PyObject *self, PyObject *arg) {
  void *p;
  const PJRT_Error *e;
  (void)self;
  if (!pointer_arg(arg, &p)) return NULL;
  if (p == NULL) Py_RETURN_NONE;
  e = (const PJRT_Error *)p;
  return Py_BuildValue("(is#)", e->code, e->message, (Py_ssize_t)e->message_size);
}

static PyObject *py_error_destroy(PyObject *self, PyObject *arg) {
  void *e;
  (void)self;
  if (!pointer_arg(arg, &e)) return NULL;
  error_free((PJRT_Error *)e);
  Py_RETURN_NONE;
}

/* event_new(ready, code=0, message="") -> address.  A ready event belongs to
 * the caller.  A pending one (ready=False) carries an extra reference owned
 * by the plugin, dropped by event_set(). */
static PyObject *py_event_new(PyObject *self, PyObject *args) {
  int ready = 1, code = 0;
  const char *msg = NULL;
  Py_ssize_t len = 0;
  PJRT_Event *ev;
  (void)self;
  if (!PyArg_ParseTuple(args, "|pis#", &ready, &code, &msg, &len)) return NULL;
  ev = event_new(ready, ready ? code : 0, msg, (size_t)len, ready ? 1 : 2);
  if (ev == NULL) return PyErr_NoMemory();
  return PyLong_FromVoidPtr(ev);
}

static PyObject *py_event_set(PyObject *self, PyObject *args) {
  PyObject *addr;
  int code = 0;
  const char *msg = NULL;
  Py_ssize_t len = 0;
  PJRT_Event *ev;
  int rc;
  (void)self;
  if (!PyArg_ParseTuple(args, "O|is#", &addr, &code, &msg, &len)) return NULL;
  ev = (PJRT_Event *)nonnull_arg(addr, "event");
  if (ev == NULL) return NULL;
  /* Callbacks are jaxlib code; run them without the GIL. */
  Py_BEGIN_ALLOW_THREADS
  rc = event_set(ev, code, msg, (size_t)len);
  Py_END_ALLOW_THREADS
  event_unref(ev); /* the plugin's reference */
  if (rc != 0) {
    PyErr_SetString(PyExc_RuntimeError, "event was already set");
    return NULL;
  }
  Py_RETURN_NONE;
}

static PyObject *py_event_state(PyObject *self, PyObject *arg) {
  PJRT_Event *ev = (PJRT_Event *)nonnull_arg(arg, "event");
  PyObject *r;
  (void)self;
  if (ev == NULL) return NULL;
  pthread_mutex_lock(&ev->mu);
  r = Py_BuildValue("(iis)", ev->ready, ev->code, ev->message ? ev->message : "");
  pthread_mutex_unlock(&ev->mu);
  return r;
}

static PyObject *py_memory_new(PyObject *self, PyObject *noargs) {
  PJRT_Memory *m;
  (void)self; (void)noargs;
  m = (PJRT_Memory *)calloc(1, sizeof(PJRT_Memory));
  if (m == NULL) return PyErr_NoMemory();
  m->vtable = &kMemoryVtable;
  pthread_mutex_init(&m->mu, NULL);
  /* Memories live as long as the process: jaxlib caches wrappers in their
   * user data and may look them up until exit. */
  return PyLong_FromVoidPtr(m);
}

static PyObject *py_set_interrupt_hook(PyObject *self, PyObject *hook) {
  PyObject *old = g_interrupt_hook;
  (void)self;
  if (hook == Py_None) {
    g_interrupt_hook = NULL;
  } else {
    if (!PyCallable_Check(hook)) {
      PyErr_SetString(PyExc_TypeError, "interrupt hook must be callable or None");
      return NULL;
    }
    Py_INCREF(hook);
    g_interrupt_hook = hook;
  }
  Py_XDECREF(old);
  Py_RETURN_NONE;
}

static PyObject *py_set_trace_hook(PyObject *self, PyObject *hook) {
  PyObject *old = g_trace_hook;
  (void)self;
  if (hook == Py_None) {
    g_trace_hook = NULL;
  } else {
    if (!PyCallable_Check(hook)) {
      PyErr_SetString(PyExc_TypeError, "trace hook must be callable or None");
      return NULL;
    }
    Py_INCREF(hook);
    g_trace_hook = hook;
  }
  Py_XDECREF(old);
  Py_RETURN_NONE;
}

/* Byte blobs handed to the caller together with a deleter (serialized
 * executables, device assignments, topologies, compile options). */
typedef struct { size_t size; char data[]; } Blob;

static void blob_free(void *blob) { free(blob); }
static void noop_deleter(void *p) { (void)p; }

static PyObject *py_blob_new(PyObject *self, PyObject *arg) {
  Py_buffer view;
  Blob *b;
  (void)self;
  if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) != 0) return NULL;
  b = (Blob *)malloc(sizeof(Blob) + (size_t)view.len + 1);
  if (b == NULL) {
    PyBuffer_Release(&view);
    return PyErr_NoMemory();
  }
  b->size = (size_t)view.len;
  memcpy(b->data, view.buf, (size_t)view.len);
  b->data[view.len] = '\0';
  PyBuffer_Release(&view);
  return PyLong_FromVoidPtr(b);
}

static PyObject *py_blob_data(PyObject *self, PyObject *arg) {
  Blob *b = (Blob *)nonnull_arg(arg, "blob");
  (void)self;
  if (b == NULL) return NULL;
  return PyLong_FromVoidPtr(b->data);
}

/* read_pointer_lists(lists, n_lists, n_each) -> [[address, ...], ...]: the
 * n_each pointers of each of the n_lists arrays that `lists` points to (the
 * argument lists of PJRT_LoadedExecutable_Execute), as ints (0 for NULL).
 * One C loop instead of a ctypes array type per list on every Execute. */
static PyObject *py_read_pointer_lists(PyObject *self, PyObject *args) {
  PyObject *addr, *out, *row;
  Py_ssize_t n_lists, n_each, i, j;
  void *const *lists;
  (void)self;
  if (!PyArg_ParseTuple(args, "Onn", &addr, &n_lists, &n_each)) return NULL;
  if (n_lists < 0 || n_each < 0) {
    PyErr_SetString(PyExc_ValueError, "negative count");
    return NULL;
  }
  lists = (void *const *)PyLong_AsVoidPtr(addr);
  if (lists == NULL && PyErr_Occurred()) return NULL;
  if (lists == NULL && n_lists) {
    PyErr_SetString(PyExc_ValueError, "NULL list of pointer lists");
    return NULL;
  }
  out = PyList_New(n_lists);
  if (out == NULL) return NULL;
  for (i = 0; i < n_lists; i++) {
    void *const *items = (void *const *)lists[i];
    if (items == NULL && n_each) {
      Py_DECREF(out);
      PyErr_Format(PyExc_ValueError, "pointer list #%zd is NULL", i);
      return NULL;
    }
    row = PyList_New(n_each);
    if (row == NULL) {
      Py_DECREF(out);
      return NULL;
    }
    for (j = 0; j < n_each; j++) {
      PyObject *v = PyLong_FromVoidPtr(items[j]);
      if (v == NULL) {
        Py_DECREF(row);
        Py_DECREF(out);
        return NULL;
      }
      PyList_SET_ITEM(row, j, v);
    }
    PyList_SET_ITEM(out, i, row);
  }
  return out;
}

/* write_pointer_lists(lists, rows): writes row i (a sequence of ints) into
 * the pointer array lists[i] (Execute's output lists). */
static PyObject *py_write_pointer_lists(PyObject *self, PyObject *args) {
  PyObject *addr, *rows, *fast_rows, *fast;
  Py_ssize_t i, j, n;
  void **const *lists;
  (void)self;
  if (!PyArg_ParseTuple(args, "OO", &addr, &rows)) return NULL;
  lists = (void **const *)PyLong_AsVoidPtr(addr);
  if (lists == NULL && PyErr_Occurred()) return NULL;
  fast_rows = PySequence_Fast(rows, "rows must be a sequence");
  if (fast_rows == NULL) return NULL;
  n = PySequence_Fast_GET_SIZE(fast_rows);
  if (lists == NULL && n) {
    Py_DECREF(fast_rows);
    PyErr_SetString(PyExc_ValueError, "NULL list of pointer lists");
    return NULL;
  }
  for (i = 0; i < n; i++) {
    Py_ssize_t m;
    fast = PySequence_Fast(PySequence_Fast_GET_ITEM(fast_rows, i), "rows must hold sequences");
    if (fast == NULL) {
      Py_DECREF(fast_rows);
      return NULL;
    }
    m = PySequence_Fast_GET_SIZE(fast);
    if (m && lists[i] == NULL) {
      Py_DECREF(fast);
      Py_DECREF(fast_rows);
      PyErr_Format(PyExc_ValueError, "pointer list #%zd is NULL", i);
      return NULL;
    }
    for (j = 0; j < m; j++) {
      void *v = PyLong_AsVoidPtr(PySequence_Fast_GET_ITEM(fast, j));
      if (v == NULL && PyErr_Occurred()) {
        Py_DECREF(fast);
        Py_DECREF(fast_rows);
        return NULL;
      }
      lists[i][j] = v;
    }
    Py_DECREF(fast);
  }
  Py_DECREF(fast_rows);
  Py_RETURN_NONE;
}

/* ready_events(address, n): writes n new ready PJRT_Events (owned by the
 * caller) into the pointer array at `address` (Execute's
 * device_complete_events for an inline run). */
static PyObject *py_ready_events(PyObject *self, PyObject *args) {
  PyObject *addr;
  Py_ssize_t n, i;
  PJRT_Event **events;
  (void)self;
  if (!PyArg_ParseTuple(args, "On", &addr, &n)) return NULL;
  events = (PJRT_Event **)nonnull_arg(addr, "event array");
  if (events == NULL) return NULL;
  for (i = 0; i < n; i++) {
    events[i] = event_new(1, CODE_OK, NULL, 0, 1);
    if (events[i] == NULL) {
      while (i-- > 0) event_unref(events[i]);
      return PyErr_NoMemory();
    }
  }
  Py_RETURN_NONE;
}

/* forget(handle): the constant getters' cached answers for `handle` go (it
 * is released; the address may name another object later). */
static PyObject *py_forget(PyObject *self, PyObject *arg) {
  void *handle;
  (void)self;
  if (!pointer_arg(arg, &handle)) return NULL;
  if (handle != NULL) forget_handle(handle);
  Py_RETURN_NONE;
}

/* deleted(handle): a buffer is deleted (or donated): its IsDeleted and
 * ReadyEvent are no longer answered in C. */
static PyObject *py_deleted(PyObject *self, PyObject *arg) {
  void *handle;
  (void)self;
  if (!pointer_arg(arg, &handle)) return NULL;
  if (handle != NULL) live_drop(handle);
  Py_RETURN_NONE;
}

/* writable_c_contiguous(obj): whether obj exports writeable, C-contiguous
 * memory through the buffer protocol (an ndarray: flags.writeable and
 * flags.c_contiguous, read in one call without building numpy's flags
 * object, which Execute's fast path would do for every output). False
 * also when obj exports no buffer (ml_dtypes element types): the caller
 * then takes its full path. */
static PyObject *py_writable_c_contiguous(PyObject *self, PyObject *arg) {
  Py_buffer view;
  (void)self;
  if (PyObject_GetBuffer(arg, &view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) != 0) {
    PyErr_Clear();
    Py_RETURN_FALSE;
  }
  PyBuffer_Release(&view);
  Py_RETURN_TRUE;
}

/* Device allocation statistics (device.py): a writable buffer of four
 * int64 [bytes in use, peak bytes in use, allocations, largest allocation],
 * updated in one C call each. Called with the GIL held and running no
 * Python code, each update is atomic with respect to every other Python
 * thread, which a Python method needed a lock for (two of them per call on
 * Execute's fast path, a tenth of its Python time). */
static int64_t *stats_of(PyObject *obj, Py_buffer *view) {
  if (PyObject_GetBuffer(obj, view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) != 0) return NULL;
  if (view->len < (Py_ssize_t)(4 * sizeof(int64_t)) || ((uintptr_t)view->buf % sizeof(int64_t))) {
    PyBuffer_Release(view);
    PyErr_SetString(PyExc_ValueError, "allocation statistics: expected a writable, aligned "
                    "buffer of four int64");
    return NULL;
  }
  return (int64_t *)view->buf;
}

/* stats_alloc(stats, nbytes): one allocation of nbytes. */
static PyObject *py_stats_alloc(PyObject *self, PyObject *args) {
  PyObject *obj;
  long long n;
  Py_buffer view;
  int64_t *st;
  (void)self;
  if (!PyArg_ParseTuple(args, "OL:stats_alloc", &obj, &n)) return NULL;
  if ((st = stats_of(obj, &view)) == NULL) return NULL;
  st[0] += n;
  st[2] += 1;
  if (st[0] > st[1]) st[1] = st[0];
  if (n > st[3]) st[3] = n;
  PyBuffer_Release(&view);
  Py_RETURN_NONE;
}

/* stats_free(stats, nbytes): nbytes released. */
static PyObject *py_stats_free(PyObject *self, PyObject *args) {
  PyObject *obj;
  long long n;
  Py_buffer view;
  int64_t *st;
  (void)self;
  if (!PyArg_ParseTuple(args, "OL:stats_free", &obj, &n)) return NULL;
  if ((st = stats_of(obj, &view)) == NULL) return NULL;
  st[0] -= n;
  PyBuffer_Release(&view);
  Py_RETURN_NONE;
}

/* stats_read(stats, clear): the four values as a tuple; with clear true,
 * then the peak drops to what is in use and the counts to 0
 * (PJRT_Device_ClearMemoryStats). */
static PyObject *py_stats_read(PyObject *self, PyObject *args) {
  PyObject *obj, *res;
  int clear = 0;
  Py_buffer view;
  int64_t *st;
  (void)self;
  if (!PyArg_ParseTuple(args, "O|p:stats_read", &obj, &clear)) return NULL;
  if ((st = stats_of(obj, &view)) == NULL) return NULL;
  res = Py_BuildValue("(LLLL)", (long long)st[0], (long long)st[1], (long long)st[2],
                      (long long)st[3]);
  if (res != NULL && clear) {
    st[1] = st[0];
    st[2] = 0;
    st[3] = 0;
  }
  PyBuffer_Release(&view);
  return res;
}

/* set_registry(objects, buffer_class): what destroy_live needs: the handle
 * registry (a dict) and the class of the buffers it may free. */
static PyObject *py_set_registry(PyObject *self, PyObject *args) {
  PyObject *objects, *cls;
  (void)self;
  if (!PyArg_ParseTuple(args, "O!O!:set_registry", &PyDict_Type, &objects, &PyType_Type, &cls))
    return NULL;
  if (g_str_nbytes == NULL && ((g_str_nbytes = PyUnicode_InternFromString("nbytes")) == NULL ||
                               (g_str_device = PyUnicode_InternFromString("device")) == NULL ||
                               (g_str_stats = PyUnicode_InternFromString("stats")) == NULL))
    return NULL;
  Py_INCREF(objects);
  Py_INCREF(cls);
  Py_XSETREF(g_registry, objects);
  Py_XSETREF(g_buffer_type, cls);
  Py_RETURN_NONE;
}

/* The output buffers of Execute's fast path (Buffer.finished_output):
 * set_output_template(template) gives a Buffer whose slots hold what
 * __init__ puts in an owned, ready output; new_output copies them into a
 * new object of its class and sets the ones that vary. */
enum { OUT_HANDLE, OUT_ARRAY, OUT_TYPE, OUT_SHAPE, OUT_DEVICE, OUT_MEMORY, OUT_NBYTES,
       OUT_SLOTS };
static const char *const kOutSlotNames[OUT_SLOTS] = {"handle", "array",  "type",  "shape",
                                                     "device", "memory", "nbytes"};
static PyObject *g_out_template = NULL, *g_str_shape = NULL;
static Py_ssize_t g_out_off[OUT_SLOTS];

static PyObject *py_set_output_template(PyObject *self, PyObject *template) {
  PyTypeObject *tp = Py_TYPE(template);
  Py_ssize_t off[OUT_SLOTS];
  PyMemberDef *m;
  int k;
  (void)self;
  if (g_registry == NULL || (PyObject *)tp != g_buffer_type) {
    PyErr_SetString(PyExc_TypeError, "set_output_template needs a Buffer (after set_registry)");
    return NULL;
  }
  for (k = 0; k < OUT_SLOTS; k++) off[k] = -1;
  for (m = tp->tp_members; m != NULL && m->name != NULL; m++) {
    /* Every slot is copied as a plain object reference. */
    if (m->type != T_OBJECT_EX || (m->flags & READONLY)) {
      PyErr_Format(PyExc_TypeError, "set_output_template: slot %s is not a plain slot",
                   m->name);
      return NULL;
    }
    for (k = 0; k < OUT_SLOTS; k++)
      if (strcmp(m->name, kOutSlotNames[k]) == 0) off[k] = m->offset;
  }
  for (k = 0; k < OUT_SLOTS; k++) {
    if (off[k] < 0) {
      PyErr_Format(PyExc_TypeError, "set_output_template: no slot %s", kOutSlotNames[k]);
      return NULL;
    }
  }
  if (g_str_shape == NULL && (g_str_shape = PyUnicode_InternFromString("shape")) == NULL)
    return NULL;
  memcpy(g_out_off, off, sizeof off);
  Py_INCREF(template);
  Py_XSETREF(g_out_template, template);
  Py_RETURN_NONE;
}

#define SLOT_AT(obj, off) (*(PyObject **)((char *)(obj) + (off)))

/* new_output(array, buffer_type, device, memory, nbytes): the handle of a
 * new Buffer owning ``array`` (a ready output), registered, its bytes in
 * the device's statistics: Buffer.finished_output in one C call. */
static PyObject *py_new_output(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  PyTypeObject *tp;
  PyObject *obj, *shape, *stats, *handle;
  PyMemberDef *m;
  Py_buffer view;
  int64_t *st;
  long long n;
  int k;
  (void)self;
  if (nargs != 5) {
    PyErr_SetString(PyExc_TypeError, "new_output takes 5 arguments");
    return NULL;
  }
  if (g_out_template == NULL) {
    PyErr_SetString(PyExc_RuntimeError, "new_output needs set_output_template first");
    return NULL;
  }
  n = PyLong_AsLongLong(args[4]);
  if (n == -1 && PyErr_Occurred()) return NULL;
  if ((shape = PyObject_GetAttr(args[0], g_str_shape)) == NULL) return NULL;
  if ((stats = PyObject_GetAttr(args[2], g_str_stats)) == NULL) {
    Py_DECREF(shape);
    return NULL;
  }
  st = stats_of(stats, &view);
  Py_DECREF(stats);
  if (st == NULL) {
    Py_DECREF(shape);
    return NULL;
  }
  tp = Py_TYPE(g_out_template);
  obj = tp->tp_alloc(tp, 0);
  if (obj == NULL) {
    PyBuffer_Release(&view);
    Py_DECREF(shape);
    return NULL;
  }
  for (m = tp->tp_members; m->name != NULL; m++) {
    PyObject *v = SLOT_AT(g_out_template, m->offset);
    Py_XINCREF(v);
    SLOT_AT(obj, m->offset) = v;
  }
  handle = PyLong_FromVoidPtr(obj);
  {
    PyObject *vals[OUT_SLOTS] = {handle, args[0], args[1], shape, args[2], args[3], args[4]};
    for (k = 0; k < OUT_SLOTS; k++) {
      PyObject *old = SLOT_AT(obj, g_out_off[k]);
      Py_XINCREF(vals[k]);
      SLOT_AT(obj, g_out_off[k]) = vals[k];
      Py_XDECREF(old);
    }
  }
  Py_DECREF(shape);
  if (handle == NULL || PyDict_SetItem(g_registry, handle, obj) != 0) {
    PyBuffer_Release(&view);
    Py_XDECREF(handle);
    Py_DECREF(obj);
    return NULL;
  }
  Py_DECREF(obj); /* the registry's reference keeps it */
  st[0] += n;     /* stats_alloc */
  st[2] += 1;
  if (st[0] > st[1]) st[1] = st[0];
  if (n > st[3]) st[3] = n;
  PyBuffer_Release(&view);
  return handle;
}

/* set_executable_class(cls): the class whose objects' execute_fast method
 * Execute's fast path calls directly (needs set_registry's registry). */
static PyObject *py_set_executable_class(PyObject *self, PyObject *arg) {
  (void)self;
  if (!PyType_Check(arg)) {
    PyErr_SetString(PyExc_TypeError, "set_executable_class needs a class");
    return NULL;
  }
  if (g_registry == NULL) {
    PyErr_SetString(PyExc_RuntimeError, "set_executable_class needs set_registry first");
    return NULL;
  }
  if (g_str_execute_fast == NULL &&
      (g_str_execute_fast = PyUnicode_InternFromString("execute_fast")) == NULL)
    return NULL;
  Py_INCREF(arg);
  Py_XSETREF(g_exe_type, arg);
  Py_RETURN_NONE;
}

/* is_live(handle): whether C answers the buffer's IsDeleted/ReadyEvent (tests). */
static PyObject *py_is_live(PyObject *self, PyObject *arg) {
  void *handle;
  (void)self;
  if (!pointer_arg(arg, &handle)) return NULL;
  return PyBool_FromLong(handle != NULL && live_has(handle));
}

static PyObject *py_c_helpers(PyObject *self, PyObject *noargs) {
  (void)self; (void)noargs;
  return Py_BuildValue("{s:N,s:N}",
                       "blob_free", PyLong_FromVoidPtr((void *)blob_free),
                       "noop_deleter", PyLong_FromVoidPtr((void *)noop_deleter));
}

/* begin_exit(timeout_s=5.0) -> calls still in progress: from now on threads
 * without the GIL are no longer served (see g_exiting); waits, with the GIL
 * released, up to timeout_s for those already inside a call (some waiting
 * for the GIL) to leave. */
static PyObject *py_begin_exit(PyObject *self, PyObject *args) {
  double timeout = 5.0, waited = 0.0;
  int left;
  (void)self;
  if (!PyArg_ParseTuple(args, "|d", &timeout)) return NULL;
  __atomic_store_n(&g_exiting, 1, __ATOMIC_SEQ_CST);
  while ((left = __atomic_load_n(&g_foreign_calls, __ATOMIC_SEQ_CST)) > 0 && waited < timeout) {
    Py_BEGIN_ALLOW_THREADS
    usleep(1000);
    Py_END_ALLOW_THREADS
    waited += 0.001;
  }
  return PyLong_FromLong(left);
}

static PyObject *py_call_slot(PyObject *self, PyObject *args) {
  /* Calls table slot `slot` through its C function pointer, as jaxlib would.
   * Used by tests to exercise the trampolines without JAX. */
  int slot;
  PyObject *addr;
  void *p;
  PJRT_Error *err;
  PJRT_Error *(*fn)(void *);
  (void)self;
  if (!PyArg_ParseTuple(args, "iO", &slot, &addr)) return NULL;
  if (slot < 0 || slot >= MAX_SLOTS) {
    PyErr_SetString(PyExc_IndexError, "slot out of range");
    return NULL;
  }
  p = PyLong_AsVoidPtr(addr);
  if (p == NULL && PyErr_Occurred()) return NULL;
  fn = (PJRT_Error * (*)(void *)) g_trampolines[slot];
  err = fn(p);
  if (err == NULL) Py_RETURN_NONE;
  return PyLong_FromVoidPtr(err);
}

static PyObject *py_call_slot_with_pending_error(PyObject *self, PyObject *args) {
  /* Like call_slot, but with a Python exception pending during the call, as
   * jaxlib does when it frees a temporary after a failed Execute.  Returns
   * (error address or None, whether the pending exception survived). */
  int slot, survived;
  PyObject *addr, *type, *value, *tb;
  void *p;
  PJRT_Error *err;
  PJRT_Error *(*fn)(void *);
  (void)self;
  if (!PyArg_ParseTuple(args, "iO", &slot, &addr)) return NULL;
  if (slot < 0 || slot >= MAX_SLOTS) {
    PyErr_SetString(PyExc_IndexError, "slot out of range");
    return NULL;
  }
  p = PyLong_AsVoidPtr(addr);
  if (p == NULL && PyErr_Occurred()) return NULL;
  fn = (PJRT_Error * (*)(void *)) g_trampolines[slot];
  PyErr_SetString(PyExc_KeyError, "pending-marker");
  err = fn(p);
  PyErr_Fetch(&type, &value, &tb);
  survived = type == PyExc_KeyError && value != NULL;
  if (survived) {
    PyObject *text = PyObject_Str(value);
    survived = text != NULL && PyUnicode_CompareWithASCIIString(text, "pending-marker") == 0;
    Py_XDECREF(text);
    PyErr_Clear();
  }
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(tb);
  if (err == NULL) return Py_BuildValue("(OO)", Py_None, survived ? Py_True : Py_False);
  return Py_BuildValue("(NO)", PyLong_FromVoidPtr(err), survived ? Py_True : Py_False);
}

static PyMethodDef kMethods[] = {
    {"stats_alloc", py_stats_alloc, METH_VARARGS, NULL},
    {"stats_free", py_stats_free, METH_VARARGS, NULL},
    {"stats_read", py_stats_read, METH_VARARGS, NULL},
    {"set_slot", (PyCFunction)(void (*)(void))py_set_slot, METH_VARARGS | METH_KEYWORDS,
     "set_slot(index, name, handler, quiet, direct=None, args_size=0, getter=None, "
     "in_offset=0, outs=(), constant=False, fast=None, fast_offsets=None, device_slot=-1, "
     "memory_slot=-1, live=0) -> trampoline address"},
    {"c_functions", py_c_functions, METH_NOARGS,
     "Addresses of the PJRT functions implemented in C."},
    {"api_address", py_api_address, METH_NOARGS,
     "(address, size) of the static PJRT_Api storage."},
    {"mark_api_ready", py_mark_api_ready, METH_NOARGS, "Marks the table filled."},
    {"api_capsule", py_api_capsule, METH_NOARGS,
     "PyCapsule named 'pjrt_c_api' wrapping the PJRT_Api table."},
    {"error_new", py_error_new, METH_VARARGS, "error_new(code, message) -> PJRT_Error*"},
    {"error_info", py_error_info, METH_O, "error_info(ptr) -> (code, message) or None"},
    {"error_destroy", py_error_destroy, METH_O, "Frees a PJRT_Error*."},
    {"event_new", py_event_new, METH_VARARGS,
     "event_new(ready=True, code=0, message='') -> PJRT_Event*"},
    {"event_set", py_event_set, METH_VARARGS,
     "event_set(ptr, code=0, message='') completes a pending event."},
    {"event_state", py_event_state, METH_O, "event_state(ptr) -> (ready, code, message)"},
    {"memory_new", py_memory_new, METH_NOARGS, "Allocates a PJRT_Memory with its vtable."},
    {"set_trace_hook", py_set_trace_hook, METH_O, "Hook called as hook(name, ptr)."},
    {"set_interrupt_hook", py_set_interrupt_hook, METH_O,
     "Hook called as hook(slot_name, exception) for a signal pending at a call's start."},
    {"begin_exit", py_begin_exit, METH_VARARGS,
     "begin_exit(timeout_s=5.0): interpreter exit has begun, only GIL holders may still "
     "enter Python; waits for calls already in progress; returns how many are left."},
    {"blob_new", py_blob_new, METH_O, "Copies bytes into C memory freed by blob_free."},
    {"blob_data", py_blob_data, METH_O, "Address of a blob's bytes."},
    {"c_helpers", py_c_helpers, METH_NOARGS, "Addresses of C deleters."},
    {"forget", py_forget, METH_O, "forget(handle): drops the cached getter answers of handle."},
    {"deleted", py_deleted, METH_O,
     "deleted(handle): the buffer is deleted; C no longer answers its IsDeleted/ReadyEvent."},
    {"writable_c_contiguous", py_writable_c_contiguous, METH_O,
     "writable_c_contiguous(obj): whether obj exports writeable C-contiguous memory."},
    {"set_output_template", py_set_output_template, METH_O,
     "set_output_template(buffer): the slots new_output copies (Buffer.finished_output)"},
    {"new_output", (PyCFunction)(void (*)(void))py_new_output, METH_FASTCALL,
     "new_output(array, buffer_type, device, memory, nbytes): Buffer.finished_output in C"},
    {"set_executable_class", py_set_executable_class, METH_O,
     "set_executable_class(cls): Execute's fast path calls cls objects' execute_fast "
     "directly"},
    {"set_registry", py_set_registry, METH_VARARGS,
     "set_registry(objects, buffer_class): the handle registry and Buffer class, for "
     "PJRT_Buffer_Destroy of a live output in C."},
    {"is_live", py_is_live, METH_O,
     "is_live(handle): whether C answers the buffer's IsDeleted/ReadyEvent."},
    {"read_pointer_lists", py_read_pointer_lists, METH_VARARGS,
     "read_pointer_lists(lists, n_lists, n_each) -> list of lists of addresses"},
    {"write_pointer_lists", py_write_pointer_lists, METH_VARARGS,
     "write_pointer_lists(lists, rows) writes row i into the array lists[i]"},
    {"ready_events", py_ready_events, METH_VARARGS,
     "ready_events(address, n) writes n new ready PJRT_Event* at address"},
    {"call_slot", py_call_slot, METH_VARARGS, "call_slot(index, args_ptr) -> PJRT_Error*"},
    {"call_slot_with_pending_error", py_call_slot_with_pending_error, METH_VARARGS,
     "call_slot with a KeyError pending -> (PJRT_Error*, survived)"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef kModule = {PyModuleDef_HEAD_INIT, "_shim",
                                     "C trampolines for the stablehlo_ref PJRT plugin",
                                     -1, kMethods};

PyMODINIT_FUNC PyInit__shim(void) {
  PyObject *m = PyModule_Create(&kModule);
  if (m == NULL) return NULL;
  PyModule_AddIntConstant(m, "MAX_SLOTS", MAX_SLOTS);
  PyModule_AddIntConstant(m, "ERROR_STRUCT_SIZE", (long)sizeof(PJRT_Error));
  return m;
}

/* ------------------------------------------------------------------------ */
/* Loading by path                                                          */
/* ------------------------------------------------------------------------ */

/* Entry point for hosts that dlopen the plugin.  In a Python process (JAX,
 * PyTorch/XLA) Python is already running and we just import the package; in
 * a process that embeds Python without having started it, we start it.
 * Returns NULL (the PJRT convention for "no API") if anything fails, after
 * printing the Python error. */
__attribute__((visibility("default"))) const void *GetPjrtApi(void) {
  int started_here = 0;
  PyGILState_STATE gstate;
  PyObject *mod, *res;
  if (g_api_ready) return g_api;
  if (!Py_IsInitialized()) {
    /* STABLEHLO_PJRT_PYTHON names the python executable whose environment
     * (e.g. a venv with stablehlo-pjrt installed) the embedded interpreter
     * should use; Python derives sys.prefix and site-packages from it. */
    PyConfig config;
    PyStatus status;
    const char *exe = getenv("STABLEHLO_PJRT_PYTHON");
    PyConfig_InitPythonConfig(&config);
    config.install_signal_handlers = 0; /* the host owns signals */
    if (exe != NULL && exe[0] != '\0') {
      status = PyConfig_SetBytesString(&config, &config.program_name, exe);
      if (PyStatus_Exception(status)) {
        PyConfig_Clear(&config);
        fprintf(stderr, "stablehlo_pjrt: bad STABLEHLO_PJRT_PYTHON\n");
        return NULL;
      }
    }
    status = Py_InitializeFromConfig(&config);
    PyConfig_Clear(&config);
    if (PyStatus_Exception(status)) {
      fprintf(stderr, "stablehlo_pjrt: could not start Python: %s\n",
              status.err_msg ? status.err_msg : "unknown error");
      return NULL;
    }
    started_here = 1;
  }
  gstate = PyGILState_Ensure();
  mod = PyImport_ImportModule("stablehlo_pjrt.table");
  res = mod ? PyObject_CallMethod(mod, "build_api", NULL) : NULL;
  if (res == NULL) PyErr_Print();
  Py_XDECREF(res);
  Py_XDECREF(mod);
  PyGILState_Release(gstate);
  if (started_here) {
    /* Py_InitializeEx left this thread holding the GIL; release it so the
     * host's other threads can enter the plugin. */
    PyEval_SaveThread();
  }
  return g_api_ready ? (const void *)g_api : NULL;
}
