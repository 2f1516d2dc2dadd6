/*
 * libgpufleet-standin.so: the fake driver's stand-in for open() on GPU device
 * nodes, for persistence daemons only. Part of the gpufleet driver kit (tests
 * only); preloaded (LD_PRELOAD in fakehost's nsrun, /etc/ld.so.preload on lab
 * hosts).
 *
 * The kit lays out /dev/nvidiaN as the character devices a loaded driver
 * gives (195:N), but no kernel driver answers them: open() fails with ENXIO.
 * A persistence daemon (NVIDIA's nvidia-persistenced, the collection's
 * gpufleet-persistenced) exists to hold those devices open, so before its
 * main() this constructor gives that one process, and what it starts, a mount
 * namespace of its own (unshare(CLONE_NEWNS), no fork: Upstart's "expect
 * fork" counts forks; mounts from the host still propagate in, none go out)
 * in which each /dev/nvidiaN that fails with ENXIO is covered by the fake
 * driver's regular stand-in file
 * /proc/driver/nvidia/gpufleet-fakedriver/stand-in/nvidiaN (present exactly
 * where the fake driver is "loaded", like its host.json). The daemon then
 * opens /dev/nvidiaN (its /proc/PID/fd links still read /dev/nvidiaN); every
 * other process, the container toolkit included, sees the character device.
 *
 * It does nothing in any other program, in a process that is not root, where
 * an open succeeds (a real driver), or where the stand-in is missing, and it
 * never prints: a daemon on a real host behaves exactly as without it.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#define NVIDIA_MAJOR 195
#define STANDIN_DIR "/proc/driver/nvidia/gpufleet-fakedriver/stand-in/"
#define MAX_NODES 64

static const char *base(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

static int is_daemon_name(const char *path)
{
    const char *b = base(path);
    return !strcmp(b, "nvidia-persistenced") || !strcmp(b, "gpufleet-persistenced");
}

/* NVIDIA's binary, or the bundled script run by a Python (argv[1]). */
static int is_persistence_daemon(void)
{
    char buf[4096];
    ssize_t n;
    size_t first;
    int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0) return 0;
    buf[n] = '\0';
    if (is_daemon_name(buf)) return 1;
    first = strlen(buf) + 1;
    return (size_t)n > first && !strncmp(base(buf), "python", 6) && is_daemon_name(buf + first);
}

/* nvidia<digits>: a GPU's node (not nvidiactl, nvidia-uvm, ...). */
static int is_gpu_node(const char *name)
{
    const char *p = name + 6;
    if (strncmp(name, "nvidia", 6) || !*p) return 0;
    for (; *p; p++)
        if (*p < '0' || *p > '9') return 0;
    return 1;
}

__attribute__((constructor)) static void gpufleet_standin(void)
{
    char nodes[MAX_NODES][32];
    int count = 0, i, saved = errno;
    DIR *dev;
    struct dirent *entry;

    if (geteuid() != 0 || !is_persistence_daemon() || !(dev = opendir("/dev"))) goto out;
    while ((entry = readdir(dev)) && count < MAX_NODES) {
        char node[300], standin[400];
        struct stat st;
        int fd;
        if (!is_gpu_node(entry->d_name) || strlen(entry->d_name) >= sizeof(nodes[0])) continue;
        snprintf(node, sizeof(node), "/dev/%s", entry->d_name);
        snprintf(standin, sizeof(standin), STANDIN_DIR "%s", entry->d_name);
        if (stat(node, &st) < 0 || !S_ISCHR(st.st_mode) || major(st.st_rdev) != NVIDIA_MAJOR) continue;
        if (stat(standin, &st) < 0 || !S_ISREG(st.st_mode)) continue;
        fd = open(node, O_RDWR | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
        if (fd >= 0) { close(fd); continue; } /* a driver answers: nothing to stand in for */
        if (errno != ENXIO) continue;
        snprintf(nodes[count++], sizeof(nodes[0]), "%s", entry->d_name);
    }
    closedir(dev);
    if (!count || unshare(CLONE_NEWNS) < 0) goto out;
    if (mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) < 0) goto out;
    for (i = 0; i < count; i++) {
        char node[300], standin[400];
        snprintf(node, sizeof(node), "/dev/%s", nodes[i]);
        snprintf(standin, sizeof(standin), STANDIN_DIR "%s", nodes[i]);
        mount(standin, node, NULL, MS_BIND, NULL);
    }
out:
    errno = saved;
}
