/*
 * numa-seccomp: run a command (NVIDIA's nvidia-persistenced) under a seccomp
 * filter that answers the driver's two NUMA ioctls with 0 without running
 * them, so a version-1 SetPersistenceMode behaves as on a non-NUMA host on
 * the fake driver (whose /dev/nvidiaN are regular files). Part of the gpufleet
 * driver kit (tests only).
 *
 *   numa-seccomp [--keep-sigpipe] -- COMMAND [ARG...]
 *
 * SIGPIPE is ignored in COMMAND unless --keep-sigpipe is given (NVIDIA's 535
 * daemon dies of SIGPIPE when a client disconnects before its reply).
 */
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#define NV_NUMA_INFO_IOCTL 0xc23046d7u
#define NV_NUMA_STATUS_IOCTL 0xc00446d8u

int main(int argc, char **argv)
{
    int i = 1, keep_sigpipe = 0;
    struct sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_ioctl, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        /* low 32 bits of the request (the kernel ignores the high half) */
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[1])),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, NV_NUMA_INFO_IOCTL, 2, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, NV_NUMA_STATUS_IOCTL, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | 0), /* returns 0 */
    };
    struct sock_fprog prog = { sizeof(filter) / sizeof(filter[0]), filter };

    for (; i < argc && argv[i][0] == '-'; i++) {
        if (!strcmp(argv[i], "--")) { i++; break; }
        if (!strcmp(argv[i], "--keep-sigpipe")) { keep_sigpipe = 1; continue; }
        fprintf(stderr, "numa-seccomp: unknown option %s\n", argv[i]);
        return 2;
    }
    if (i >= argc) {
        fprintf(stderr, "usage: numa-seccomp [--keep-sigpipe] -- COMMAND [ARG...]\n");
        return 2;
    }
    if (!keep_sigpipe) signal(SIGPIPE, SIG_IGN);
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
        prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) < 0) {
        perror("numa-seccomp: installing the seccomp filter");
        return 1;
    }
    execvp(argv[i], argv + i);
    fprintf(stderr, "numa-seccomp: cannot run %s: %s\n", argv[i], strerror(errno));
    return 127;
}
