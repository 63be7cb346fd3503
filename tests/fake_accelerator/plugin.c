/* A fake accelerator PJRT plugin for the checker's tests (no GPU needed).
 *
 * It behaves like XLA's CUDA plugin where the checker must care: its devices
 * are "device" memory of an accelerator (device kind "Fake Accelerator"),
 * and a client created with preallocate=true (the default, as in XLA's GPU
 * allocator) reserves the device for its process: while one process holds
 * such a client, a client in any other process fails with
 * RESOURCE_EXHAUSTED "CUDA_ERROR_OUT_OF_MEMORY". With preallocate=false
 * clients share the device. The reservation is a flock on $FAKE_PJRT_LOCK.
 *
 * It implements the client, device and memory queries; every other slot of
 * the table returns UNIMPLEMENTED (compile, buffers, ...), which the
 * checker reports as unsupported. $FAKE_PJRT_PLATFORM names the platform
 * (default "fake_accelerator"), $FAKE_PJRT_DEVICES the device count
 * (default 1, at most 8).
 *
 * Field offsets, struct sizes and slot numbers come from fake_offsets.h,
 * generated from the project's ctypes mirror of pjrt_c_api.h
 * (stablehlo_pjrt/_capi.py) by tests/fake_accelerator/build.py.
 */
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "fake_offsets.h"

#define F(args, cls, field, type) (*(type *)((char *)(args) + OFF_##cls##_##field))
#define CHECK(args, cls)                                                      \
  do {                                                                        \
    if (*(size_t *)(args) < SIZE_##cls)                                       \
      return error(CODE_INVALID_ARGUMENT, #cls ": struct_size %zu < %d",      \
                   *(size_t *)(args), SIZE_##cls);                            \
  } while (0)

#define MAX_DEVICES 8

typedef struct { int code; char message[256]; } Error;
typedef struct { int id; } Device, Memory, Description;
typedef struct { int live; } Client;

static Device devices[MAX_DEVICES];
static Description descriptions[MAX_DEVICES];
static Memory memories[MAX_DEVICES];
static void *device_ptrs[MAX_DEVICES], *memory_ptrs[MAX_DEVICES];
static int num_devices = 1;
static int lock_fd = -1, live_clients = 0;

static Error *error(int code, const char *fmt, ...) {
  Error *e = calloc(1, sizeof(Error));
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e->message, sizeof e->message, fmt, ap);
  va_end(ap);
  e->code = code;
  return e;
}

static void *unimplemented(void *args) {
  (void)args;
  return error(CODE_UNIMPLEMENTED, "not implemented by the fake accelerator plugin");
}

static const char *platform(void) {
  const char *p = getenv("FAKE_PJRT_PLATFORM");
  return p && *p ? p : "fake_accelerator";
}

static void set_str(void *args, size_t off_ptr, size_t off_size, const char *s) {
  *(const char **)((char *)args + off_ptr) = s;
  *(size_t *)((char *)args + off_size) = strlen(s);
}
#define STR(args, cls, field, s) \
  set_str(args, OFF_##cls##_##field, OFF_##cls##_##field##_size, s)

static void *Error_Destroy(void *a) { free(F(a, Error_Destroy_Args, error, Error *)); return NULL; }
static void *Error_Message(void *a) {
  Error *e = F(a, Error_Message_Args, error, Error *);
  F(a, Error_Message_Args, message, const char *) = e->message;
  F(a, Error_Message_Args, message_size, size_t) = strlen(e->message);
  return NULL;
}
static void *Error_GetCode(void *a) {
  F(a, Error_GetCode_Args, code, int) = F(a, Error_GetCode_Args, error, Error *)->code;
  return NULL;
}
static void *Plugin_Initialize(void *a) {
  CHECK(a, Plugin_Initialize_Args);
  const char *n = getenv("FAKE_PJRT_DEVICES");
  num_devices = n && *n ? atoi(n) : 1;
  if (num_devices < 1 || num_devices > MAX_DEVICES) num_devices = 1;
  for (int i = 0; i < num_devices; i++) {
    devices[i].id = descriptions[i].id = memories[i].id = i;
    device_ptrs[i] = &devices[i];
    memory_ptrs[i] = &memories[i];
  }
  return NULL;
}
/* The attributes XLA's plugins report (a framework reads the StableHLO
   versions to choose the artifact version). */
static char attributes[3][SIZE_PJRT_NamedValue];
static int64_t current_version[3] = {1, 9, 0}, minimum_version[3] = {0, 9, 0};

static void named(char *nv, const char *name, int type, size_t size) {
  F(nv, PJRT_NamedValue, struct_size, size_t) = SIZE_PJRT_NamedValue;
  F(nv, PJRT_NamedValue, name, const char *) = name;
  F(nv, PJRT_NamedValue, name_size, size_t) = strlen(name);
  F(nv, PJRT_NamedValue, type, int) = type;
  F(nv, PJRT_NamedValue, value_size, size_t) = size;
}

static void *Plugin_Attributes(void *a) {
  CHECK(a, Plugin_Attributes_Args);
  named(attributes[0], "xla_version", NAMED_VALUE_INT64, 1);
  F(attributes[0], PJRT_NamedValue, int64_value, int64_t) = 2;
  named(attributes[1], "stablehlo_current_version", NAMED_VALUE_INT64_LIST, 3);
  F(attributes[1], PJRT_NamedValue, int64_array_value, int64_t *) = current_version;
  named(attributes[2], "stablehlo_minimum_version", NAMED_VALUE_INT64_LIST, 3);
  F(attributes[2], PJRT_NamedValue, int64_array_value, int64_t *) = minimum_version;
  F(a, Plugin_Attributes_Args, attributes, void *) = attributes;
  F(a, Plugin_Attributes_Args, num_attributes, size_t) = 3;
  return NULL;
}

/* preallocate (bool, default true) from the create options. */
static int preallocate(void *a) {
  char *opts = F(a, Client_Create_Args, create_options, char *);
  size_t n = F(a, Client_Create_Args, num_options, size_t);
  int value = 1;
  for (size_t i = 0; i < n; i++) {
    char *nv = opts + i * SIZE_PJRT_NamedValue;
    const char *name = F(nv, PJRT_NamedValue, name, const char *);
    size_t len = F(nv, PJRT_NamedValue, name_size, size_t);
    if (len == 11 && !memcmp(name, "preallocate", 11) &&
        F(nv, PJRT_NamedValue, type, int) == NAMED_VALUE_BOOL)
      value = F(nv, PJRT_NamedValue, bool_value, _Bool);
  }
  return value;
}

static void *Client_Create(void *a) {
  CHECK(a, Client_Create_Args);
  if (live_clients == 0) {
    const char *path = getenv("FAKE_PJRT_LOCK");
    char buf[64];
    if (!path || !*path) {
      snprintf(buf, sizeof buf, "/tmp/fake-pjrt-%d.lock", (int)getuid());
      path = buf;
    }
    lock_fd = open(path, O_RDWR | O_CREAT, 0600);
    if (lock_fd < 0) return error(CODE_INTERNAL, "cannot open %s", path);
    if (flock(lock_fd, (preallocate(a) ? LOCK_EX : LOCK_SH) | LOCK_NB) != 0) {
      close(lock_fd);
      lock_fd = -1;
      return error(CODE_RESOURCE_EXHAUSTED,
                   "CUDA_ERROR_OUT_OF_MEMORY: out of memory (fake accelerator: the device "
                   "is reserved by a client of another process)");
    }
  }
  Client *c = calloc(1, sizeof(Client));
  c->live = 1;
  live_clients++;
  F(a, Client_Create_Args, client, Client *) = c;
  return NULL;
}
static void *Client_Destroy(void *a) {
  CHECK(a, Client_Destroy_Args);
  free(F(a, Client_Destroy_Args, client, Client *));
  if (--live_clients == 0 && lock_fd >= 0) {
    close(lock_fd);
    lock_fd = -1;
  }
  return NULL;
}
static void *Client_PlatformName(void *a) {
  CHECK(a, Client_PlatformName_Args);
  STR(a, Client_PlatformName_Args, platform_name, platform());
  return NULL;
}
static void *Client_PlatformVersion(void *a) {
  CHECK(a, Client_PlatformVersion_Args);
  STR(a, Client_PlatformVersion_Args, platform_version, "fake 1.0");
  return NULL;
}
static void *Client_ProcessIndex(void *a) {
  CHECK(a, Client_ProcessIndex_Args);
  F(a, Client_ProcessIndex_Args, process_index, int) = 0;
  return NULL;
}
static void *Client_Devices(void *a) {
  CHECK(a, Client_Devices_Args);
  F(a, Client_Devices_Args, devices, void **) = device_ptrs;
  F(a, Client_Devices_Args, num_devices, size_t) = num_devices;
  return NULL;
}
static void *Client_AddressableDevices(void *a) {
  CHECK(a, Client_AddressableDevices_Args);
  F(a, Client_AddressableDevices_Args, addressable_devices, void **) = device_ptrs;
  F(a, Client_AddressableDevices_Args, num_addressable_devices, size_t) = num_devices;
  return NULL;
}
static void *Client_LookupDevice(void *a) {
  CHECK(a, Client_LookupDevice_Args);
  int id = F(a, Client_LookupDevice_Args, id, int);
  if (id < 0 || id >= num_devices) return error(CODE_INVALID_ARGUMENT, "no device %d", id);
  F(a, Client_LookupDevice_Args, device, void *) = &devices[id];
  return NULL;
}
static void *Client_LookupAddressableDevice(void *a) {
  CHECK(a, Client_LookupAddressableDevice_Args);
  int id = F(a, Client_LookupAddressableDevice_Args, local_hardware_id, int);
  if (id < 0 || id >= num_devices) return error(CODE_INVALID_ARGUMENT, "no device %d", id);
  F(a, Client_LookupAddressableDevice_Args, addressable_device, void *) = &devices[id];
  return NULL;
}
static void *Client_AddressableMemories(void *a) {
  CHECK(a, Client_AddressableMemories_Args);
  F(a, Client_AddressableMemories_Args, addressable_memories, void **) = memory_ptrs;
  F(a, Client_AddressableMemories_Args, num_addressable_memories, size_t) = num_devices;
  return NULL;
}
static void *Device_GetDescription(void *a) {
  CHECK(a, Device_GetDescription_Args);
  Device *d = F(a, Device_GetDescription_Args, device, Device *);
  F(a, Device_GetDescription_Args, device_description, void *) = &descriptions[d->id];
  return NULL;
}
static void *Device_IsAddressable(void *a) {
  CHECK(a, Device_IsAddressable_Args);
  F(a, Device_IsAddressable_Args, is_addressable, _Bool) = 1;
  return NULL;
}
static void *Device_LocalHardwareId(void *a) {
  CHECK(a, Device_LocalHardwareId_Args);
  F(a, Device_LocalHardwareId_Args, local_hardware_id, int) =
      F(a, Device_LocalHardwareId_Args, device, Device *)->id;
  return NULL;
}
static void *Device_DefaultMemory(void *a) {
  CHECK(a, Device_DefaultMemory_Args);
  F(a, Device_DefaultMemory_Args, memory, void *) =
      &memories[F(a, Device_DefaultMemory_Args, device, Device *)->id];
  return NULL;
}
static void *Device_AddressableMemories(void *a) {
  CHECK(a, Device_AddressableMemories_Args);
  Device *d = F(a, Device_AddressableMemories_Args, device, Device *);
  F(a, Device_AddressableMemories_Args, memories, void **) = &memory_ptrs[d->id];
  F(a, Device_AddressableMemories_Args, num_memories, size_t) = 1;
  return NULL;
}
static void *DeviceDescription_Id(void *a) {
  CHECK(a, DeviceDescription_Id_Args);
  F(a, DeviceDescription_Id_Args, id, int) =
      F(a, DeviceDescription_Id_Args, device_description, Description *)->id;
  return NULL;
}
static void *DeviceDescription_ProcessIndex(void *a) {
  CHECK(a, DeviceDescription_ProcessIndex_Args);
  F(a, DeviceDescription_ProcessIndex_Args, process_index, int) = 0;
  return NULL;
}
static void *DeviceDescription_Kind(void *a) {
  CHECK(a, DeviceDescription_Kind_Args);
  STR(a, DeviceDescription_Kind_Args, device_kind, "Fake Accelerator");
  return NULL;
}
static void *DeviceDescription_DebugString(void *a) {
  CHECK(a, DeviceDescription_DebugString_Args);
  STR(a, DeviceDescription_DebugString_Args, debug_string, "FakeAccelerator(id=?)");
  return NULL;
}
static void *DeviceDescription_ToString(void *a) {
  CHECK(a, DeviceDescription_ToString_Args);
  STR(a, DeviceDescription_ToString_Args, to_string, "FakeAccelerator");
  return NULL;
}
static void *DeviceDescription_Attributes(void *a) {
  CHECK(a, DeviceDescription_Attributes_Args);
  F(a, DeviceDescription_Attributes_Args, attributes, void *) = NULL;
  F(a, DeviceDescription_Attributes_Args, num_attributes, size_t) = 0;
  return NULL;
}
static void *Memory_Id(void *a) {
  CHECK(a, Memory_Id_Args);
  F(a, Memory_Id_Args, id, int) = F(a, Memory_Id_Args, memory, Memory *)->id;
  return NULL;
}
static void *Memory_Kind(void *a) {
  CHECK(a, Memory_Kind_Args);
  STR(a, Memory_Kind_Args, kind, "device");
  return NULL;
}
static void *Memory_Kind_Id(void *a) {
  CHECK(a, Memory_Kind_Id_Args);
  F(a, Memory_Kind_Id_Args, kind_id, int) = 0;
  return NULL;
}
static void *Memory_DebugString(void *a) {
  CHECK(a, Memory_DebugString_Args);
  STR(a, Memory_DebugString_Args, debug_string, "FakeAccelerator device memory");
  return NULL;
}
static void *Memory_ToString(void *a) {
  CHECK(a, Memory_ToString_Args);
  STR(a, Memory_ToString_Args, to_string, "device");
  return NULL;
}
static void *Memory_AddressableByDevices(void *a) {
  CHECK(a, Memory_AddressableByDevices_Args);
  Memory *m = F(a, Memory_AddressableByDevices_Args, memory, Memory *);
  F(a, Memory_AddressableByDevices_Args, devices, void **) = &device_ptrs[m->id];
  F(a, Memory_AddressableByDevices_Args, num_devices, size_t) = 1;
  return NULL;
}

typedef void *(*Fn)(void *);
static struct {
  size_t struct_size;
  void *extension_start;
  struct { size_t struct_size; void *extension_start; int major, minor; } version;
  Fn slots[NUM_SLOTS];
} api;

#define SET(name) api.slots[SLOT_PJRT_##name] = name

__attribute__((visibility("default"))) void *GetPjrtApi(void) {
  if (api.struct_size) return &api;
  api.struct_size = SIZE_PJRT_Api;
  api.version.struct_size = SIZE_PJRT_Api_Version;
  api.version.major = API_MAJOR;
  api.version.minor = API_MINOR;
  for (int i = 0; i < NUM_SLOTS; i++) api.slots[i] = unimplemented;
  SET(Error_Destroy); SET(Error_Message); SET(Error_GetCode);
  SET(Plugin_Initialize); SET(Plugin_Attributes);
  SET(Client_Create); SET(Client_Destroy); SET(Client_PlatformName);
  SET(Client_PlatformVersion); SET(Client_ProcessIndex); SET(Client_Devices);
  SET(Client_AddressableDevices); SET(Client_LookupDevice);
  SET(Client_LookupAddressableDevice); SET(Client_AddressableMemories);
  SET(Device_GetDescription); SET(Device_IsAddressable); SET(Device_LocalHardwareId);
  SET(Device_DefaultMemory); SET(Device_AddressableMemories);
  SET(DeviceDescription_Id); SET(DeviceDescription_ProcessIndex);
  SET(DeviceDescription_Kind); SET(DeviceDescription_DebugString);
  SET(DeviceDescription_ToString); SET(DeviceDescription_Attributes);
  SET(Memory_Id); SET(Memory_Kind); SET(Memory_Kind_Id); SET(Memory_AddressableByDevices);
  SET(Memory_DebugString); SET(Memory_ToString);
  return &api;
}
