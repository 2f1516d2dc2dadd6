/*
 * Fake libnvidia-ml.so.1 for the gpufleet driver kit (tests only).
 *
 * Enough of NVML for pynvml (nvidia-ml-py 13.x) to enumerate GPUs and to get
 * and set persistence mode on a fake host, and for NVIDIA's container toolkit
 * (go-nvml, go-nvlib) to select devices and generate CDI specs: the MIG
 * queries it makes answer "not a MIG device, MIG disabled". Like NVIDIA's library, persistence
 * get/set go to nvidia-persistenced's RPC socket
 * (/var/run/nvidia-persistenced/socket, program 35006 v1) when it exists and
 * answers; otherwise to the driver's legacy per-GPU flag, here a state file of
 * the fake host. Setting needs euid 0. Every call looks at the description
 * (parsed again only when its file changed: gfk_host_refresh), so errors
 * injected while a program runs take effect at its next call. The GPU-health
 * queries are in fake_nvml_health.c, included at the end; built with
 * -DGFK_OLD_DRIVER the library lacks the symbols an older driver lacks.
 */
#include "hostdesc.h"

#include <pthread.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <sys/un.h>
#include <arpa/inet.h>

typedef int nvmlReturn_t;

enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NO_PERMISSION = 4,
    NVML_ERROR_ALREADY_INITIALIZED = 5,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_INSUFFICIENT_POWER = 8,
    NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_TIMEOUT = 10,
    NVML_ERROR_IRQ_ISSUE = 11,
    NVML_ERROR_LIBRARY_NOT_FOUND = 12,
    NVML_ERROR_FUNCTION_NOT_FOUND = 13,
    NVML_ERROR_CORRUPTED_INFOROM = 14,
    NVML_ERROR_GPU_IS_LOST = 15,
    NVML_ERROR_RESET_REQUIRED = 16,
    NVML_ERROR_OPERATING_SYSTEM = 17,
    NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18,
    NVML_ERROR_IN_USE = 19,
    NVML_ERROR_MEMORY = 20,
    NVML_ERROR_NO_DATA = 21,
    NVML_ERROR_INSUFFICIENT_RESOURCES = 23,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
    NVML_ERROR_DEPRECATED = 26,
    NVML_ERROR_NOT_READY = 27,
    NVML_ERROR_GPU_NOT_FOUND = 28,
    NVML_ERROR_INVALID_STATE = 29,
    NVML_ERROR_UNKNOWN = 999,
};

static const struct { const char *name; int code; const char *text; } errors[] = {
    {"success", NVML_SUCCESS, "Success"},
    {"uninitialized", NVML_ERROR_UNINITIALIZED, "Uninitialized"},
    {"invalid_argument", NVML_ERROR_INVALID_ARGUMENT, "Invalid Argument"},
    {"not_supported", NVML_ERROR_NOT_SUPPORTED, "Not Supported"},
    {"no_permission", NVML_ERROR_NO_PERMISSION, "Insufficient Permissions"},
    {"already_initialized", NVML_ERROR_ALREADY_INITIALIZED, "Already Initialized"},
    {"not_found", NVML_ERROR_NOT_FOUND, "Not Found"},
    {"insufficient_size", NVML_ERROR_INSUFFICIENT_SIZE, "Insufficient Size"},
    {"insufficient_power", NVML_ERROR_INSUFFICIENT_POWER, "Insufficient External Power"},
    {"driver_not_loaded", NVML_ERROR_DRIVER_NOT_LOADED, "Driver Not Loaded"},
    {"timeout", NVML_ERROR_TIMEOUT, "Timeout"},
    {"irq_issue", NVML_ERROR_IRQ_ISSUE, "Interrupt Request Issue"},
    {"library_not_found", NVML_ERROR_LIBRARY_NOT_FOUND, "NVML Shared Library Not Found"},
    {"function_not_found", NVML_ERROR_FUNCTION_NOT_FOUND, "Function Not Found"},
    {"corrupted_inforom", NVML_ERROR_CORRUPTED_INFOROM, "Corrupted infoROM"},
    {"gpu_is_lost", NVML_ERROR_GPU_IS_LOST, "GPU is lost"},
    {"gpu_lost", NVML_ERROR_GPU_IS_LOST, "GPU is lost"},
    {"reset_required", NVML_ERROR_RESET_REQUIRED, "GPU requires restart"},
    {"operating_system", NVML_ERROR_OPERATING_SYSTEM, "The operating system has blocked the request."},
    {"lib_rm_version_mismatch", NVML_ERROR_LIB_RM_VERSION_MISMATCH, "RM has detected an NVML/RM version mismatch."},
    {"version_mismatch", NVML_ERROR_LIB_RM_VERSION_MISMATCH, "RM has detected an NVML/RM version mismatch."},
    {"in_use", NVML_ERROR_IN_USE, "In use by another client"},
    {"memory", NVML_ERROR_MEMORY, "Insufficient Memory"},
    {"no_data", NVML_ERROR_NO_DATA, "No data"},
    {"insufficient_resources", NVML_ERROR_INSUFFICIENT_RESOURCES, "Ran out of critical resources, other than memory"},
    {"argument_version_mismatch", NVML_ERROR_ARGUMENT_VERSION_MISMATCH, "Version mismatch between passed in argument and expected"},
    {"deprecated", NVML_ERROR_DEPRECATED, "Requested functionality has been deprecated"},
    {"not_ready", NVML_ERROR_NOT_READY, "The system is not ready for the request"},
    {"gpu_not_found", NVML_ERROR_GPU_NOT_FOUND, "No GPUs were found"},
    {"invalid_state", NVML_ERROR_INVALID_STATE, "Resource not in correct state to perform requested operation"},
    {"unknown", NVML_ERROR_UNKNOWN, "Unknown Error"},
};

#define NDEV_MAGIC 0x6e766d6cu
struct nvml_device { unsigned magic; int index; };
typedef struct nvml_device *nvmlDevice_t;

typedef struct {
    char busIdLegacy[16];
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pciDeviceId;
    unsigned int pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int refcount;
static struct gfk_host host;
static struct nvml_device handles[GFK_MAX_GPUS];

#define API __attribute__((visibility("default")))

static int error_code(const struct jval *v)
{
    size_t i;
    if (!v) return NVML_SUCCESS;
    if (v->t == J_NUM) return (int)v->num;
    if (v->t == J_STR)
        for (i = 0; i < sizeof(errors) / sizeof(errors[0]); i++)
            if (!strcmp(errors[i].name, v->str)) return errors[i].code;
    return NVML_ERROR_UNKNOWN;
}

/* Look at the description (parsed again when its file changed); called with the lock held. */
static nvmlReturn_t reload(void)
{
    char ctl[4096];
    struct stat st;
    if (refcount == 0) return NVML_ERROR_UNINITIALIZED;
    gfk_path(ctl, sizeof(ctl), "/dev/nvidiactl");
    if (gfk_host_refresh(&host) == -1 || stat(ctl, &st) < 0) return NVML_ERROR_DRIVER_NOT_LOADED;
    if (!host.loaded) return NVML_ERROR_UNKNOWN;
    return NVML_SUCCESS;
}

/* Lock, reload, resolve `dev` and apply injected errors for `op`. */
static nvmlReturn_t enter(nvmlDevice_t dev, const char *op, struct gfk_gpu **gpu)
{
    nvmlReturn_t r;
    pthread_mutex_lock(&lock);
    if ((r = reload()) != NVML_SUCCESS) return r;
    if ((r = error_code(gfk_injected(&host, NULL, "init"))) != NVML_SUCCESS) return r;
    if (!dev || dev < handles || dev >= handles + GFK_MAX_GPUS || dev->magic != NDEV_MAGIC)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (dev->index >= host.ngpus) return NVML_ERROR_GPU_IS_LOST;
    *gpu = &host.gpus[dev->index];
    return error_code(gfk_injected(&host, *gpu, op));
}

static nvmlReturn_t leave(nvmlReturn_t r)
{
    pthread_mutex_unlock(&lock);
    return r;
}

static nvmlReturn_t copy_out(char *buf, unsigned len, const char *value)
{
    if (!buf) return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(value) + 1 > len) return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(buf, value, strlen(value) + 1);
    return NVML_SUCCESS;
}

/* ---- init ------------------------------------------------------------ */

API nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    nvmlReturn_t r;
    (void)flags;
    pthread_mutex_lock(&lock);
    refcount++;
    r = reload();
    if (r == NVML_SUCCESS) r = error_code(gfk_injected(&host, NULL, "init"));
    if (r != NVML_SUCCESS) refcount--;
    return leave(r);
}

API nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
API nvmlReturn_t nvmlInit(void) { return nvmlInitWithFlags(0); }

API nvmlReturn_t nvmlShutdown(void)
{
    pthread_mutex_lock(&lock);
    if (refcount == 0) return leave(NVML_ERROR_UNINITIALIZED);
    if (--refcount == 0) gfk_host_free(&host);
    return leave(NVML_SUCCESS);
}

API const char *nvmlErrorString(nvmlReturn_t result)
{
    size_t i;
    for (i = 0; i < sizeof(errors) / sizeof(errors[0]); i++)
        if (errors[i].code == result) return errors[i].text;
    return "Unknown Error";
}

/* ---- system ---------------------------------------------------------- */

static nvmlReturn_t system_enter(void)
{
    nvmlReturn_t r;
    pthread_mutex_lock(&lock);
    if ((r = reload()) != NVML_SUCCESS) return r;
    return error_code(gfk_injected(&host, NULL, "init"));
}

API nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    nvmlReturn_t r = system_enter();
    if (r == NVML_SUCCESS)
        r = copy_out(version, length, j_str(&host.root, "driver_version", "535.171.04"));
    return leave(r);
}

API nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length)
{
    nvmlReturn_t r = system_enter();
    if (r == NVML_SUCCESS) {
        char buf[128];
        snprintf(buf, sizeof(buf), "12.%s", j_str(&host.root, "driver_version", "535.171.04"));
        r = copy_out(version, length, j_str(&host.root, "nvml_version", buf));
    }
    return leave(r);
}

API nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *version)
{
    nvmlReturn_t r = system_enter();
    if (r == NVML_SUCCESS) {
        if (!version) r = NVML_ERROR_INVALID_ARGUMENT;
        else *version = (int)j_num(&host.root, "cuda_driver_version", 12020);
    }
    return leave(r);
}

API nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *version)
{
    return nvmlSystemGetCudaDriverVersion(version);
}

/* ---- enumeration ------------------------------------------------------ */

API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count)
{
    nvmlReturn_t r = system_enter();
    if (r == NVML_SUCCESS) r = error_code(gfk_injected(&host, NULL, "count"));
    if (r == NVML_SUCCESS) {
        if (!count) r = NVML_ERROR_INVALID_ARGUMENT;
        else *count = (unsigned)host.ngpus;
    }
    return leave(r);
}

API nvmlReturn_t nvmlDeviceGetCount(unsigned int *count) { return nvmlDeviceGetCount_v2(count); }

static nvmlReturn_t handle_for(struct gfk_gpu *g, nvmlDevice_t *device)
{
    nvmlReturn_t r = error_code(gfk_injected(&host, g, "handle"));
    if (r != NVML_SUCCESS) return r;
    handles[g->index].magic = NDEV_MAGIC;
    handles[g->index].index = g->index;
    *device = &handles[g->index];
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    nvmlReturn_t r = system_enter();
    if (r != NVML_SUCCESS) return leave(r);
    if (!device || index >= (unsigned)host.ngpus) return leave(NVML_ERROR_INVALID_ARGUMENT);
    return leave(handle_for(&host.gpus[index], device));
}

API nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device)
{
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}

API nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
    int i;
    nvmlReturn_t r = system_enter();
    if (r != NVML_SUCCESS) return leave(r);
    if (!uuid || !device) return leave(NVML_ERROR_INVALID_ARGUMENT);
    for (i = 0; i < host.ngpus; i++)
        if (!strcmp(host.gpus[i].uuid, uuid)) return leave(handle_for(&host.gpus[i], device));
    return leave(NVML_ERROR_NOT_FOUND);
}

API nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *busId, nvmlDevice_t *device)
{
    unsigned d, b, s, f;
    struct gfk_gpu *g;
    nvmlReturn_t r = system_enter();
    if (r != NVML_SUCCESS) return leave(r);
    if (!busId || !device || gfk_parse_bdf(busId, &d, &b, &s, &f) < 0)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    g = gfk_find_gpu(&host, d, b, s);
    if (!g || g->function != f) return leave(NVML_ERROR_NOT_FOUND);
    return leave(handle_for(g, device));
}

API nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *busId, nvmlDevice_t *device)
{
    return nvmlDeviceGetHandleByPciBusId_v2(busId, device);
}

/* ---- device queries -------------------------------------------------- */

API nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t dev, char *name, unsigned int length)
{
    struct gfk_gpu *g;
    nvmlReturn_t r = enter(dev, "name", &g);
    if (r == NVML_SUCCESS) r = copy_out(name, length, g->name);
    return leave(r);
}

API nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t dev, char *uuid, unsigned int length)
{
    struct gfk_gpu *g;
    nvmlReturn_t r = enter(dev, "uuid", &g);
    if (r == NVML_SUCCESS) r = copy_out(uuid, length, g->uuid);
    return leave(r);
}

API nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t dev, unsigned int *index)
{
    struct gfk_gpu *g;
    nvmlReturn_t r = enter(dev, "index", &g);
    if (r == NVML_SUCCESS) {
        if (!index) r = NVML_ERROR_INVALID_ARGUMENT;
        else *index = (unsigned)g->index;
    }
    return leave(r);
}

API nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t dev, unsigned int *minor)
{
    struct gfk_gpu *g;
    nvmlReturn_t r = enter(dev, "minor", &g);
    if (r == NVML_SUCCESS) {
        if (!minor) r = NVML_ERROR_INVALID_ARGUMENT;
        else *minor = g->minor;
    }
    return leave(r);
}

API nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t dev, nvmlPciInfo_t *pci)
{
    struct gfk_gpu *g;
    nvmlReturn_t r = enter(dev, "pci_info", &g);
    if (r == NVML_SUCCESS) {
        if (!pci) return leave(NVML_ERROR_INVALID_ARGUMENT);
        memset(pci, 0, sizeof(*pci));
        snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), "%04X:%02X:%02X.%X",
                 g->domain, g->bus, g->device, g->function);
        snprintf(pci->busId, sizeof(pci->busId), "%08X:%02X:%02X.%X",
                 g->domain, g->bus, g->device, g->function);
        pci->domain = g->domain;
        pci->bus = g->bus;
        pci->device = g->device;
        pci->pciDeviceId = (unsigned)strtoul(j_str(g->json, "pci_device_id", "0x20b510de"), NULL, 0);
        pci->pciSubSystemId = (unsigned)strtoul(j_str(g->json, "pci_subsystem_id", "0x153310de"), NULL, 0);
    }
    return leave(r);
}

API nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t dev, nvmlPciInfo_t *pci)
{
    return nvmlDeviceGetPciInfo_v3(dev, pci);
}

API nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t dev, nvmlPciInfo_t *pci)
{
    return nvmlDeviceGetPciInfo_v3(dev, pci);
}

/* ---- MIG: NVIDIA's toolkit asks these before it selects a device -------- */

/* MIG-capable boards (A100, A30, H100, ...) answer the MIG calls with MIG
 * disabled; the others with NotSupported, as NVML does. "mig_capable" in a
 * GPU's description overrides the guess from its name; "mig_mode":
 * {"current": 1, "pending": 1} makes GetMigMode report MIG enabled on a
 * capable board. GPU and compute instances are not modelled: the MIG device
 * count stays 0 even with MIG enabled. */
static int mig_capable(const struct gfk_gpu *g)
{
    static const char *const boards[] = {"A100", "A30", "A800", "H100", "H200", "H800", "H20", "B200", "B100"};
    const struct jval *v = j_get(g->json, "mig_capable");
    size_t i;
    if (v && v->t != J_NULL) return v->num != 0;
    for (i = 0; i < sizeof(boards) / sizeof(boards[0]); i++)
        if (strstr(g->name, boards[i])) return 1;
    return 0;
}

API nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t dev, unsigned int *isMigDevice)
{
    struct gfk_gpu *g;
    nvmlReturn_t r = enter(dev, "mig", &g);
    if (r == NVML_SUCCESS) {
        if (!isMigDevice) r = NVML_ERROR_INVALID_ARGUMENT;
        else *isMigDevice = 0; /* every handle the fake gives is a full GPU */
    }
    return leave(r);
}

API nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t dev, unsigned int *currentMode, unsigned int *pendingMode)
{
    struct gfk_gpu *g;
    nvmlReturn_t r = enter(dev, "mig", &g);
    /* part of a health pass too: also takes errors under its own name, as the health calls do */
    if (r == NVML_SUCCESS) r = error_code(gfk_injected(&host, g, __func__));
    if (r == NVML_SUCCESS) {
        if (!currentMode || !pendingMode) r = NVML_ERROR_INVALID_ARGUMENT;
        else if (!mig_capable(g)) r = NVML_ERROR_NOT_SUPPORTED;
        else {
            /* NVML_DEVICE_MIG_DISABLE (0) unless the description says otherwise */
            const struct jval *mode = j_get(g->json, "mig_mode");
            *currentMode = (unsigned)j_num(mode, "current", 0);
            *pendingMode = (unsigned)j_num(mode, "pending", 0);
        }
    }
    return leave(r);
}

/* "Returns zero if MIG is not supported or enabled." */
API nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t dev, unsigned int *count)
{
    struct gfk_gpu *g;
    nvmlReturn_t r = enter(dev, "mig", &g);
    if (r == NVML_SUCCESS) {
        if (!count) r = NVML_ERROR_INVALID_ARGUMENT;
        else *count = 0;
    }
    return leave(r);
}

/* index must lie in [0, max MIG device count), which is empty with MIG disabled. */
API nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t dev, unsigned int index, nvmlDevice_t *migDevice)
{
    struct gfk_gpu *g;
    nvmlReturn_t r = enter(dev, "mig", &g);
    (void)index;
    if (r == NVML_SUCCESS) {
        if (!migDevice) r = NVML_ERROR_INVALID_ARGUMENT;
        else if (!mig_capable(g)) r = NVML_ERROR_NOT_SUPPORTED;
        else r = NVML_ERROR_INVALID_ARGUMENT;
    }
    return leave(r);
}

/* The three calls below take a MIG device handle; a full GPU's is not one. */
static nvmlReturn_t mig_handle_only(nvmlDevice_t dev, const void *out)
{
    struct gfk_gpu *g;
    nvmlReturn_t r = enter(dev, "mig", &g);
    if (r == NVML_SUCCESS) r = NVML_ERROR_INVALID_ARGUMENT;
    (void)out;
    return leave(r);
}

API nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t migDevice, nvmlDevice_t *device)
{
    return mig_handle_only(migDevice, device);
}

API nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t dev, unsigned int *id)
{
    return mig_handle_only(dev, id);
}

API nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t dev, unsigned int *id)
{
    return mig_handle_only(dev, id);
}

/* ---- persistence: nvidia-persistenced RPC ---------------------------- */

#define PERSISTENCED_SOCKET "/var/run/nvidia-persistenced/socket"
#define RPC_NO_DAEMON (-1)
#define RPC_BROKEN (-2)

static int write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len) {
        ssize_t w = send(fd, p, len, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        p += w; len -= (size_t)w;
    }
    return 0;
}

static int read_all(int fd, void *buf, size_t len)
{
    char *p = buf;
    while (len) {
        ssize_t r = recv(fd, p, len, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        p += r; len -= (size_t)r;
    }
    return 0;
}

/* One call to program 35006 v1. Returns the daemon's status (>= 0) and the
 * mode for Get, RPC_NO_DAEMON when nothing listens, RPC_BROKEN otherwise. */
static int persistenced_call(unsigned proc, const struct gfk_gpu *g, int mode, int *mode_out)
{
    char path[4096];
    struct sockaddr_un sa;
    struct timeval tv = {5, 0};
    uint32_t msg[17], reply[64], xid;
    uint32_t marker;
    size_t words = 0, len;
    int fd, status;

    gfk_path(path, sizeof(path), PERSISTENCED_SOCKET);
    if (strlen(path) >= sizeof(sa.sun_path)) return RPC_NO_DAEMON;
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return RPC_NO_DAEMON;
    if (fd < 3) { int nfd = fcntl(fd, F_DUPFD_CLOEXEC, 3); close(fd); fd = nfd; if (fd < 0) return RPC_NO_DAEMON; }
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    memcpy(sa.sun_path, path, strlen(path));
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) { close(fd); return RPC_NO_DAEMON; }

    xid = (uint32_t)getpid() ^ (uint32_t)time(NULL) ^ (uint32_t)(uintptr_t)g;
    msg[words++] = 0;                 /* record mark, filled below */
    msg[words++] = htonl(xid);
    msg[words++] = htonl(0);          /* CALL */
    msg[words++] = htonl(2);          /* RPC version */
    msg[words++] = htonl(35006);
    msg[words++] = htonl(1);
    msg[words++] = htonl(proc);
    msg[words++] = 0; msg[words++] = 0; /* AUTH_NONE credential */
    msg[words++] = 0; msg[words++] = 0; /* AUTH_NONE verifier */
    msg[words++] = htonl(g->domain);
    msg[words++] = htonl(g->bus);
    msg[words++] = htonl(g->device);
    msg[words++] = htonl(g->function);
    if (proc == 1) msg[words++] = htonl((uint32_t)mode);
    msg[0] = htonl(0x80000000u | (uint32_t)((words - 1) * 4));
    if (write_all(fd, msg, words * 4) < 0 || read_all(fd, &marker, 4) < 0) { close(fd); return RPC_BROKEN; }
    marker = ntohl(marker);
    len = marker & 0x7fffffffu;
    if (!(marker & 0x80000000u) || len < 24 || len > sizeof(reply) || len % 4 ||
        read_all(fd, reply, len) < 0) {
        close(fd); return RPC_BROKEN;
    }
    close(fd);
    /* xid, REPLY(1), MSG_ACCEPTED(0), verf flavor, verf len 0, SUCCESS(0), status [, mode] */
    if (ntohl(reply[0]) != xid || ntohl(reply[1]) != 1 || ntohl(reply[2]) != 0 ||
        ntohl(reply[4]) != 0 || ntohl(reply[5]) != 0)
        return RPC_BROKEN;
    status = (int)ntohl(reply[6]);
    if (mode_out && status == 0) {
        if (len < 32) return RPC_BROKEN;
        *mode_out = (int)ntohl(reply[7]);
    }
    return status;
}

static nvmlReturn_t daemon_status_to_nvml(int status)
{
    switch (status) {
    case 0: return NVML_SUCCESS;
    case 2: return NVML_ERROR_NOT_FOUND;
    case 4: return NVML_ERROR_INSUFFICIENT_RESOURCES;
    case 5: return NVML_ERROR_INVALID_ARGUMENT;
    case 7: return NVML_ERROR_NO_PERMISSION;
    default: return NVML_ERROR_UNKNOWN;
    }
}

/* ---- persistence: the driver's legacy flag --------------------------- */

static void legacy_path(char *out, size_t size)
{
    gfk_path(out, size, j_str(&host.root, "legacy_persistence_file",
                              "/proc/driver/nvidia/gpufleet-fakedriver/persistence"));
}

static int legacy_get(const struct gfk_gpu *g)
{
    char path[4096], *text, *line, *save = NULL;
    int mode = (int)j_num(g->json, "persistence_mode", 0);
    legacy_path(path, sizeof(path));
    text = gfk_read_file(path);
    if (!text) return mode;
    for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char bdf[64]; int m;
        if (sscanf(line, "%63s %d", bdf, &m) == 2 && !strcmp(bdf, g->bdf)) mode = m;
    }
    free(text);
    return mode;
}

static nvmlReturn_t legacy_set(const struct gfk_gpu *g, int mode)
{
    char path[4096], tmp[4200], kmsg[4200];
    int i, fd;
    FILE *f;
    legacy_path(path, sizeof(path));
    snprintf(tmp, sizeof(tmp), "%s.%d.tmp", path, (int)getpid());
    fd = gfk_open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || !(f = fdopen(fd, "w"))) { if (fd >= 0) close(fd); return NVML_ERROR_UNKNOWN; }
    for (i = 0; i < host.ngpus; i++)
        fprintf(f, "%s %d\n", host.gpus[i].bdf,
                &host.gpus[i] == g ? mode : legacy_get(&host.gpus[i]));
    if (fclose(f) != 0 || rename(tmp, path) < 0) { unlink(tmp); return NVML_ERROR_UNKNOWN; }
    /* What the driver prints to the kernel log for the legacy path. */
    snprintf(kmsg, sizeof(kmsg), "%s", path);
    {
        char *slash = strrchr(kmsg, '/');
        if (slash) {
            snprintf(slash + 1, sizeof(kmsg) - (size_t)(slash + 1 - kmsg), "kmsg");
            fd = gfk_open(kmsg, O_WRONLY | O_APPEND | O_CREAT, 0666);
            if (fd >= 0) {
                char line[256];
                int n = snprintf(line, sizeof(line),
                    "NVRM: GPU %s: Persistence mode is deprecated and will be removed in a "
                    "future release. Please use nvidia-persistenced instead.\n", g->bdf);
                ssize_t ignored = write(fd, line, (size_t)n);
                (void)ignored;
                close(fd);
            }
        }
    }
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t dev, int *mode)
{
    struct gfk_gpu *g;
    int status, m = 0;
    nvmlReturn_t r = enter(dev, "get_persistence", &g);
    if (r != NVML_SUCCESS) return leave(r);
    if (!mode) return leave(NVML_ERROR_INVALID_ARGUMENT);
    status = persistenced_call(2, g, 0, &m);
    if (status == RPC_NO_DAEMON) { *mode = legacy_get(g); return leave(NVML_SUCCESS); }
    if (status == RPC_BROKEN) return leave(NVML_ERROR_UNKNOWN);
    if ((r = daemon_status_to_nvml(status)) == NVML_SUCCESS) *mode = m;
    return leave(r);
}

API nvmlReturn_t nvmlDeviceSetPersistenceMode(nvmlDevice_t dev, int mode)
{
    struct gfk_gpu *g;
    int status;
    nvmlReturn_t r = enter(dev, "set_persistence", &g);
    if (r != NVML_SUCCESS) return leave(r);
    if (mode != 0 && mode != 1) return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (geteuid() != 0) return leave(NVML_ERROR_NO_PERMISSION);
    status = persistenced_call(1, g, mode, NULL);
    if (status == RPC_NO_DAEMON) return leave(legacy_set(g, mode));
    if (status == RPC_BROKEN) return leave(NVML_ERROR_UNKNOWN);
    return leave(daemon_status_to_nvml(status));
}

#include "fake_nvml_health.c"
