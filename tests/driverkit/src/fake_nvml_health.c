/*
 * GPU-health queries of the fake libnvidia-ml.so.1 (tests only). Included at
 * the end of fake_nvml.c: it uses that file's enter()/leave(), handles and
 * error codes.
 *
 * Values come from the GPU's "health" object in the host description (see
 * tests/driverkit/README.md, "GPU health"); every key is optional and the
 * defaults describe a healthy GPU. Each call takes the errors injected under
 * its own NVML name (e.g. "errors": {"nvmlDeviceGetRemappedRows":
 * "not_supported"}) and under "any". Structures are laid out as pynvml
 * (nvidia-ml-py 13.x) declares them, byte for byte, with their sizes checked
 * below; versioned ones refuse another version with ArgumentVersionMismatch,
 * as NVML does.
 *
 * Built with -DGFK_OLD_DRIVER the symbols a driver before them lacks are
 * compiled out, so dlsym fails and pynvml raises NVMLError_FunctionNotFound:
 * nvmlDeviceGetRemappedRows, nvmlDeviceGetFieldValues,
 * nvmlDeviceGetGpuFabricInfoV, nvmlDeviceGetCurrentClocksEventReasons (the
 * older ...ThrottleReasons stays) and nvmlDeviceGetSramEccErrorStatus.
 */
#include <stddef.h>

/* ---- structures, as pynvml declares them ------------------------------ */

#define NVML_STRUCT_VERSION(type, ver) ((unsigned int)(sizeof(type) | ((unsigned)(ver) << 24)))

typedef struct {               /* c_nvmlTemperature_v1_t */
    unsigned int version;
    unsigned int sensorType;
    int temperature;
} nvmlTemperature_v1_t;
#define nvmlTemperature_v1 NVML_STRUCT_VERSION(nvmlTemperature_v1_t, 1)   /* 0x100000C */

typedef union {                /* c_nvmlValue_t */
    double dVal;
    unsigned int uiVal;
    unsigned long ulVal;
    unsigned long long ullVal;
    long long sllVal;
    int siVal;
    unsigned short usVal;
} nvmlValue_t;

typedef struct {               /* c_nvmlFieldValue_t */
    unsigned int fieldId;
    unsigned int scopeId;
    long long timestamp;
    long long latencyUsec;
    unsigned int valueType;
    nvmlReturn_t nvmlReturn;
    nvmlValue_t value;
} nvmlFieldValue_t;

typedef struct {               /* c_nvmlEccSramErrorStatus_v1_t */
    unsigned int version;
    unsigned long long aggregateUncParity;
    unsigned long long aggregateUncSecDed;
    unsigned long long aggregateCor;
    unsigned long long volatileUncParity;
    unsigned long long volatileUncSecDed;
    unsigned long long volatileCor;
    unsigned long long aggregateUncBucketL2;
    unsigned long long aggregateUncBucketSm;
    unsigned long long aggregateUncBucketPcie;
    unsigned long long aggregateUncBucketMcu;
    unsigned long long aggregateUncBucketOther;
    unsigned int bThresholdExceeded;
} nvmlEccSramErrorStatus_v1_t;
#define nvmlEccSramErrorStatus_v1 NVML_STRUCT_VERSION(nvmlEccSramErrorStatus_v1_t, 1)   /* 0x1000068 */

/* nvml.h declares state as unsigned char (nvmlGpuFabricState_t); pynvml reads a
 * c_uint at the same offset, so the fake writes the whole word (padding zero). */
typedef struct {               /* c_nvmlGpuFabricInfo_v2_t (= c_nvmlGpuFabricInfoV_t) */
    unsigned int version;
    unsigned char clusterUuid[16];
    nvmlReturn_t status;
    unsigned int cliqueId;
    unsigned int state;
    unsigned int healthMask;
} nvmlGpuFabricInfo_v2_t;
#define nvmlGpuFabricInfo_v2 NVML_STRUCT_VERSION(nvmlGpuFabricInfo_v2_t, 2)   /* 0x2000024 */

typedef struct {               /* c_nvmlGpuFabricInfo_v3_t: v2 and healthSummary */
    unsigned int version;
    unsigned char clusterUuid[16];
    nvmlReturn_t status;
    unsigned int cliqueId;
    unsigned int state;
    unsigned int healthMask;
    unsigned char healthSummary;
} nvmlGpuFabricInfo_v3_t;
#define nvmlGpuFabricInfo_v3 NVML_STRUCT_VERSION(nvmlGpuFabricInfo_v3_t, 3)   /* 0x3000028 */

_Static_assert(nvmlTemperature_v1 == 0x100000C, "nvmlTemperature_v1 layout");
_Static_assert(sizeof(nvmlFieldValue_t) == 40 && offsetof(nvmlFieldValue_t, valueType) == 24 &&
               offsetof(nvmlFieldValue_t, value) == 32, "nvmlFieldValue_t layout");
_Static_assert(nvmlEccSramErrorStatus_v1 == 0x1000068 &&
               offsetof(nvmlEccSramErrorStatus_v1_t, aggregateUncParity) == 8 &&
               offsetof(nvmlEccSramErrorStatus_v1_t, bThresholdExceeded) == 96,
               "nvmlEccSramErrorStatus_v1_t layout");
_Static_assert(nvmlGpuFabricInfo_v2 == 0x2000024 && offsetof(nvmlGpuFabricInfo_v2_t, state) == 28,
               "nvmlGpuFabricInfo_v2_t layout");
_Static_assert(nvmlGpuFabricInfo_v3 == 0x3000028 && offsetof(nvmlGpuFabricInfo_v3_t, healthSummary) == 36,
               "nvmlGpuFabricInfo_v3_t layout");

enum {
    NVML_VALUE_TYPE_UNSIGNED_INT = 1,
    NVML_FI_DEV_GET_GPU_RECOVERY_ACTION = 230,
    NVML_TEMPERATURE_GPU = 0,
    NVML_TEMPERATURE_COUNT = 2,          /* pynvml 13: GPU, GPU_MAX */
    NVML_TEMPERATURE_THRESHOLD_COUNT = 8,
    NVML_MEMORY_LOCATION_DRAM = 2,       /* = NVML_MEMORY_LOCATION_DEVICE_MEMORY */
    NVML_MEMORY_LOCATION_COUNT = 8,
    NVML_PAGE_RETIREMENT_CAUSE_COUNT = 2,
};

/* ---- the description's "health" object -------------------------------- */

/* health.<key> when it is an object, else NULL (every lookup then gives its default). */
static const struct jval *health(const struct gfk_gpu *g, const char *key)
{
    const struct jval *v = j_get(j_get(g->json, "health"), key);
    return v && v->t == J_OBJ ? v : NULL;
}

static unsigned long long h_u64(const struct jval *obj, const char *key, unsigned long long dflt)
{
    double v = j_num(obj, key, (double)dflt);
    return v > 0 ? (unsigned long long)v : 0;
}

static unsigned int h_uint(const struct jval *obj, const char *key, unsigned int dflt)
{
    return (unsigned int)h_u64(obj, key, dflt);
}

/* ---- ECC --------------------------------------------------------------- */

API nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t dev, unsigned int *current, unsigned int *pending)
{
    struct gfk_gpu *g;
    nvmlReturn_t r = enter(dev, __func__, &g);
    if (r == NVML_SUCCESS) {
        const struct jval *mode = health(g, "ecc_mode");
        if (!current || !pending) r = NVML_ERROR_INVALID_ARGUMENT;
        else { *current = h_uint(mode, "current", 1); *pending = h_uint(mode, "pending", 1); }
    }
    return leave(r);
}

/* health.ecc.<volatile|aggregate>.<corrected|uncorrected>; -1 for an argument out of range. */
static long long ecc_count(const struct gfk_gpu *g, unsigned errorType, unsigned counterType)
{
    const struct jval *ecc = health(g, "ecc"), *counter;
    if (errorType > 1 || counterType > 1) return -1;
    counter = j_get(ecc, counterType ? "aggregate" : "volatile");
    return (long long)h_u64(counter && counter->t == J_OBJ ? counter : NULL,
                            errorType ? "uncorrected" : "corrected", 0);
}

API nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t dev, unsigned int errorType,
                                             unsigned int counterType, unsigned long long *count)
{
    struct gfk_gpu *g;
    nvmlReturn_t r = enter(dev, __func__, &g);
    if (r == NVML_SUCCESS) {
        long long n = ecc_count(g, errorType, counterType);
        if (!count || n < 0) r = NVML_ERROR_INVALID_ARGUMENT;
        else *count = (unsigned long long)n;
    }
    return leave(r);
}

/* Device memory (DRAM) has the counts of nvmlDeviceGetTotalEccErrors; every other location 0. */
API nvmlReturn_t nvmlDeviceGetMemoryErrorCounter(nvmlDevice_t dev, unsigned int errorType,
                                                 unsigned int counterType, unsigned int locationType,
                                                 unsigned long long *count)
{
    struct gfk_gpu *g;
    nvmlReturn_t r = enter(dev, __func__, &g);
    if (r == NVML_SUCCESS) {
        long long n = ecc_count(g, errorType, counterType);
        if (!count || n < 0 || locationType >= NVML_MEMORY_LOCATION_COUNT) r = NVML_ERROR_INVALID_ARGUMENT;
        else *count = locationType == NVML_MEMORY_LOCATION_DRAM ? (unsigned long long)n : 0;
    }
    return leave(r);
}

/* ---- retired pages ----------------------------------------------------- */

/* Page i retired for `cause` is at 0x<cause+1>00000000 + i * 0x1000, retired at
 * RETIRED_EPOCH + i seconds: fixed, so a test can expect them. */
#define RETIRED_EPOCH 1700000000ULL

static nvmlReturn_t retired_pages(nvmlDevice_t dev, const char *op, unsigned int cause,
                                  unsigned int *pageCount, unsigned long long *addresses,
                                  unsigned long long *timestamps, int with_times)
{
    struct gfk_gpu *g;
    nvmlReturn_t r = enter(dev, op, &g);
    unsigned int n, i;
    if (r != NVML_SUCCESS) return leave(r);
    if (!pageCount || cause >= NVML_PAGE_RETIREMENT_CAUSE_COUNT) return leave(NVML_ERROR_INVALID_ARGUMENT);
    n = h_uint(health(g, "retired_pages"), cause ? "double_bit" : "single_bit", 0);
    if (*pageCount < n) { *pageCount = n; return leave(NVML_ERROR_INSUFFICIENT_SIZE); }
    if (n && (!addresses || (with_times && !timestamps))) return leave(NVML_ERROR_INVALID_ARGUMENT);
    for (i = 0; i < n; i++) {
        addresses[i] = ((unsigned long long)(cause + 1) << 32) + (unsigned long long)i * 0x1000;
        if (with_times) timestamps[i] = RETIRED_EPOCH + i;
    }
    *pageCount = n;
    return leave(NVML_SUCCESS);
}

API nvmlReturn_t nvmlDeviceGetRetiredPages(nvmlDevice_t dev, unsigned int cause, unsigned int *pageCount,
                                           unsigned long long *addresses)
{
    return retired_pages(dev, __func__, cause, pageCount, addresses, NULL, 0);
}

API nvmlReturn_t nvmlDeviceGetRetiredPages_v2(nvmlDevice_t dev, unsigned int cause, unsigned int *pageCount,
                                              unsigned long long *addresses, unsigned long long *timestamps)
{
    return retired_pages(dev, __func__, cause, pageCount, addresses, timestamps, 1);
}

API nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t dev, unsigned int *isPending)
{
    struct gfk_gpu *g;
    nvmlReturn_t r = enter(dev, __func__, &g);
    if (r == NVML_SUCCESS) {
        if (!isPending) r = NVML_ERROR_INVALID_ARGUMENT;
        else *isPending = j_num(health(g, "retired_pages"), "pending", 0) != 0;
    }
    return leave(r);
}

/* ---- row remapping, SRAM ECC, recovery action (newer drivers) ---------- */

#ifndef GFK_OLD_DRIVER
API nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t dev, unsigned int *corrRows, unsigned int *uncRows,
                                           unsigned int *isPending, unsigned int *failureOccurred)
{
    struct gfk_gpu *g;
    nvmlReturn_t r = enter(dev, __func__, &g);
    if (r == NVML_SUCCESS) {
        const struct jval *rows = health(g, "remapped_rows");
        if (!corrRows || !uncRows || !isPending || !failureOccurred) r = NVML_ERROR_INVALID_ARGUMENT;
        else {
            *corrRows = h_uint(rows, "correctable", 0);
            *uncRows = h_uint(rows, "uncorrectable", 0);
            *isPending = j_num(rows, "pending", 0) != 0;
            *failureOccurred = j_num(rows, "failure", 0) != 0;
        }
    }
    return leave(r);
}

API nvmlReturn_t nvmlDeviceGetSramEccErrorStatus(nvmlDevice_t dev, nvmlEccSramErrorStatus_v1_t *status)
{
    struct gfk_gpu *g;
    nvmlReturn_t r = enter(dev, __func__, &g);
    if (r == NVML_SUCCESS) {
        const struct jval *s = health(g, "sram_ecc");
        if (!status) r = NVML_ERROR_INVALID_ARGUMENT;
        else if (status->version != nvmlEccSramErrorStatus_v1) r = NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
        else {
            status->aggregateUncParity = h_u64(s, "aggregate_uncorrectable_parity", 0);
            status->aggregateUncSecDed = h_u64(s, "aggregate_uncorrectable_secded", 0);
            status->aggregateCor = h_u64(s, "aggregate_correctable", 0);
            status->volatileUncParity = h_u64(s, "volatile_uncorrectable_parity", 0);
            status->volatileUncSecDed = h_u64(s, "volatile_uncorrectable_secded", 0);
            status->volatileCor = h_u64(s, "volatile_correctable", 0);
            status->aggregateUncBucketL2 = h_u64(s, "aggregate_uncorrectable_bucket_l2", 0);
            status->aggregateUncBucketSm = h_u64(s, "aggregate_uncorrectable_bucket_sm", 0);
            status->aggregateUncBucketPcie = h_u64(s, "aggregate_uncorrectable_bucket_pcie", 0);
            status->aggregateUncBucketMcu = h_u64(s, "aggregate_uncorrectable_bucket_mcu", 0);
            status->aggregateUncBucketOther = h_u64(s, "aggregate_uncorrectable_bucket_other", 0);
            status->bThresholdExceeded = j_num(s, "threshold_exceeded", 0) != 0;
        }
    }
    return leave(r);
}

/* Field 230 (GPU recovery action, unsigned int) from health.recovery_action (default 0, none;
 * null: the field is not supported, as before driver 570); every other field answers its own
 * NotSupported. The call itself succeeds. */
API nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t dev, int valuesCount, nvmlFieldValue_t *values)
{
    struct gfk_gpu *g;
    const struct jval *action;
    struct timeval now;
    int i;
    nvmlReturn_t r = enter(dev, __func__, &g);
    if (r != NVML_SUCCESS) return leave(r);
    if (valuesCount < 0 || (valuesCount > 0 && !values)) return leave(NVML_ERROR_INVALID_ARGUMENT);
    action = j_get(j_get(g->json, "health"), "recovery_action");
    gettimeofday(&now, NULL);
    for (i = 0; i < valuesCount; i++) {
        nvmlFieldValue_t *v = &values[i];
        v->timestamp = (long long)now.tv_sec * 1000000 + now.tv_usec;
        v->latencyUsec = 0;
        memset(&v->value, 0, sizeof(v->value));
        if (v->fieldId == NVML_FI_DEV_GET_GPU_RECOVERY_ACTION && !(action && action->t == J_NULL)) {
            v->nvmlReturn = NVML_SUCCESS;
            v->valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
            v->value.uiVal = action ? (unsigned int)(action->num > 0 ? action->num : 0) : 0;
        } else {
            v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        }
    }
    return leave(NVML_SUCCESS);
}
#endif

/* ---- clocks event (throttle) reasons ----------------------------------- */

static nvmlReturn_t clocks_reasons(nvmlDevice_t dev, const char *op, unsigned long long *reasons)
{
    struct gfk_gpu *g;
    nvmlReturn_t r = enter(dev, op, &g);
    if (r == NVML_SUCCESS) {
        if (!reasons) r = NVML_ERROR_INVALID_ARGUMENT;
        else *reasons = h_u64(j_get(g->json, "health"), "clocks_event_reasons", 0);
    }
    return leave(r);
}

#ifndef GFK_OLD_DRIVER
API nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t dev, unsigned long long *reasons)
{
    return clocks_reasons(dev, __func__, reasons);
}
#endif

API nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t dev, unsigned long long *reasons)
{
    return clocks_reasons(dev, __func__, reasons);
}

/* ---- temperature ------------------------------------------------------- */

/* health.temperature (default 35) for sensor 0 (GPU); NotSupported for the other sensor pynvml
 * knows (GPU_MAX), InvalidArgument past them. */
static nvmlReturn_t gpu_temperature(const struct gfk_gpu *g, unsigned sensor, int *temp)
{
    if (sensor >= NVML_TEMPERATURE_COUNT) return NVML_ERROR_INVALID_ARGUMENT;
    if (sensor != NVML_TEMPERATURE_GPU) return NVML_ERROR_NOT_SUPPORTED;
    *temp = (int)j_num(j_get(g->json, "health"), "temperature", 35);
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t dev, unsigned int sensorType, unsigned int *temp)
{
    struct gfk_gpu *g;
    int t = 0;
    nvmlReturn_t r = enter(dev, __func__, &g);
    if (r == NVML_SUCCESS) {
        if (!temp) r = NVML_ERROR_INVALID_ARGUMENT;
        else if ((r = gpu_temperature(g, sensorType, &t)) == NVML_SUCCESS) *temp = (unsigned int)t;
    }
    return leave(r);
}

API nvmlReturn_t nvmlDeviceGetTemperatureV(nvmlDevice_t dev, nvmlTemperature_v1_t *temperature)
{
    struct gfk_gpu *g;
    nvmlReturn_t r = enter(dev, __func__, &g);
    if (r == NVML_SUCCESS) {
        if (!temperature) r = NVML_ERROR_INVALID_ARGUMENT;
        else if (temperature->version != nvmlTemperature_v1) r = NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
        else r = gpu_temperature(g, temperature->sensorType, &temperature->temperature);
    }
    return leave(r);
}

/* Threshold types in pynvml's NVML_TEMPERATURE_THRESHOLD_* order. Without
 * health.temperature_thresholds the first four have the defaults below; with it,
 * exactly the types it names (a number) are supported. */
static const struct { const char *key; int dflt; } thresholds[NVML_TEMPERATURE_THRESHOLD_COUNT] = {
    {"shutdown", 92}, {"slowdown", 89}, {"mem_max", 95}, {"gpu_max", 87},
    {"acoustic_min", -1}, {"acoustic_curr", -1}, {"acoustic_max", -1}, {"gps_curr", -1},
};

API nvmlReturn_t nvmlDeviceGetTemperatureThreshold(nvmlDevice_t dev, unsigned int thresholdType,
                                                   unsigned int *temp)
{
    struct gfk_gpu *g;
    nvmlReturn_t r = enter(dev, __func__, &g);
    if (r == NVML_SUCCESS) {
        const struct jval *given = j_get(j_get(g->json, "health"), "temperature_thresholds");
        double t;
        if (!temp || thresholdType >= NVML_TEMPERATURE_THRESHOLD_COUNT) return leave(NVML_ERROR_INVALID_ARGUMENT);
        t = given && given->t == J_OBJ ? j_num(given, thresholds[thresholdType].key, -1)
                                       : thresholds[thresholdType].dflt;
        if (t < 0) r = NVML_ERROR_NOT_SUPPORTED;
        else *temp = (unsigned int)t;
    }
    return leave(r);
}

/* ---- PCIe -------------------------------------------------------------- */

static nvmlReturn_t pcie_value(nvmlDevice_t dev, const char *op, const char *key, unsigned dflt,
                               unsigned int *out)
{
    struct gfk_gpu *g;
    nvmlReturn_t r = enter(dev, op, &g);
    if (r == NVML_SUCCESS) {
        if (!out) r = NVML_ERROR_INVALID_ARGUMENT;
        else *out = h_uint(health(g, "pcie"), key, dflt);
    }
    return leave(r);
}

API nvmlReturn_t nvmlDeviceGetCurrPcieLinkGeneration(nvmlDevice_t dev, unsigned int *gen)
{
    return pcie_value(dev, __func__, "generation", 5, gen);
}

API nvmlReturn_t nvmlDeviceGetCurrPcieLinkWidth(nvmlDevice_t dev, unsigned int *width)
{
    return pcie_value(dev, __func__, "width", 16, width);
}

API nvmlReturn_t nvmlDeviceGetMaxPcieLinkGeneration(nvmlDevice_t dev, unsigned int *gen)
{
    return pcie_value(dev, __func__, "max_generation", 5, gen);
}

API nvmlReturn_t nvmlDeviceGetMaxPcieLinkWidth(nvmlDevice_t dev, unsigned int *width)
{
    return pcie_value(dev, __func__, "max_width", 16, width);
}

/* ---- NVLink ------------------------------------------------------------ */

/* health.nvlink: isActive per link; no list, NotSupported (no NVLink); a link past it, InvalidArgument. */
API nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t dev, unsigned int link, unsigned int *isActive)
{
    struct gfk_gpu *g;
    nvmlReturn_t r = enter(dev, __func__, &g);
    if (r == NVML_SUCCESS) {
        const struct jval *links = j_get(j_get(g->json, "health"), "nvlink");
        if (!isActive) r = NVML_ERROR_INVALID_ARGUMENT;
        else if (!links || links->t != J_ARR) r = NVML_ERROR_NOT_SUPPORTED;
        else if (link >= (unsigned)links->n) r = NVML_ERROR_INVALID_ARGUMENT;
        else *isActive = links->kids[link].num != 0;
    }
    return leave(r);
}

/* ---- fabric (newer drivers) -------------------------------------------- */

#ifndef GFK_OLD_DRIVER
/* "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" into 16 bytes; -1 when it is not one. */
static int parse_uuid(const char *s, unsigned char out[16])
{
    int i, n = 0;
    if (strlen(s) != 36) return -1;
    for (i = 0; i < 36; i++) {
        int c = (unsigned char)s[i], v;
        if (i == 8 || i == 13 || i == 18 || i == 23) {
            if (c != '-') return -1;
            continue;
        }
        if (c >= '0' && c <= '9') v = c - '0';
        else if (c >= 'a' && c <= 'f') v = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') v = c - 'A' + 10;
        else return -1;
        out[n / 2] = (unsigned char)(n % 2 ? out[n / 2] | v : v << 4);
        n++;
    }
    return 0;
}

/* health.fabric; no "fabric" key: NotSupported (not attached to an NVLink fabric).
 * Versions 2 and 3 (pynvml's c_nvmlGpuFabricInfo_v2_t/_v3_t); v3 adds healthSummary. */
API nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t dev, nvmlGpuFabricInfo_v3_t *info)
{
    struct gfk_gpu *g;
    nvmlReturn_t r = enter(dev, __func__, &g);
    if (r == NVML_SUCCESS) {
        const struct jval *fabric = health(g, "fabric");
        unsigned char uuid[16] = {0};
        if (!info) r = NVML_ERROR_INVALID_ARGUMENT;
        else if (info->version != nvmlGpuFabricInfo_v2 && info->version != nvmlGpuFabricInfo_v3)
            r = NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
        else if (!fabric) r = NVML_ERROR_NOT_SUPPORTED;
        else if (j_get(fabric, "cluster_uuid") && parse_uuid(j_str(fabric, "cluster_uuid", ""), uuid) < 0)
            r = NVML_ERROR_UNKNOWN;   /* a description mistake: make it loud */
        else {
            nvmlGpuFabricInfo_v2_t *v2 = (nvmlGpuFabricInfo_v2_t *)info;
            memcpy(v2->clusterUuid, uuid, sizeof(uuid));
            v2->status = error_code(j_get(fabric, "status"));   /* a number or an error name; 0 */
            v2->cliqueId = h_uint(fabric, "clique_id", 0);
            v2->state = h_uint(fabric, "state", 3);   /* NVML_GPU_FABRIC_STATE_COMPLETED */
            v2->healthMask = h_uint(fabric, "health_mask", 0);
            if (info->version == nvmlGpuFabricInfo_v3)   /* NVML_GPU_FABRIC_HEALTH_SUMMARY_HEALTHY */
                info->healthSummary = (unsigned char)h_uint(fabric, "health_summary", 1);
        }
    }
    return leave(r);
}
#endif
