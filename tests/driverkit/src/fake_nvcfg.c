/*
 * Fake libnvidia-cfg.so.1 for the gpufleet driver kit (tests only).
 *
 * Implements exactly what nvidia-persistenced uses: nvCfgGetPciDevices,
 * nvCfgOpenPciDevice, nvCfgCloseDevice (1 = success, 0 = failure). GPUs come
 * from the fake host's description; every open and close is appended to the
 * description's "cfg_log" as "open|close <bdf> pid=<pid> euid=<euid>" so that
 * tests can see which GPUs the daemon holds. Injected errors (per GPU or
 * host-wide): "cfg_enumerate" makes nvCfgGetPciDevices fail, "cfg_open" makes
 * nvCfgOpenPciDevice fail.
 */
#include "hostdesc.h"

typedef struct {
    int domain, bus, slot, function;
} NvCfgPciDevice;

struct nvcfg_handle {
    unsigned magic;
    char bdf[32];
};

#define HANDLE_MAGIC 0x6766636bu

__attribute__((visibility("default")))
int nvCfgGetPciDevices(int *n, NvCfgPciDevice **devs)
{
    struct gfk_host h = {0};
    NvCfgPciDevice *arr;
    int i;
    if (!n || !devs) return 0;
    if (gfk_host_load(&h) < 0) return 0;
    if (gfk_injected(&h, NULL, "cfg_enumerate")) { gfk_host_free(&h); return 0; }
    arr = calloc((size_t)(h.ngpus ? h.ngpus : 1), sizeof(*arr));
    if (!arr) { gfk_host_free(&h); return 0; }
    for (i = 0; i < h.ngpus; i++) {
        arr[i].domain = (int)h.gpus[i].domain;
        arr[i].bus = (int)h.gpus[i].bus;
        arr[i].slot = (int)h.gpus[i].device;
        arr[i].function = (int)h.gpus[i].function;
    }
    *n = h.ngpus;
    *devs = arr;
    gfk_host_free(&h);
    return 1;
}

__attribute__((visibility("default")))
int nvCfgOpenPciDevice(int domain, int bus, int slot, int function, void **handle)
{
    struct gfk_host h = {0};
    struct gfk_gpu *g;
    struct nvcfg_handle *nh;
    (void)function;
    if (!handle) return 0;
    if (gfk_host_load(&h) < 0) return 0;
    g = gfk_find_gpu(&h, (unsigned)domain, (unsigned)bus, (unsigned)slot);
    if (!g || gfk_injected(&h, g, "cfg_open")) { gfk_host_free(&h); return 0; }
    nh = calloc(1, sizeof(*nh));
    if (!nh) { gfk_host_free(&h); return 0; }
    nh->magic = HANDLE_MAGIC;
    snprintf(nh->bdf, sizeof(nh->bdf), "%s", g->bdf);
    gfk_log(&h, "open %s pid=%d euid=%d\n", nh->bdf);
    gfk_host_free(&h);
    *handle = nh;
    return 1;
}

__attribute__((visibility("default")))
int nvCfgCloseDevice(void *handle)
{
    struct gfk_host h = {0};
    struct nvcfg_handle *nh = handle;
    if (!nh || nh->magic != HANDLE_MAGIC) return 0;
    if (gfk_host_load(&h) == 0) gfk_log(&h, "close %s pid=%d euid=%d\n", nh->bdf);
    gfk_host_free(&h);
    nh->magic = 0;
    free(nh);
    return 1;
}
