/*
 * Shared by the fake libnvidia-cfg.so.1 and libnvidia-ml.so.1 of the
 * gpufleet driver kit (tests only): a small JSON reader and the model of a
 * fake host's description (see tests/driverkit/README.md).
 *
 * The description lives at GFK_DESC_PATH inside the fake host (the tree's
 * proc/driver is bind-mounted over /proc/driver), so it is present exactly
 * where the fake driver is "loaded". GPUFLEET_FAKEDRIVER_ROOT=<host dir>
 * prefixes every fixed path (description, /dev, the daemon's socket, with
 * /var/run/ read as /run/) for use without a mount namespace.
 *
 * Everything here is static: each library gets its own copy. Nothing is ever
 * written to file descriptors 0-2.
 */
#ifndef GFK_HOSTDESC_H
#define GFK_HOSTDESC_H

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define GFK_DESC_PATH "/proc/driver/nvidia/gpufleet-fakedriver/host.json"
#define GFK_ROOT_ENV "GPUFLEET_FAKEDRIVER_ROOT"
#define GFK_MAX_GPUS 64

/* ---- JSON ------------------------------------------------------------ */

enum jtype { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ };

struct jval {
    enum jtype t;
    double num;
    char *str;
    struct jval *kids;
    char **keys;
    int n;
};

struct jparser { const char *p; int err; };

static void j_ws(struct jparser *jp) { while (*jp->p && isspace((unsigned char)*jp->p)) jp->p++; }

static int j_value(struct jparser *jp, struct jval *out, int depth);

static char *j_string(struct jparser *jp)
{
    size_t cap = 32, len = 0;
    char *s;
    if (*jp->p != '"') { jp->err = 1; return NULL; }
    jp->p++;
    s = malloc(cap);
    if (!s) { jp->err = 1; return NULL; }
    while (*jp->p && *jp->p != '"') {
        char c = *jp->p++;
        if (c == '\\') {
            c = *jp->p++;
            switch (c) {
            case 'n': c = '\n'; break;
            case 't': c = '\t'; break;
            case 'r': c = '\r'; break;
            case 'b': c = '\b'; break;
            case 'f': c = '\f'; break;
            case 'u': {
                unsigned v = 0; int i;
                for (i = 0; i < 4; i++) {
                    char h = *jp->p++;
                    v <<= 4;
                    if (h >= '0' && h <= '9') v |= (unsigned)(h - '0');
                    else if (h >= 'a' && h <= 'f') v |= (unsigned)(h - 'a' + 10);
                    else if (h >= 'A' && h <= 'F') v |= (unsigned)(h - 'A' + 10);
                    else { jp->err = 1; free(s); return NULL; }
                }
                c = v < 0x80 ? (char)v : '?';
                break;
            }
            case '\0': jp->err = 1; free(s); return NULL;
            default: break; /* \" \\ \/ */
            }
        }
        if (len + 2 > cap) {
            char *ns = realloc(s, cap *= 2);
            if (!ns) { free(s); jp->err = 1; return NULL; }
            s = ns;
        }
        s[len++] = c;
    }
    if (*jp->p != '"') { free(s); jp->err = 1; return NULL; }
    jp->p++;
    s[len] = '\0';
    return s;
}

static int j_push(struct jval *v, char *key, struct jval *kid)
{
    struct jval *nk = realloc(v->kids, sizeof(*nk) * (size_t)(v->n + 1));
    if (!nk) return -1;
    v->kids = nk;
    if (v->t == J_OBJ) {
        char **keys = realloc(v->keys, sizeof(*keys) * (size_t)(v->n + 1));
        if (!keys) return -1;
        v->keys = keys;
        v->keys[v->n] = key;
    }
    v->kids[v->n++] = *kid;
    return 0;
}

static int j_value(struct jparser *jp, struct jval *out, int depth)
{
    memset(out, 0, sizeof(*out));
    if (depth > 32) { jp->err = 1; return -1; }
    j_ws(jp);
    switch (*jp->p) {
    case '{':
    case '[': {
        char close = *jp->p == '{' ? '}' : ']';
        out->t = *jp->p == '{' ? J_OBJ : J_ARR;
        jp->p++;
        j_ws(jp);
        if (*jp->p == close) { jp->p++; return 0; }
        for (;;) {
            struct jval kid;
            char *key = NULL;
            j_ws(jp);
            if (out->t == J_OBJ) {
                key = j_string(jp);
                if (!key) return -1;
                j_ws(jp);
                if (*jp->p != ':') { free(key); jp->err = 1; return -1; }
                jp->p++;
            }
            if (j_value(jp, &kid, depth + 1) < 0 || j_push(out, key, &kid) < 0) {
                free(key); jp->err = 1; return -1;
            }
            j_ws(jp);
            if (*jp->p == ',') { jp->p++; continue; }
            if (*jp->p == close) { jp->p++; return 0; }
            jp->err = 1;
            return -1;
        }
    }
    case '"':
        out->t = J_STR;
        out->str = j_string(jp);
        return out->str ? 0 : -1;
    case 't': if (!strncmp(jp->p, "true", 4)) { out->t = J_BOOL; out->num = 1; jp->p += 4; return 0; } break;
    case 'f': if (!strncmp(jp->p, "false", 5)) { out->t = J_BOOL; jp->p += 5; return 0; } break;
    case 'n': if (!strncmp(jp->p, "null", 4)) { out->t = J_NULL; jp->p += 4; return 0; } break;
    default: {
        char *end;
        out->t = J_NUM;
        out->num = strtod(jp->p, &end);
        if (end != jp->p) { jp->p = end; return 0; }
    }
    }
    jp->err = 1;
    return -1;
}

static void j_free(struct jval *v)
{
    int i;
    for (i = 0; i < v->n; i++) {
        j_free(&v->kids[i]);
        if (v->keys) free(v->keys[i]);
    }
    free(v->kids);
    free(v->keys);
    free(v->str);
    memset(v, 0, sizeof(*v));
}

static const struct jval *j_get(const struct jval *obj, const char *key)
{
    int i;
    if (!obj || obj->t != J_OBJ) return NULL;
    for (i = 0; i < obj->n; i++)
        if (!strcmp(obj->keys[i], key)) return &obj->kids[i];
    return NULL;
}

static const char *j_str(const struct jval *obj, const char *key, const char *dflt)
{
    const struct jval *v = j_get(obj, key);
    return v && v->t == J_STR ? v->str : dflt;
}

static double j_num(const struct jval *obj, const char *key, double dflt)
{
    const struct jval *v = j_get(obj, key);
    return v && (v->t == J_NUM || v->t == J_BOOL) ? v->num : dflt;
}

/* ---- paths ----------------------------------------------------------- */

/* out = $GPUFLEET_FAKEDRIVER_ROOT + path (path is absolute). */
static void gfk_path(char *out, size_t size, const char *path)
{
    const char *root = getenv(GFK_ROOT_ENV);
    if (root && *root) {
        /* the tree has run/ only; /var/run is a link to /run in the host */
        if (!strncmp(path, "/var/run/", 9)) path += 4;
        snprintf(out, size, "%s%s", root, path);
    } else {
        snprintf(out, size, "%s", path);
    }
}

/* open() that never hands back fd 0-2 (a daemon may have closed stdio). */
static int gfk_open(const char *path, int flags, mode_t mode)
{
    int fd = open(path, flags | O_CLOEXEC, mode);
    if (fd >= 0 && fd < 3) {
        int nfd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
        close(fd);
        fd = nfd;
    }
    return fd;
}

/* The rest of an open file, NUL-terminated (malloc'd); fd stays open. */
static char *gfk_read_fd(int fd)
{
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        ssize_t r;
        if (len + 4096 + 1 > cap) {
            char *nb = realloc(buf, cap = len + 8192);
            if (!nb) { free(buf); return NULL; }
            buf = nb;
        }
        r = read(fd, buf + len, cap - len - 1);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        len += (size_t)r;
    }
    if (!buf) buf = calloc(1, 1);
    else buf[len] = '\0';
    return buf;
}

static char *gfk_read_file(const char *path)
{
    char *buf;
    int fd = gfk_open(path, O_RDONLY, 0);
    if (fd < 0) return NULL;
    buf = gfk_read_fd(fd);
    close(fd);
    return buf;
}

/* ---- the host description ------------------------------------------- */

struct gfk_gpu {
    const struct jval *json;
    int index;
    unsigned domain, bus, device, function;
    unsigned minor;
    const char *name, *uuid;
    char bdf[32];          /* 0000:01:00.0 */
};

/* Which file a parsed description came from (gfk_host_refresh). */
struct gfk_stamp {
    char path[4096];
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtim, ctim;
};

struct gfk_host {
    struct jval root;
    int loaded;
    int ngpus;
    struct gfk_gpu gpus[GFK_MAX_GPUS];
    struct gfk_stamp stamp;   /* valid while loaded */
};

/* Parse "00000000:01:00.0", "0000:01:00.0", "01:00.0" (case-insensitive). */
static int gfk_parse_bdf(const char *s, unsigned *domain, unsigned *bus,
                         unsigned *device, unsigned *function)
{
    unsigned a, b, c, d;
    char tail;
    if (!s) return -1;
    if (sscanf(s, "%x:%x:%x.%x%c", &a, &b, &c, &d, &tail) == 4) {
        const char *colon = strchr(s, ':');
        if (colon - s > 8) return -1;
    } else if (sscanf(s, "%x:%x.%x%c", &b, &c, &d, &tail) == 3) {
        a = 0;
    } else {
        return -1;
    }
    if (b > 0xff || c > 0x1f || d > 7) return -1;
    *domain = a; *bus = b; *device = c; *function = d;
    return 0;
}

static void gfk_host_free(struct gfk_host *h)
{
    j_free(&h->root);
    memset(h, 0, sizeof(*h));
}

static void gfk_desc_path(char *path, size_t size)
{
    const char *env = getenv("GPUFLEET_FAKEDRIVER_DESCRIPTION");
    if (env && *env) snprintf(path, size, "%s", env);
    else gfk_path(path, size, GFK_DESC_PATH);
}

/* Parse `text` into h (freed first): 0, or -2 when it is not a valid description. */
static int gfk_host_parse(struct gfk_host *h, const char *text)
{
    struct jparser jp;
    const struct jval *gpus;
    int i;

    gfk_host_free(h);
    jp.p = text; jp.err = 0;
    if (j_value(&jp, &h->root, 0) < 0 || h->root.t != J_OBJ) {
        j_free(&h->root); return -2;
    }
    gpus = j_get(&h->root, "gpus");
    if (gpus && gpus->t == J_ARR) {
        for (i = 0; i < gpus->n && h->ngpus < GFK_MAX_GPUS; i++) {
            struct gfk_gpu *g = &h->gpus[h->ngpus];
            const struct jval *gj = &gpus->kids[i];
            if (gj->t != J_OBJ) continue;
            if (gfk_parse_bdf(j_str(gj, "pci_bus_id", NULL), &g->domain, &g->bus,
                              &g->device, &g->function) < 0) {
                gfk_host_free(h); return -2;
            }
            g->json = gj;
            g->index = h->ngpus;
            g->minor = (unsigned)j_num(gj, "minor", h->ngpus);
            g->name = j_str(gj, "name", "NVIDIA Fake GPU");
            g->uuid = j_str(gj, "uuid", "GPU-00000000-0000-0000-0000-000000000000");
            snprintf(g->bdf, sizeof(g->bdf), "%04x:%02x:%02x.%x",
                     g->domain, g->bus, g->device, g->function);
            h->ngpus++;
        }
    }
    h->loaded = 1;
    return 0;
}

/* 0 on success, -1 when the description is missing, -2 when it is invalid. */
__attribute__((unused)) static int gfk_host_load(struct gfk_host *h)
{
    char path[4096];
    char *text;
    int r;

    gfk_host_free(h);
    gfk_desc_path(path, sizeof(path));
    text = gfk_read_file(path);
    if (!text) return -1;
    r = gfk_host_parse(h, text);
    free(text);
    return r;
}

/* gfk_host_load, but the description is parsed again only when its file changed: another
 * path, or another st_dev, st_ino, st_size, st_mtim or st_ctim than the file last parsed.
 * fakehost.write_description replaces the file by rename: the new file is created while the
 * old one still exists, so it has another inode. A rewrite in place changes the size or the
 * mtime/ctime (fine-grained on this kernel once stat has looked at them: multigrain
 * timestamps). The stamp comes from fstat on the descriptor the text is read from, so it is
 * the stamp of the bytes parsed. A description that is missing or invalid is not kept. */
__attribute__((unused)) static int gfk_host_refresh(struct gfk_host *h)
{
    char path[4096];
    struct stat st;
    char *text;
    int fd, r;

    gfk_desc_path(path, sizeof(path));
    fd = gfk_open(path, O_RDONLY, 0);
    if (fd < 0) { gfk_host_free(h); return -1; }
    if (fstat(fd, &st) < 0) { close(fd); gfk_host_free(h); return -1; }
    if (h->loaded && !strcmp(h->stamp.path, path) && h->stamp.dev == st.st_dev &&
        h->stamp.ino == st.st_ino && h->stamp.size == st.st_size &&
        h->stamp.mtim.tv_sec == st.st_mtim.tv_sec && h->stamp.mtim.tv_nsec == st.st_mtim.tv_nsec &&
        h->stamp.ctim.tv_sec == st.st_ctim.tv_sec && h->stamp.ctim.tv_nsec == st.st_ctim.tv_nsec) {
        close(fd);
        return 0;
    }
    text = gfk_read_fd(fd);
    close(fd);
    if (!text) { gfk_host_free(h); return -1; }
    r = gfk_host_parse(h, text);
    free(text);
    if (r == 0) {
        snprintf(h->stamp.path, sizeof(h->stamp.path), "%s", path);
        h->stamp.dev = st.st_dev;
        h->stamp.ino = st.st_ino;
        h->stamp.size = st.st_size;
        h->stamp.mtim = st.st_mtim;
        h->stamp.ctim = st.st_ctim;
    }
    return r;
}

__attribute__((unused)) static struct gfk_gpu *gfk_find_gpu(struct gfk_host *h, unsigned domain,
                                    unsigned bus, unsigned device)
{
    int i;
    for (i = 0; i < h->ngpus; i++)
        if (h->gpus[i].domain == domain && h->gpus[i].bus == bus &&
            h->gpus[i].device == device)
            return &h->gpus[i];
    return NULL;
}

/* The error injected for `op` (per GPU first, then host-wide; "any" matches
 * every op). Returns the jval (string name or number) or NULL. */
__attribute__((unused)) static const struct jval *gfk_injected(const struct gfk_host *h,
                                       const struct gfk_gpu *g, const char *op)
{
    const struct jval *v;
    if (g) {
        const struct jval *ge = j_get(g->json, "errors");
        if ((v = j_get(ge, op)) && v->t != J_NULL) return v;
        if ((v = j_get(ge, "any")) && v->t != J_NULL) return v;
    }
    {
        const struct jval *he = j_get(&h->root, "errors");
        if ((v = j_get(he, op)) && v->t != J_NULL) return v;
        if (g && (v = j_get(he, "any")) && v->t != J_NULL) return v;
    }
    return NULL;
}

/* Append one line to the description's cfg_log (created 0666). */
__attribute__((unused)) static void gfk_log(const struct gfk_host *h, const char *fmt, const char *bdf)
{
    char rel[4096], path[4096], line[256];
    const char *log = j_str(&h->root, "cfg_log",
                            "/proc/driver/nvidia/gpufleet-fakedriver/cfg.log");
    int fd, n;
    snprintf(rel, sizeof(rel), "%s", log);
    gfk_path(path, sizeof(path), rel);
    fd = gfk_open(path, O_WRONLY | O_APPEND | O_CREAT, 0666);
    if (fd < 0) return;
    n = snprintf(line, sizeof(line), fmt, bdf, (int)getpid(), (int)geteuid());
    if (n > 0) {
        ssize_t ignored = write(fd, line, (size_t)n);
        (void)ignored;
    }
    close(fd);
}

#endif
